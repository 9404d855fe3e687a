// Streams that survive cuts: a proxy that drops every stream after 2 records (or 1 s), and
// a server restarted mid-run. Every record arrives exactly once, in order, and the
// iterator ends at the run's end.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { TetherClient } from "../dist/index.js";
import {
  backend,
  CHAIN,
  chainInput,
  chainNodes,
  cuttingProxy,
  exactlyOnceInOrder,
  postgresUp,
  startServer,
  startWorker,
  TOKEN,
} from "./kit.mjs";

const BACKENDS = ["sqlite", ...(process.env.TETHER_CLIENT_SKIP_POSTGRES || !postgresUp() ? [] : ["postgres"])];

for (const kind of BACKENDS) {
  describe(`on ${kind}`, () => {
    test("a proxy that drops every stream after 2 records: each record once, in order", async (t) => {
      const b = backend(kind);
      const server = await startServer(b, { args: ["--workers", "embedded"] });
      const proxy = await cuttingProxy(server.url, { records: 2, ms: 1000 });
      try {
        const direct = new TetherClient({ baseUrl: server.url, token: TOKEN });
        const [n, width] = [10, 2];
        const { run_id } = await direct.start({ agent: CHAIN, input: chainInput(n, width, 0.05) });
        const client = new TetherClient({ baseUrl: proxy.url, token: TOKEN });
        const records = [];
        const reconnects = { reconnect: 0, cut: 0, error: 0 };
        let tokens = 0;
        const events = client.events(run_id, {
          tokens: true,
          onReconnect: (info) => (reconnects[info.reason] += 1),
        });
        for await (const event of events) {
          if (event.kind === "record") records.push(event);
          else tokens += 1;
        }
        const figures = exactlyOnceInOrder(assert, records);
        assert.deepEqual([figures.duplicates, figures.gaps], [0, 0]);
        assert.deepEqual([records.at(-1).data.body, records.at(-1).data.status], ["run_finished", "succeeded"]);
        assert.equal(records.filter((r) => r.data.body === "node_completed").length, chainNodes(n, width));
        const run = await direct.get(run_id);
        assert.equal(run.records, records.length, "the server's log has exactly the records yielded");
        // The streams really were cut, again and again (a cut comes after 2 records or
        // more: records read from the log together can reach the proxy in one piece).
        assert.ok(proxy.stats.cuts >= 4, JSON.stringify(proxy.stats));
        t.diagnostic(
          `reconnect test (${kind}): ${records.length} records, ${proxy.stats.cuts} disconnects by the proxy ` +
            `(${proxy.stats.connections} connections, ${proxy.stats.records} records on the wire), ` +
            `client reconnects ${JSON.stringify(reconnects)}, ${tokens} live events, ` +
            `duplicates ${figures.duplicates}, gaps ${figures.gaps}`,
        );
      } finally {
        await proxy.close();
        await server.stop();
        b.cleanup();
      }
    });

    test("the server restarts mid-run: the client follows without a gap", async (t) => {
      const b = backend(kind);
      // SQLite: the server runs the run itself, drains it on SIGTERM, and the restarted
      // server finishes it. PostgreSQL: a worker runs it while the server restarts.
      const external = kind === "postgres";
      let server = await startServer(b, { args: ["--workers", external ? "external" : "embedded"] });
      const worker = external ? await startWorker(b, ["--grace", "5"]) : null;
      const port = server.port;
      const servers = [server];
      try {
        const client = new TetherClient({ baseUrl: server.url, token: TOKEN });
        const [n, width] = [10, 2];
        const { run_id } = await client.start({ agent: CHAIN, input: chainInput(n, width, 0.15) });
        const records = [];
        const reconnects = { reconnect: 0, cut: 0, error: 0 };
        let restarted = null;
        const events = client.events(run_id, { onReconnect: (info) => (reconnects[info.reason] += 1) });
        for await (const event of events) {
          records.push(event);
          if (records.length === 5) {
            const old = server;
            // Stop it now; once it is gone, start it again on the same port. The iterator
            // goes on meanwhile and meets a server draining, then none, then the new one.
            restarted = old.stop("SIGTERM").then(async (code) => {
              assert.equal(code, 0, old.lines.join("\n"));
              server = await startServer(b, { port, args: ["--workers", external ? "external" : "embedded"] });
              servers.push(server);
            });
          }
        }
        await restarted;
        const figures = exactlyOnceInOrder(assert, records);
        const bodies = records.map((r) => r.data.body);
        assert.equal(records.at(-1).data.status, "succeeded");
        assert.equal(bodies.filter((body) => body === "node_completed").length, chainNodes(n, width));
        if (!external) {
          const paused = records.filter((r) => r.data.body === "run_paused");
          assert.deepEqual(paused.map((r) => r.data.reason), ["drain"]);
        }
        assert.equal(servers.length, 2, "the stream outlived its server");
        assert.equal((await client.get(run_id)).records, records.length);
        t.diagnostic(
          `restart test (${kind}): ${records.length} records, client reconnects ${JSON.stringify(reconnects)}, ` +
            `duplicates ${figures.duplicates}, gaps ${figures.gaps}`,
        );
      } finally {
        await server.stop();
        await worker?.stop();
        b.cleanup();
      }
    });
  });
}
