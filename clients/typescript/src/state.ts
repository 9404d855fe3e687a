import type { RunEvent, RunRecord, RunStatus } from "./types.js";

/** A node of the run as its records (and live events) tell it. */
export interface NodeState {
  id: string;
  kind: string;
  parentIds: string[];
  status: "pending" | "running" | "completed" | "failed";
  attempt: number;
  output?: unknown;
  error?: unknown;
}

/** A wait the run has open: answer it with `client.signal(runId, key, payload)`. */
export interface PendingWait {
  key: string;
  nodeId: string;
  data: unknown;
  /** JSON schema the payload must fit, or null. */
  schema: unknown;
  deadlineUs: number | null;
  /** A timer (`sleep`): nothing to answer, it ends by itself. */
  sleep: boolean;
}

export interface BudgetState {
  /** The run's limits (`max_nodes`, `max_tokens`, `max_cost`, `max_wall_ms`, `max_turns`;
   * 0: none), as started or last resumed with. */
  limits: Record<string, number> | null;
  used: { nodes: number; tokens_in: number; tokens_out: number; cost: number; model_calls: number };
}

/** What a run's records say, folded: `applyEvent` makes the next one from an event. */
export interface RunState {
  runId: string;
  /** "connecting" until the first record. */
  status: RunStatus | "connecting";
  agent: string | null;
  input: unknown;
  result: unknown;
  /** Why it paused or how it finished (`drain`, `budget`...), "" otherwise. */
  reason: string;
  /** Every record, in seq order, each once. */
  records: RunRecord[];
  lastSeq: number;
  nodes: Record<string, NodeState>;
  /** The live text of running model turns, by node id (dropped once the node is recorded). */
  tokens: Record<string, string>;
  budget: BudgetState;
  /** The waits open now (answered or timed-out ones leave). */
  waits: PendingWait[];
  finished: boolean;
}

export function emptyRunState(runId: string): RunState {
  return {
    runId,
    status: "connecting",
    agent: null,
    input: undefined,
    result: undefined,
    reason: "",
    records: [],
    lastSeq: -1,
    nodes: {},
    tokens: {},
    budget: { limits: null, used: { nodes: 0, tokens_in: 0, tokens_out: 0, cost: 0, model_calls: 0 } },
    waits: [],
    finished: false,
  };
}

/** Longest live text kept per node (its start is dropped first). */
export const TURN_TEXT = 20_000;

type Spec = { node_id: string; kind: string; parent_ids?: string[]; wait?: Record<string, unknown> };

/**
 * The state after `events` (in order): a new object whenever something changed, sharing
 * what did not (so React sees changes by reference). A record at or below `lastSeq` is
 * ignored, so replaying an overlap is harmless.
 */
export function applyEvents(state: RunState, events: readonly RunEvent[]): RunState {
  if (!events.length) return state;
  const next: RunState = {
    ...state,
    records: state.records,
    nodes: { ...state.nodes },
    tokens: { ...state.tokens },
    budget: { limits: state.budget.limits, used: { ...state.budget.used } },
    waits: state.waits,
  };
  const fresh: RunRecord[] = [];
  for (const event of events) {
    if (event.kind === "live") live(next, event.data);
    else if (event.seq > next.lastSeq) {
      next.lastSeq = event.seq;
      fresh.push(event.data);
      record(next, event.data);
    }
  }
  if (fresh.length) next.records = state.records.concat(fresh);
  return next;
}

function node(st: RunState, id: string, kind = "", parentIds: string[] = []): NodeState {
  let n = st.nodes[id];
  if (!n) {
    n = { id, kind, parentIds, status: "pending", attempt: 0 };
    st.nodes[id] = n;
  }
  return n;
}

function setNode(st: RunState, id: string, change: Partial<NodeState>): void {
  st.nodes[id] = { ...node(st, id, change.kind), ...change };
}

