// The SSE parser against the standard's rules, and events() against a hand-written stream
// (a local node:http server on 127.0.0.1) for what a real tether serve never sends: CR line
// ends, records cut mid-way, a malformed record, a 503 with Retry-After, nobody listening.
import assert from "node:assert/strict";
import http from "node:http";
import { describe, test } from "node:test";

import { SseParser, StreamGaveUpError, TetherClient } from "../dist/index.js";

/** Every message the parser makes of `chunks`, fed one at a time. */
function parse(...chunks) {
  const parser = new SseParser();
  const out = chunks.flatMap((chunk) => parser.feed(chunk));
  parser.end();
  return { out, parser };
}

describe("SseParser", () => {
  test("lines end at LF, CR or CRLF, and a CRLF split across chunks is one line end", () => {
    const want = [
      { event: "record", data: "a", id: "1", lastEventId: "1" },
      { event: "record", data: "b", id: "2", lastEventId: "2" },
      { event: "record", data: "c", id: "3", lastEventId: "3" },
    ];
    assert.deepEqual(parse("event: record\nid: 1\ndata: a\n\nevent: record\rid: 2\rdata: b\r\revent: record\r\nid: 3\r\ndata: c\r\n\r\n").out, want);
    // Each character in its own chunk: the CR and its LF never make two line ends.
    const text = "event: record\r\nid: 1\r\ndata: a\r\n\r\nevent: record\rid: 2\rdata: b\r\r";
    assert.deepEqual(parse(...text).out, want.slice(0, 2));
    // CR at the end of a chunk, then a blank line's CR LF: one line end, then a blank line.
    assert.deepEqual(parse("data: x\r", "\n\r\n").out, [{ event: "message", data: "x", id: null, lastEventId: "" }]);
  });

  test("fields: one space dropped, data lines joined, comments, unknown fields, no colon", () => {
    const { out } = parse(": a comment\nevent:live\ndata:  two spaces\ndata\ndata: last\nfoo: bar\n\n");
    assert.deepEqual(out, [{ event: "live", data: " two spaces\n\nlast", id: null, lastEventId: "" }]);
  });

  test("no data, no event; an id persists; an id with NUL is ignored; retry takes digits only", () => {
    const { out, parser } = parse("retry: 1000\n: hello\n\n", "id: 7\nevent: record\n\n", "data: {}\n\n", "id: 8\0\ndata: x\n\n", "retry: 5s\n\n");
    assert.deepEqual(out, [
      { event: "message", data: "{}", id: null, lastEventId: "7" },
      { event: "message", data: "x", id: null, lastEventId: "7" },
    ]);
    assert.equal(parser.retryMs, 1000);
  });

  test("an event the stream ends in the middle of is discarded; a multi-byte character split across chunks survives", () => {
    assert.deepEqual(parse("data: whole\n\ndata: cut off\n").out.map((m) => m.data), ["whole"]);
    const bytes = new TextEncoder().encode("\uFEFFdata: h\u00e9llo \u{1F600}\n\n");
    const decoder = new TextDecoder();
    const parser = new SseParser();
    const out = [];
    for (const byte of bytes) out.push(...parser.feed(decoder.decode(Uint8Array.of(byte), { stream: true })));
    assert.deepEqual(out.map((m) => m.data), ["h\u00e9llo \u{1F600}"]); // and the BOM is gone
  });
});

/** A server whose answers `handler(request, attempt)` writes; resolves with its URL. */
async function fakeServer(handler) {
  let attempt = 0;
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push({ url: req.url, lastEventId: req.headers["last-event-id"] ?? null });
    handler(req, res, attempt++);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, seen, close: () => new Promise((r) => { server.close(r); server.closeAllConnections(); }) };
}

const record = (seq, body = "node_completed", end = "\n") =>
  `id: ${seq}${end}event: record${end}data: ${JSON.stringify({ seq, body, run_id: "r", format: 1, at_us: 0 })}${end}${end}`;

describe("events() against a hand-written stream", () => {
  test("CR line ends, a record cut mid-way, a malformed record, a 503: each record once", async () => {
    const server = await fakeServer((req, res, attempt) => {
      if (attempt === 2) {
        res.writeHead(503, { "Content-Type": "application/json", "Retry-After": "0" });
        res.end(JSON.stringify({ error: { type: "run_held", message: "elsewhere" } }));
        return;
      }
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      if (attempt === 0) {
        res.write("retry: 10\r\r" + record(0, "run_started", "\r") + record(1, "node_completed", "\r\n"));
        res.end(record(2).slice(0, 20)); // the server goes away mid-record
      } else if (attempt === 1) {
        res.write(record(1)); // sent again: dropped
        res.end("id: 2\nevent: record\ndata: {\"seq\": 3}\n\n"); // id and seq disagree
      } else {
        res.write(record(2) + 'event: live\ndata: {"type":"token","text":"hi","run_id":"r","node_id":"n"}\n\n');
        res.end(record(3, "run_finished") + 'event: end\ndata: {"status":"succeeded"}\n\n');
      }
    });
    try {
      const client = new TetherClient({ baseUrl: server.url, token: "t" });
      const got = [];
      const reasons = [];
      for await (const event of client.events("r", { tokens: true, minDelayMs: 1, onReconnect: (i) => reasons.push(i.reason) })) {
        got.push(event.kind === "record" ? event.seq : event.data.text);
      }
      assert.deepEqual(got, [0, 1, 2, "hi", 3]);
      assert.deepEqual(server.seen.map((s) => s.lastEventId), [null, "1", "1", "1"]);
      assert.ok(server.seen.every((s) => s.url === "/v1/runs/r/events?tokens=1"));
      assert.deepEqual(reasons, ["cut", "cut", "error"]);
    } finally {
      await server.close();
    }
  });

  test("nobody answers: it backs off, then gives up naming the seq to resume after", async () => {
    const server = await fakeServer(() => {});
    const url = server.url;
    await server.close(); // the port is closed now: every connection is refused
    const client = new TetherClient({ baseUrl: url, token: "t" });
    const delays = [];
    const events = client.events("r", {
      after: 41,
      minDelayMs: 5,
      maxDelayMs: 40,
      giveUpAfterMs: 300,
      onReconnect: (info) => delays.push(info.delayMs),
    });
    await assert.rejects(events.next(), (e) => e instanceof StreamGaveUpError && e.lastSeq === 41);
    assert.ok(delays.length >= 3, String(delays));
    assert.ok(delays.every((d) => d <= 40), String(delays)); // capped
    assert.ok(delays[0] <= 5 && delays[2] >= 10, String(delays)); // and growing
  });

  test("an abort signal stops it; break closes the connection", async () => {
    let closed = 0;
    const server = await fakeServer((req, res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write(record(0) + record(1));
      req.on("close", () => (closed += 1)); // never ends by itself
    });
    try {
      const client = new TetherClient({ baseUrl: server.url, token: "t" });
      for await (const event of client.events("r")) if (event.seq === 1) break;
      const controller = new AbortController();
      const events = client.events("r");
      assert.equal((await events.next()).value.seq, 0);
      controller.abort(new Error("enough"));
      const stopped = client.events("r", { signal: controller.signal });
      await assert.rejects(stopped.next(), /enough/);
      await events.return();
      while (closed < 2) await new Promise((resolve) => setImmediate(resolve));
    } finally {
      await server.close();
    }
  });
});
