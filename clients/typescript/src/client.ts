import {
  apiError,
  isObject,
  StreamGaveUpError,
  TetherApiError,
  TetherNetworkError,
} from "./errors.js";
import { SseParser } from "./sse.js";
import type {
  AddScheduleRequest,
  BudgetChange,
  EventRecorded,
  EventsOptions,
  ForkRunRequest,
  GetRunQuery,
  Imported,
  LimitRemoved,
  Limit,
  Limits,
  ListRunsQuery,
  Run,
  RunAccepted,
  RunEvent,
  RunForked,
  RunList,
  RunRecord,
  RunStarted,
  Schedule,
  ScheduleRemoved,
  Schedules,
  SetLimitRequest,
  StartRunRequest,
  Workers,
  LiveData,
  ReconnectInfo,
} from "./types.js";

export interface ClientOptions {
  /** Where `tether serve` answers, e.g. "http://127.0.0.1:8000" ("" for this page's origin). */
  baseUrl: string;
  /** The API token, sent as `Authorization: Bearer`. */
  token?: string;
  /** Headers added to every request. */
  headers?: Record<string, string>;
  /** The fetch to use (the platform's by default). */
  fetch?: typeof fetch;
}

export interface RequestOptions {
  signal?: AbortSignal;
}

type Query = Record<string, string | number | boolean | null | undefined>;

interface CallOptions extends RequestOptions {
  query?: Query;
  body?: unknown;
  rawBody?: BodyInit;
  headers?: Record<string, string>;
}

const encode = encodeURIComponent;

/**
 * A client of tether serve's HTTP API. Every method answers the server's JSON, typed from
 * its OpenAPI document, or throws a TetherApiError carrying the API's error code.
 */
