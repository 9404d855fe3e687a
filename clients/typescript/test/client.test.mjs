// The client against a real `tether serve`: start a run (idempotently), follow its events
// to the end, read it back; and the errors the API answers, typed.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { join } from "node:path";
import { rmSync, writeFileSync } from "node:fs";

import { applyEvents, emptyRunState, TetherApiError, TetherClient } from "../dist/index.js";
import { backend, CHAIN, chainInput, chainNodes, exactlyOnceInOrder, postgresUp, startServer, TOKEN } from "./kit.mjs";

const RETRY = "tests.retry_agents";
const BACKENDS = ["sqlite", ...(process.env.TETHER_CLIENT_SKIP_POSTGRES || !postgresUp() ? [] : ["postgres"])];

for (const kind of BACKENDS) {
  describe(`on ${kind}`, () => {
    let b, server, client;
    before(async () => {
      b = backend(kind);
      // PostgreSQL: this server runs runs itself too (no separate worker needed here).
      server = await startServer(b, { args: ["--workers", "embedded", "--agent", RETRY] });
      client = new TetherClient({ baseUrl: server.url, token: TOKEN });
    });
    after(async () => {
      await server?.stop();
      b?.cleanup();
    });

    test("start a run, follow its events to the end, read it back", async () => {
      const request = { agent: CHAIN, input: chainInput(4, 2, 0.05) };
      const started = await client.start(request, { idempotencyKey: `job-${kind}` });
      assert.equal(started.replayed, false);
      assert.match(started.run_id, /^idem-/);
      const again = await client.start(request, { idempotencyKey: `job-${kind}` });
      assert.deepEqual([again.run_id, again.replayed], [started.run_id, true]);

      const records = [];
      const live = [];
      for await (const event of client.events(started.run_id, { tokens: true })) {
        if (event.kind === "record") {
          assert.equal(event.seq, event.data.seq);
          records.push(event);
        } else {
          assert.equal(event.seq, null);
          assert.equal(event.data.run_id, started.run_id);
          live.push(event);
        }
      }
      exactlyOnceInOrder(assert, records);
      assert.equal(records[0].data.body, "run_started");
      const lastRecord = records.at(-1).data;
      assert.deepEqual([lastRecord.body, lastRecord.status], ["run_finished", "succeeded"]);
      const completed = records.filter((r) => r.data.body === "node_completed");
      assert.equal(completed.length, chainNodes(4, 2));
      // Live events are never records: no seq, their own kind, tokens carry text.
      assert.ok(live.some((e) => e.data.type === "token" && typeof e.data.text === "string"));
      assert.ok(live.every((e) => e.kind === "live" && !("seq" in e.data)));

      const run = await client.get(started.run_id);
      assert.equal(run.status, "succeeded");
      assert.equal(run.records, records.length);
      assert.equal(run.counts.completed, chainNodes(4, 2));
      // A finished run's stream from its last record is empty: the iterator ends at once.
      const rest = [];
      for await (const event of client.events(started.run_id, { after: records.at(-1).seq })) rest.push(event);
      assert.deepEqual(rest, []);
      // From the middle, the rest of the records and nothing else.
      const tail = [];
      for await (const event of client.events(started.run_id, { after: 2 })) tail.push(event.seq);
      assert.deepEqual(tail, records.slice(3).map((r) => r.seq));

      const page = await client.list({ agent: CHAIN, limit: 10 });
      assert.ok(page.runs.some((row) => row.run_id === started.run_id));
    });

    test("errors carry the API's codes", async () => {
      const unknown = "no-such-run";
      await assert.rejects(client.get(unknown), (e) => e instanceof TetherApiError && e.status === 404 && e.code === "unknown_run");
      const events = client.events(unknown);
      await assert.rejects(events.next(), (e) => e instanceof TetherApiError && e.status === 404 && e.code === "unknown_run");

      const stranger = new TetherClient({ baseUrl: server.url, token: "not-the-token" });
      await assert.rejects(stranger.list(), (e) => e instanceof TetherApiError && e.status === 401 && e.code === "unauthorized");
      await assert.rejects(stranger.events("any").next(), (e) => e instanceof TetherApiError && e.status === 401 && e.code === "unauthorized");

      await assert.rejects(client.start({ agent: "not.served" }), (e) => e.status === 422 && e.code === "unknown_agent");
      await assert.rejects(client.start({ agent: CHAIN, priority: "high" }), (e) => e.status === 422 && e.code === "validation" && Array.isArray(e.details));
      await assert.rejects(client.removeSchedule("none-such"), (e) => e.status === 404 && e.code === "unknown_schedule");
    });

    test("a failed run retried: its stream goes on after the failure, each record once", async () => {
      const outage = join(b.home, "outage");
      writeFileSync(outage, "");
      const { run_id } = await client.start({ agent: RETRY, input: { outage } });
      const first = [];
      for await (const event of client.events(run_id)) first.push(event);
      assert.equal(first.at(-1).data.status, "failed");
      await assert.rejects(client.resume(run_id), (e) => e.status === 409);
      rmSync(outage);
      const accepted = await client.retry(run_id);
      assert.deepEqual([accepted.run_id, accepted.status], [run_id, "queued"]);
      const rest = [];
      for await (const event of client.events(run_id, { after: first.at(-1).seq })) rest.push(event);
      exactlyOnceInOrder(assert, [...first, ...rest]);
      assert.deepEqual([rest[0].data.body, rest.at(-1).data.status], ["run_resumed", "succeeded"]);
      assert.deepEqual((await client.get(run_id)).result, ["answer after attempt 3", "steady"]);
      await assert.rejects(client.retry(run_id), (e) => e instanceof TetherApiError && e.status === 409 && e.code === "run_not_failed");
      // The whole log, folded: the retried run is finished, succeeded.
      const state = applyEvents(emptyRunState(run_id), [...first, ...rest]);
      assert.deepEqual([state.status, state.finished, state.records.length], ["succeeded", true, first.length + rest.length]);
    });

    // One backend is enough: the start limit is the server's, not the store's.
    if (kind === "sqlite") test("a 429 carries Retry-After", async () => {
      const b429 = backend(kind);
      const strict = await startServer(b429, { args: ["--starts-per-second", "0.01", "--start-burst", "1"] });
      try {
        const c = new TetherClient({ baseUrl: strict.url, token: TOKEN });
        await c.start({ agent: CHAIN, input: chainInput(1, 0, 0) });
        await assert.rejects(c.start({ agent: CHAIN, input: chainInput(1, 0, 0) }), (e) => {
          assert.ok(e instanceof TetherApiError);
          assert.deepEqual([e.status, e.code], [429, "too_many_requests"]);
          assert.ok(e.retryAfter >= 1, String(e.retryAfter));
          return true;
        });
      } finally {
        await strict.stop();
        b429.cleanup();
      }
    });
  });
}
