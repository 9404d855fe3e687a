// applyEvents (what useRun renders from) on hand-made records.
import assert from "node:assert/strict";
import { test } from "node:test";

import { applyEvents, emptyRunState } from "../dist/index.js";

const rec = (seq, data) => ({ kind: "record", seq, data: { format: 1, run_id: "r", seq, at_us: seq, ...data } });
const live = (data) => ({ kind: "live", seq: null, data: { run_id: "r", ...data } });

test("records fold into status, nodes, budget and waits; live text lives until its node is recorded", () => {
  const limits = { max_nodes: 10, max_tokens: 0, max_cost: 0, max_wall_ms: 0, max_turns: 0 };
  const spawned = [{ node_id: "a", kind: "turn", parent_ids: [] }, { node_id: "w", kind: "wait", parent_ids: [], wait: { key: "approve", data: { q: 1 }, deadline_us: null, sleep: false, schema: null } }];
  let s = emptyRunState("r");
  const s0 = s;
  s = applyEvents(s, [rec(0, { body: "run_started", status: "running", agent: "x", input: 1, limits, spawned })]);
  assert.notEqual(s, s0);
  assert.equal(s0.records.length, 0, "the previous state is untouched");
  s = applyEvents(s, [live({ type: "node_started", node_id: "a" }), live({ type: "token", node_id: "a", text: "he" }), live({ type: "token", node_id: "a", text: "llo" })]);
  assert.deepEqual([s.nodes.a.status, s.tokens.a], ["running", "hello"]);
  assert.deepEqual(s.waits.map((w) => [w.key, w.nodeId, w.data]), [["approve", "w", { q: 1 }]]);
  const used = { tokens_in: 3, tokens_out: 5, cost: 0.5, model_calls: 1, wall_ms: 9, rate_wait_ms: 0 };
  const before = s;
  s = applyEvents(s, [rec(1, { body: "node_completed", node_id: "a", kind: "turn", status: "completed", attempt: 1, used, output: "hello", spawned: [] }), rec(1, { body: "node_completed", node_id: "a" })]);
  assert.equal(s.records.length, 2, "a record at or below lastSeq is ignored");
  assert.deepEqual([s.nodes.a.status, s.nodes.a.output, s.tokens.a], ["completed", "hello", undefined]);
  assert.equal(before.nodes.a.status, "running");
  assert.deepEqual(s.budget, { limits, used: { nodes: 1, tokens_in: 3, tokens_out: 5, cost: 0.5, model_calls: 1 } });
  s = applyEvents(s, [rec(2, { body: "run_waiting", status: "waiting", keys: ["approve"] })]);
  assert.equal(s.status, "waiting");
  s = applyEvents(s, [rec(3, { body: "run_resumed", status: "running" }), rec(4, { body: "node_completed", node_id: "w", kind: "wait", status: "completed", used, output: { ok: true }, spawned: [], event: { key: "approve", event_id: "e", timed_out: false } })]);
  assert.deepEqual(s.waits, []);
  s = applyEvents(s, [rec(5, { body: "run_finished", status: "succeeded", result: "hello" })]);
  assert.deepEqual([s.status, s.finished, s.result, s.lastSeq], ["succeeded", true, "hello", 5]);
  assert.equal(applyEvents(s, []), s);
});