export class TetherClient {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.headers = { ...options.headers };
    if (options.token !== undefined) this.headers["Authorization"] = `Bearer ${options.token}`;
    // Called unbound: a browser's fetch refuses to run with `this` set to another object.
    const f = options.fetch ?? globalThis.fetch;
    this.fetchImpl = (input, init) => f(input, init);
  }

  url(path: string, query?: Query): string {
    let url = this.baseUrl + path;
    const params: string[] = [];
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined || v === null) continue;
      params.push(`${encode(k)}=${encode(typeof v === "boolean" ? (v ? "1" : "0") : String(v))}`);
    }
    if (params.length) url += "?" + params.join("&");
    return url;
  }

  /** The raw answer of a request; a network failure is a TetherNetworkError. */
  async fetch(method: string, path: string, options: CallOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { ...this.headers, ...options.headers };
    let body: BodyInit | undefined = options.rawBody;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const init: RequestInit = { method, headers };
    if (body !== undefined) init.body = body;
    if (options.signal) init.signal = options.signal;
    try {
      return await this.fetchImpl(this.url(path, options.query), init);
    } catch (error) {
      if (options.signal?.aborted) throw error;
      throw new TetherNetworkError(`${method} ${path}: ${describe(error)}`, { cause: error });
    }
  }

  private async call<T>(method: string, path: string, options: CallOptions = {}): Promise<T> {
    const response = await this.fetch(method, path, options);
    if (!response.ok) throw await apiError(response);
    return (await response.json()) as T;
  }

  // -- runs ---------------------------------------------------------------------------

  /** Start a run; answers at once. With `idempotencyKey`, a retried start returns the run
   * the first one started (`replayed: true`), or 409 `idempotency_key_reused` if the
   * request differs. */
  async start(
    request: StartRunRequest,
    options: RequestOptions & { idempotencyKey?: string } = {},
  ): Promise<RunStarted> {
    const headers: Record<string, string> = {};
    if (options.idempotencyKey !== undefined) headers["Idempotency-Key"] = options.idempotencyKey;
    const response = await this.fetch("POST", "/v1/runs", { ...options, body: request, headers });
    if (!response.ok) throw await apiError(response);
    const accepted = (await response.json()) as RunAccepted;
    return { ...accepted, replayed: response.headers.get("idempotent-replayed") === "true" };
  }

  /** Status, budget used, counts, timings and nodes; with `at`, as they were at that seq. */
  get(runId: string, query: GetRunQuery & RequestOptions = {}): Promise<Run> {
    const { signal, ...rest } = query;
    return this.call("GET", `/v1/runs/${encode(runId)}`, { query: rest, signal });
  }

  /** A page of runs, newest first (`status`, `agent`, `q`, `parent`, `top`...). */
  list(query: ListRunsQuery & RequestOptions = {}): Promise<RunList> {
    const { signal, ...rest } = query;
    return this.call("GET", "/v1/runs", { query: rest, signal });
  }

  /** Stop a run for good (it finishes `cancelled`); closing a stream never does. */
  cancel(runId: string, options: RequestOptions = {}): Promise<RunAccepted> {
    return this.call("POST", `/v1/runs/${encode(runId)}/cancel`, options);
  }

  /** Resume a paused or interrupted run; `budget` replaces the limits it names (`"+N"`: N
   * more than used so far). */
  resume(
    runId: string,
    options: RequestOptions & { budget?: BudgetChange } = {},
  ): Promise<RunAccepted> {
    const body = options.budget ? { budget: options.budget } : {};
    return this.call("POST", `/v1/runs/${encode(runId)}/resume`, { ...options, body });
  }

  /** Retry a failed run: its records stay, its failed nodes run again as new attempts and it
   * continues, queued for a worker. ApiError 409 `run_not_failed` if it did not fail. */
  retry(runId: string, options: RequestOptions = {}): Promise<RunAccepted> {
    return this.call("POST", `/v1/runs/${encode(runId)}/retry`, options);
  }

  /** Deliver an event to the run's wait `key`; answered once it is in the run's log. With
   * `eventId`, a retried delivery is a no-op (`duplicate: true`). */
  signal(
    runId: string,
    key: string,
    payload?: unknown,
    options: RequestOptions & { eventId?: string } = {},
  ): Promise<EventRecorded> {
    const headers: Record<string, string> = {};
    if (options.eventId !== undefined) headers["Idempotency-Key"] = options.eventId;
    const path = `/v1/runs/${encode(runId)}/signals/${encode(key)}`;
    return this.call("POST", path, { ...options, headers, body: payload ?? null });
  }

  /** A new queued run whose history is this run's records up to `at_seq` (or before
   * `before_node`), with `set_outputs`/`set_inputs` replacing values. */
  fork(runId: string, request: ForkRunRequest, options: RequestOptions = {}): Promise<RunForked> {
    return this.call("POST", `/v1/runs/${encode(runId)}/fork`, { ...options, body: request });
  }

  /** Move a run to version `to` of its agent's code. */
  upgrade(runId: string, to: string, options: RequestOptions = {}): Promise<RunAccepted> {
    return this.call("POST", `/v1/runs/${encode(runId)}/upgrade`, { ...options, body: { to } });
  }

  /** The run and its sub-agent runs (with `blobs`, their blobs too) as a `.tlog` file,
   * streamed as the server writes it. */
  async export(
    runId: string,
    options: RequestOptions & { blobs?: boolean } = {},
  ): Promise<ReadableStream<Uint8Array>> {
    const query = options.blobs ? { blobs: "true" } : {};
    const response = await this.fetch("GET", `/v1/runs/${encode(runId)}/export`, {
      ...options,
      query,
    });
    if (!response.ok) throw await apiError(response);
    if (!response.body) throw new TetherNetworkError("export: the answer has no body");
    return response.body;
  }

  /** Import a `.tlog` file, all or nothing. */
  importTlog(data: BodyInit, options: RequestOptions = {}): Promise<Imported> {
    return this.call("POST", "/v1/runs/import", {
      ...options,
      rawBody: data,
      headers: { "Content-Type": "application/octet-stream" },
    });
  }

  /** A blob a record of the run points to (`{"$blob": ...}` values, node `blobs`). */
  async blob(sha256: string, runId: string, options: RequestOptions = {}): Promise<Blob> {
    const response = await this.fetch("GET", `/v1/blobs/${encode(sha256)}`, {
      ...options,
      query: { run_id: runId },
    });
    if (!response.ok) throw await apiError(response);
    return response.blob();
  }

  // -- fleet ----------------------------------------------------------------------------

  /** The live workers: agent versions served, runs held, last heartbeat. */
  workers(options: RequestOptions = {}): Promise<Workers> {
    return this.call("GET", "/v1/workers", options);
  }

  schedules(options: RequestOptions = {}): Promise<Schedules> {
    return this.call("GET", "/v1/schedules", options);
  }

  /** Workers start a run of `agent` at each `cron` time, once. */
  addSchedule(request: AddScheduleRequest, options: RequestOptions = {}): Promise<Schedule> {
    return this.call("POST", "/v1/schedules", { ...options, body: request });
  }

  removeSchedule(name: string, options: RequestOptions = {}): Promise<ScheduleRemoved> {
    return this.call("DELETE", `/v1/schedules/${encode(name)}`, options);
  }

  limits(options: RequestOptions = {}): Promise<Limits> {
    return this.call("GET", "/v1/limits", options);
  }

  /** Cap the runs of an agent (of one of its keys, or of each key) executing at once. */
  setLimit(request: SetLimitRequest, options: RequestOptions = {}): Promise<Limit> {
    return this.call("PUT", "/v1/limits", { ...options, body: request });
  }

  removeLimit(
    scope: { agent: string; key?: string; each_key?: boolean },
    options: RequestOptions = {},
  ): Promise<LimitRemoved> {
    const query: Query = { agent: scope.agent, key: scope.key };
    if (scope.each_key) query["each_key"] = "1";
    return this.call("DELETE", "/v1/limits", { ...options, query });
  }

  /** Whether the server answers /readyz with 200. */
  async ready(options: RequestOptions = {}): Promise<boolean> {
    try {
      return (await this.fetch("GET", "/readyz", options)).ok;
    } catch (error) {
      if (error instanceof TetherNetworkError) return false;
      throw error;
    }
  }

  // -- events ---------------------------------------------------------------------------

  /**
   * Follow a run until it ends: an async iterator of its records (each exactly once, in
   * seq order) and, with `tokens`, its live events. It reconnects by itself after any cut
   * (a gateway timeout, a replica going away, a server restart, the server's own stream
   * limit), resuming after the last record it yielded (Last-Event-ID), with back-off while
   * connecting fails. It ends when the run has finished and its last record was yielded.
   * Errors the server answers (an unknown run: 404, a bad token: 401) are thrown at once
   * as TetherApiError; `break` closes the connection.
   */
  events(runId: string, options: EventsOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
    return follow(this, runId, options);
  }
}

