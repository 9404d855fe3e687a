// Two `tether serve` replicas over one PostgreSQL database (a `tether worker` runs the run),
// behind a proxy that sends each connection to the next replica and cuts every stream
// after 2 records or 1 s: the client moves between replicas and nothing is lost or repeated.
import assert from "node:assert/strict";
import { test } from "node:test";

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

// Replicas share a store: only PostgreSQL has them (its NOTIFY wakes every replica).
test("two replicas behind a proxy that alternates and cuts: nothing lost or repeated", { skip: (process.env.TETHER_CLIENT_SKIP_POSTGRES || !postgresUp()) && "no PostgreSQL" }, async (t) => {
  const b = backend("postgres");
  const replicas = [await startServer(b), await startServer(b)]; // --workers external
  const worker = await startWorker(b, ["--grace", "5"]);
  const proxy = await cuttingProxy(replicas.map((r) => r.url), { records: 2, ms: 1000 });
  try {
    const [n, width] = [10, 2];
    const client = new TetherClient({ baseUrl: proxy.url, token: TOKEN });
    const direct = new TetherClient({ baseUrl: replicas[1].url, token: TOKEN });
    const { run_id } = await direct.start({ agent: CHAIN, input: chainInput(n, width, 0.05) });
    const records = [];
    for await (const event of client.events(run_id)) records.push(event);
    const figures = exactlyOnceInOrder(assert, records);
    assert.equal(records.at(-1).data.status, "succeeded");
    assert.equal(records.filter((r) => r.data.body === "node_completed").length, chainNodes(n, width));
    assert.ok(proxy.stats.byTarget.every((count) => count >= 2), JSON.stringify(proxy.stats));
    t.diagnostic(
      `two replicas: ${records.length} records over ${proxy.stats.connections} connections ` +
        `(${proxy.stats.byTarget.join(" + ")}), duplicates ${figures.duplicates}, gaps ${figures.gaps}`,
    );
  } finally {
    await proxy.close();
    for (const replica of replicas) await replica.stop();
    await worker.stop();
    b.cleanup();
  }
});
