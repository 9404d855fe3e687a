/**
 * A Server-Sent Events parser that follows the WHATWG HTML standard's "event stream
 * interpretation": lines end at CR, LF or CRLF (a CRLF split across two chunks is one line
 * end), a blank line dispatches, `:` starts a comment, one space after the colon is
 * dropped, `data` lines join with LF, an `id` holding NUL is ignored, `retry` takes only
 * ASCII digits, and an event cut off before its blank line is never dispatched.
 *
 * Feed it text (decode bytes with one `TextDecoder` in streaming mode, which also drops a
 * leading byte order mark, as the standard asks).
 */

export interface SseMessage {
  /** The `event` field, or "message" when the message named none. */
  event: string;
  /** The `data` lines joined with "\n". */
  data: string;
  /** The `id` this message carried itself, or null (live events carry none). */
  id: string | null;
  /** The stream's last event id as the standard keeps it (it persists across messages). */
  lastEventId: string;
}

const LINE_END = /[\r\n]/g;

export class SseParser {
  /** The reconnection time the server asked for with `retry:` (ms), or null. */
  retryMs: number | null = null;
  lastEventId = "";
  private partial = "";
  private afterCR = false;
  private data = "";
  private hasData = false;
  private eventType = "";
  private id: string | null = null;

  /** The messages completed by this chunk of text, in order. */
  feed(text: string): SseMessage[] {
    const out: SseMessage[] = [];
    let start = 0;
    if (this.afterCR && text.length > 0) {
      // The previous chunk ended on CR: an LF starting this one completes the same CRLF.
      if (text.charCodeAt(0) === 10) start = 1;
      this.afterCR = false;
    }
    LINE_END.lastIndex = start;
    for (let m = LINE_END.exec(text); m !== null; m = LINE_END.exec(text)) {
      const end = m.index;
      const line = this.partial + text.slice(start, end);
      this.partial = "";
      this.line(line, out);
      start = end + 1;
      if (text.charCodeAt(end) === 13) {
        if (end + 1 === text.length) this.afterCR = true;
        else if (text.charCodeAt(end + 1) === 10) start = end + 2;
      }
      LINE_END.lastIndex = start;
    }
    if (start < text.length) this.partial += text.slice(start);
    return out;
  }

  /** The stream ended: an event not completed by a blank line is discarded. */
  end(): void {
    this.partial = "";
    this.afterCR = false;
    this.reset();
  }

  private reset(): void {
    this.data = "";
    this.hasData = false;
    this.eventType = "";
    this.id = null;
  }

  private line(line: string, out: SseMessage[]): void {
    if (line === "") {
      this.dispatch(out);
      return;
    }
    if (line.charCodeAt(0) === 58 /* ":" */) return; // a comment
    const colon = line.indexOf(":");
    let field = line;
    let value = "";
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.charCodeAt(0) === 32 /* " " */) value = value.slice(1);
    }
    switch (field) {
      case "event":
        this.eventType = value;
        break;
      case "data":
        this.data += value + "\n";
        this.hasData = true;
        break;
      case "id":
        if (!value.includes("\0")) {
          this.lastEventId = value;
          this.id = value;
        }
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.retryMs = Number(value);
        break;
      default: // unknown fields are ignored
    }
  }

  private dispatch(out: SseMessage[]): void {
    if (!this.hasData) {
      // The standard dispatches nothing without data (a `retry:` or a comment alone).
      this.reset();
      return;
    }
    const data = this.data.endsWith("\n") ? this.data.slice(0, -1) : this.data;
    out.push({
      event: this.eventType || "message",
      data,
      id: this.id,
      lastEventId: this.lastEventId,
    });
    this.reset();
  }
}
