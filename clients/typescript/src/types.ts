import type { components, paths } from "./openapi.js";

type Schemas = components["schemas"];

/** Where a run stands (`orphaned` only in listings: running under a lease that ran out). */
export type RunStatus =
  | "queued"
  | "running"
  | "paused"
  | "waiting"
  | "succeeded"
  | "failed"
  | "cancelled";

export type StartRunRequest = Schemas["StartRun"];
export type ResumeRunRequest = Schemas["ResumeRun"];
export type ForkRunRequest = Schemas["ForkRun"];
export type AddScheduleRequest = Schemas["AddSchedule"];
export type SetLimitRequest = Schemas["SetLimit"];
export type BudgetChange = Schemas["BudgetChangeIn"];

export type RunAccepted = Schemas["RunAccepted"];
/** A start's answer; `replayed` when an Idempotency-Key found the run an earlier start made. */
export type RunStarted = RunAccepted & { replayed: boolean };
export type RunForked = Schemas["RunForked"];
export type EventRecorded = Schemas["EventRecorded"];
export type Imported = Schemas["Imported"];
export type Schedule = Schemas["Schedule"];
export type Schedules = Schemas["Schedules"];
export type ScheduleRemoved = Schemas["ScheduleRemoved"];
export type Limit = Schemas["Limit"];
export type Limits = Schemas["Limits"];
export type LimitRemoved = Schemas["LimitRemoved"];
export type Workers = Schemas["Workers"];
export type RunList = Schemas["RunList"];

/** `GET /v1/runs/{id}`: the fields every answer has, and whatever else the server adds. */
export type Run = Schemas["Run"] & {
  run_id: string;
  status: RunStatus;
  budget: Record<string, unknown>;
  nodes: Record<string, unknown>[];
  counts: { nodes: number; completed: number; failed: number; ready: number; pending: number };
  [field: string]: unknown;
};

export type ListRunsQuery = NonNullable<paths["/v1/runs"]["get"]["parameters"]["query"]>;
export type GetRunQuery = NonNullable<paths["/v1/runs/{run_id}"]["get"]["parameters"]["query"]>;

/** The kinds of durable record (a record's `body`); docs/reference/records.md. */
export type RecordBody =
  | "run_started"
  | "node_completed"
  | "node_failed"
  | "run_paused"
  | "run_waiting"
  | "run_resumed"
  | "run_finished"
  | "step_recorded"
  | (string & {});

/** One durable log record as the event stream sends it (id = seq). */
export interface RunRecord {
  format: number;
  run_id: string;
  seq: number;
  at_us: number;
  body: RecordBody;
  /** The run's status this record implies, or the node's for node records. */
  status?: string;
  node_id?: string;
  kind?: string;
  [field: string]: unknown;
}

/** A live (not durable, best effort) event: `type` says what (`token`, `node_started`...). */
export interface LiveData {
  type: string;
  run_id: string;
  node_id: string;
  /** The text of a `token` event. */
  text?: string;
  [field: string]: unknown;
}

/** A durable record: each is yielded exactly once, in seq order, across reconnects. */
export interface RecordEvent {
  kind: "record";
  seq: number;
  data: RunRecord;
}

/** A live event (only with `tokens: true`): never a record, never replayed. */
export interface LiveEvent {
  kind: "live";
  seq: null;
  data: LiveData;
}

export type RunEvent = RecordEvent | LiveEvent;

/** Why events() is about to reconnect, and when. */
export interface ReconnectInfo {
  runId: string;
  /** Failed attempts in a row before this one (0 after a stream that made progress). */
  attempt: number;
  /** How long it waits before connecting again. */
  delayMs: number;
  /** The seq it resumes after (sent as Last-Event-ID). */
  lastSeq: number;
  /** `reconnect`: the server ended the stream on purpose; `cut`: the stream broke or ended
   * early; `error`: no stream (connection refused, a 5xx, a 429). */
  reason: "reconnect" | "cut" | "error";
  error?: unknown;
}

export interface EventsOptions {
  /** Start after this seq (-1, the default: from the first record). */
  after?: number;
  /** Also yield live events (`tokens`, `node_started`...). */
  tokens?: boolean;
  /** Stop following: the iterator throws the signal's reason. */
  signal?: AbortSignal;
  /** First back-off delay after a failed attempt (ms, default 100); it doubles each time. */
  minDelayMs?: number;
  /** The longest back-off delay (ms, default 5000). */
  maxDelayMs?: number;
  /** Throw StreamGaveUpError after this long without a working stream (ms, default 120000;
   * Infinity: never). */
  giveUpAfterMs?: number;
  /** Reconnect when the stream sends nothing for this long (ms, default 45000; the server
   * sends a keepalive every 15 s). */
  idleTimeoutMs?: number;
  /** Called before each reconnect. */
  onReconnect?: (info: ReconnectInfo) => void;
}