function spawn(st: RunState, specs: unknown): void {
  if (!Array.isArray(specs)) return;
  for (const s of specs as Spec[]) {
    node(st, s.node_id, s.kind, s.parent_ids ?? []);
    const w = s.wait;
    if (w && typeof w["key"] === "string" && !st.waits.some((x) => x.key === w["key"])) {
      st.waits = st.waits.concat({
        key: w["key"],
        nodeId: s.node_id,
        data: w["data"] ?? null,
        schema: w["schema"] ?? null,
        deadlineUs: typeof w["deadline_us"] === "number" ? w["deadline_us"] : null,
        sleep: w["sleep"] === true,
      });
    }
  }
}

function closeWaits(st: RunState, nodeId: string, key: unknown): void {
  if (st.waits.some((w) => w.nodeId === nodeId || w.key === key)) {
    st.waits = st.waits.filter((w) => w.nodeId !== nodeId && w.key !== key);
  }
}

function record(st: RunState, r: RunRecord): void {
  if (typeof r.status === "string" && r.node_id === undefined) st.status = r.status as RunStatus;
  const nodeId = typeof r.node_id === "string" ? r.node_id : "";
  switch (r.body) {
    case "run_started":
      st.agent = typeof r["agent"] === "string" ? r["agent"] : null;
      st.input = r["input"];
      st.budget.limits = (r["limits"] as Record<string, number> | undefined) ?? null;
      spawn(st, r["spawned"]);
      break;
    case "node_completed": {
      const used = (r["used"] ?? {}) as Record<string, number>;
      setNode(st, nodeId, {
        kind: r.kind ?? "",
        status: "completed",
        attempt: Number(r["attempt"] ?? 0),
        output: r["output"],
        error: undefined,
      });
      const u = st.budget.used;
      u.nodes += 1;
      u.tokens_in += used["tokens_in"] ?? 0;
      u.tokens_out += used["tokens_out"] ?? 0;
      u.cost += used["cost"] ?? 0;
      u.model_calls += used["model_calls"] ?? 0;
      delete st.tokens[nodeId];
      spawn(st, r["spawned"]);
      closeWaits(st, nodeId, (r["event"] as { key?: unknown } | undefined)?.key);
      break;
    }
    case "node_failed": {
      const n = node(st, nodeId, r.kind);
      if (n.status !== "completed") {
        setNode(st, nodeId, { status: "failed", attempt: Number(r["attempt"] ?? 0), error: r["error"] });
      }
      delete st.tokens[nodeId];
      break;
    }
    case "step_recorded": {
      const used = (r["used"] ?? {}) as Record<string, number>;
      const u = st.budget.used;
      u.tokens_in += used["tokens_in"] ?? 0;
      u.tokens_out += used["tokens_out"] ?? 0;
      u.cost += used["cost"] ?? 0;
      u.model_calls += used["model_calls"] ?? 0;
      break;
    }
    case "run_resumed":
      if (r["limits"]) st.budget.limits = r["limits"] as Record<string, number>;
      st.reason = "";
      st.finished = false; // a failed run retried goes on
      break;
    case "run_paused":
    case "run_finished":
      st.reason = typeof r["reason"] === "string" ? r["reason"] : "";
      for (const [id, n] of Object.entries(st.nodes)) {
        if (n.status === "running") st.nodes[id] = { ...n, status: "pending" };
      }
      st.tokens = {};
      if (r.body === "run_finished") {
        st.result = r["result"];
        st.finished = true;
        st.waits = [];
      }
      break;
    default:
  }
}

function live(st: RunState, e: { type: string; node_id: string; text?: string }): void {
  const n = st.nodes[e.node_id];
  if (e.type === "node_started" && n && n.status !== "completed") {
    st.nodes[e.node_id] = { ...n, status: "running" };
  } else if (e.type === "token" && typeof e.text === "string" && !(n && n.status === "completed")) {
    st.tokens[e.node_id] = ((st.tokens[e.node_id] ?? "") + e.text).slice(-TURN_TEXT);
  }
}