// A stream that stayed open this long worked, even if it brought nothing new.
const HEALTHY_MS = 1000;

const EVENTS_PATH = (runId: string) => `/v1/runs/${encodeURIComponent(runId)}/events`;

async function* follow(
  client: TetherClient,
  runId: string,
  options: EventsOptions,
): AsyncGenerator<RunEvent, void, undefined> {
  const minDelay = options.minDelayMs ?? 100;
  const maxDelay = options.maxDelayMs ?? 5000;
  const giveUpAfter = options.giveUpAfterMs ?? 120_000;
  const idleTimeout = options.idleTimeoutMs ?? 45_000;
  const outer = options.signal;
  let last = options.after ?? -1;
  let failures = 0; // attempts in a row that brought nothing
  let failingSince: number | null = null; // since when no attempt got a stream

  while (true) {
    outer?.throwIfAborted();
    const controller = new AbortController();
    const abort = () => controller.abort(outer?.reason);
    outer?.addEventListener("abort", abort, { once: true });
    let idle: ReturnType<typeof setTimeout> | undefined;
    let connected = false;
    let connectedAt = 0;
    let progressed = false;
    let reason: ReconnectInfo["reason"] = "error";
    let cause: unknown = undefined;
    let retryAfterMs = 0;
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (last >= 0) headers["Last-Event-ID"] = String(last);
      const response = await client.fetch("GET", EVENTS_PATH(runId), {
        headers,
        query: options.tokens ? { tokens: "1" } : {},
        signal: controller.signal,
      });
      if (response.status === 204) return; // finished, and we have its last record
      if (response.status >= 500 || response.status === 429 || response.status === 408) {
        cause = await apiError(response); // a replica going away, a busy server: try again
        retryAfterMs = ((cause as TetherApiError).retryAfter ?? 0) * 1000;
      } else if (!response.ok) {
        throw await apiError(response); // an unknown run, a bad token: no retry helps
      } else if (!response.body) {
        cause = new Error("the event stream has no body");
      } else {
        connected = true;
        connectedAt = Date.now();
        failingSince = null;
        reason = "cut";
        cause = new Error("the stream ended without an end event");
        const reader = response.body.getReader();
        const decoder = new TextDecoder(); // UTF-8; drops a leading BOM as SSE asks
        const parser = new SseParser();
        const arm = () => {
          clearTimeout(idle);
          idle = setTimeout(() => controller.abort(new IdleTimeout()), idleTimeout);
        };
        arm();
        reading: while (true) {
          const { done, value } = await reader.read();
          if (done) break;
          arm();
          for (const message of parser.feed(decoder.decode(value, { stream: true }))) {
            if (message.event === "record") {
              const record = parseRecord(message.data, message.id);
              if (record === null) {
                // Nothing durable comes without its id: drop this stream, read it again.
                cause = new Error(`a malformed record after seq ${last}`);
                break reading;
              }
              if (record.seq <= last) continue; // sent again after a reconnect
              last = record.seq;
              progressed = true;
              yield { kind: "record", seq: record.seq, data: record };
            } else if (message.event === "live") {
              const live = parseLive(message.data);
              if (live !== null) {
                progressed = true;
                yield { kind: "live", seq: null, data: live };
              }
            } else if (message.event === "end") {
              return;
            } else if (message.event === "reconnect") {
              reason = "reconnect"; // the server's stream limit, or a replica draining
              cause = undefined;
              break reading;
            }
          }
        }
        parser.end(); // an event cut off mid-way is dropped, never half-read
      }
    } catch (error) {
      if (outer?.aborted) throw outer.reason;
      if (error instanceof TetherApiError) throw error;
      cause = error; // refused, reset, timed out, or cut mid-stream
    } finally {
      clearTimeout(idle);
      outer?.removeEventListener("abort", abort);
      controller.abort(); // release the connection (nothing once the body was read)
    }

    const now = Date.now();
    let delay = 0;
    if (progressed || (connected && now - connectedAt >= HEALTHY_MS)) {
      // A stream that worked (it brought events, or lasted, as one the server or a gateway
      // ends after a while): again at once, from the last record. One that ended at once
      // (a replica draining, a gateway refusing) is backed off from like a failure.
      failures = 0;
    } else {
      failures += 1;
      if (!connected) {
        failingSince ??= now;
        if (now - failingSince > giveUpAfter) {
          throw new StreamGaveUpError(runId, last, giveUpAfter, cause);
        }
      }
      const base = Math.min(maxDelay, minDelay * 2 ** Math.min(failures - 1, 30));
      delay = Math.max(retryAfterMs, base / 2 + (Math.random() * base) / 2);
    }
    options.onReconnect?.({
      runId,
      attempt: failures,
      delayMs: delay,
      lastSeq: last,
      reason,
      error: cause,
    });
    if (delay > 0) await sleep(delay, outer);
  }
}

class IdleTimeout extends Error {
  constructor() {
    super("no bytes from the event stream within the idle timeout");
  }
}

function parseRecord(data: string, id: string | null): RunRecord | null {
  if (id === null || !/^[0-9]+$/.test(id)) return null;
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    return null;
  }
  if (!isObject(value) || value["seq"] !== Number(id) || typeof value["body"] !== "string") {
    return null;
  }
  return value as RunRecord;
}

function parseLive(data: string): LiveData | null {
  try {
    const value: unknown = JSON.parse(data);
    return isObject(value) && typeof value["type"] === "string" ? (value as LiveData) : null;
  } catch {
    return null;
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}

