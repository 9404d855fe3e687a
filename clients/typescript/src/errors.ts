/** The `error.type` values tether serve answers with; any other string may come too. */
export type KnownErrorCode =
  | "unauthorized"
  | "http"
  | "internal"
  | "unknown_run"
  | "bad_run_id"
  | "run_id_required"
  | "bad_after"
  | "bad_at"
  | "bad_agent"
  | "bad_status"
  | "bad_key"
  | "bad_idempotency_key"
  | "idempotency_key_reused"
  | "unknown_agent"
  | "validation"
  | "invalid_json"
  | "invalid_unicode"
  | "non_finite_number"
  | "too_deep"
  | "too_large"
  | "too_many_requests"
  | "run_exists"
  | "run_finished"
  | "run_not_failed"
  | "run_busy"
  | "run_held"
  | "budget_spent"
  | "bad_input"
  | "model_not_configured"
  | "bad_fork"
  | "bad_tlog"
  | "import_conflict"
  | "cannot_export"
  | "unknown_seq"
  | "cannot_upgrade"
  | "bad_schedule"
  | "schedule_exists"
  | "unknown_schedule"
  | "bad_limit"
  | "unknown_limit"
  | "unknown_wait"
  | "wait_completed"
  | "bad_payload"
  | "event_refused"
  | "unknown_blob"
  | "blob_missing"
  | "no_blob_store"
  | "blob_unavailable"
  | "store_unavailable"
  | "store_full"
  | "corrupt_record";

// `string & {}` keeps editors suggesting the known codes while allowing new ones.
export type ErrorCode = KnownErrorCode | (string & {});

/** The base of every error this package throws. */
export class TetherError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The server refused a request: `status` and `code` (the API's `error.type`) say how. */
export class TetherApiError extends TetherError {
  readonly status: number;
  readonly code: ErrorCode;
  readonly details: unknown;
  /** Seconds to wait before trying again, from `Retry-After` (429, 503), else null. */
  readonly retryAfter: number | null;

  constructor(
    status: number,
    code: ErrorCode,
    message: string,
    details: unknown = undefined,
    retryAfter: number | null = null,
  ) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.details = details;
    this.retryAfter = retryAfter;
  }
}

/** No answer at all: the server could not be reached, or the connection broke. */
export class TetherNetworkError extends TetherError {}

/** `events()` could not get a working stream for longer than its `giveUpAfterMs`. */
export class StreamGaveUpError extends TetherError {
  readonly runId: string;
  /** The seq of the last record yielded: pass it as `after` to continue. */
  readonly lastSeq: number;

  constructor(runId: string, lastSeq: number, afterMs: number, cause: unknown) {
    super(
      `run ${runId}: no working event stream for ${afterMs} ms (last seq ${lastSeq}); ` +
        `call events(runId, { after: ${lastSeq} }) to continue`,
      { cause },
    );
    this.runId = runId;
    this.lastSeq = lastSeq;
  }
}

/** Seconds from a Retry-After header (a number of seconds or an HTTP date), or null. */
export function retryAfterSeconds(header: string | null, now = Date.now()): number | null {
  if (header === null || header.trim() === "") return null;
  const text = header.trim();
  if (/^[0-9]+$/.test(text)) return Number(text);
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - now) / 1000));
}

/** The TetherApiError an error answer names (its JSON `error`, or the start of its text). */
export async function apiError(response: Response): Promise<TetherApiError> {
  const text = await response.text().catch(() => "");
  let code: string = "http";
  let message = text.slice(0, 200) || response.statusText;
  let details: unknown = undefined;
  try {
    const body: unknown = JSON.parse(text);
    const err = isObject(body) ? body["error"] : undefined;
    if (isObject(err)) {
      if (typeof err["type"] === "string") code = err["type"];
      if (typeof err["message"] === "string") message = err["message"];
      details = err["details"];
    } else if (typeof err === "string") {
      message = err;
    }
  } catch {
    // not JSON: keep the text
  }
  return new TetherApiError(
    response.status,
    code,
    message,
    details,
    retryAfterSeconds(response.headers.get("retry-after")),
  );
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
