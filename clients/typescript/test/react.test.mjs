// useRun() (tether-client/react) in headless Chromium: a test page bundled with React
// follows a streaming run, answers a run's wait, and meets an unknown run, through a
// gateway that cuts every event stream after 2 records.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { build } from "esbuild";

import { backend, CHAIN, chainInput, chainNodes, CHROMIUM, gateway, inChromium, ROOT, startServer } from "./kit.mjs";

const APPROVAL = "tests.server.agents:approval";

test("useRun in headless Chromium: records, live tokens, budget, a wait answered, an error", { skip: !existsSync(CHROMIUM) && `no ${CHROMIUM}` }, async (t) => {
  const [n, width] = [6, 2];
  const bundle = await build({
    entryPoints: [join(ROOT, "clients/typescript/test/react-page.jsx")],
    bundle: true,
    format: "esm",
    jsx: "automatic",
    write: false,
    define: {
      "process.env.NODE_ENV": '"development"', // React's checks on, StrictMode's double effects
      __CHAIN__: JSON.stringify(CHAIN),
      __CHAIN_INPUT__: JSON.stringify(chainInput(n, width, 0.3)), // each turn streams for 0.3 s
      __APPROVAL__: JSON.stringify(APPROVAL),
    },
  });
  const html = '<!doctype html><meta charset="utf-8"><title>useRun</title><div id="root"></div><script type="module" src="/page.js"></script>';
  const b = backend("sqlite");
  const server = await startServer(b, { args: ["--agent", APPROVAL] });
  const site = await gateway(server.url, { "/": ["text/html", html], "/page.js": ["text/javascript", bundle.outputFiles[0].contents] }, { cutAfter: 2 });
  try {
    const report = await inChromium(site.url, site.reported);
    assert.ok(report.ok, report.error);
    const { chain, approval, missing, seen } = report;
    assert.equal(chain.status, "succeeded");
    assert.deepEqual(chain.seqs, chain.seqs.map((_, i) => i), "each record once, in order");
    assert.equal(chain.nodes.length, chainNodes(n, width));
    assert.ok(chain.nodes.every((status) => status === "completed"));
    assert.equal(chain.used.nodes, chainNodes(n, width));
    assert.ok(chain.limits && typeof chain.limits === "object");
    assert.equal(chain.tokens, 0, "no live text once every turn is recorded");
    assert.ok(seen.tokenRenders > 0 && seen.maxTokenText > 0, JSON.stringify(seen));
    assert.equal(seen.wait?.key, "approve");
    assert.deepEqual(seen.answered?.[1], false);
    assert.equal(approval.status, "succeeded");
    assert.equal(approval.waits, 0);
    assert.deepEqual(missing, [true, 404, "unknown_run"]);
    assert.ok(site.stats.cuts >= 3, JSON.stringify(site.stats));
    t.diagnostic(`chain: ${chain.seqs.length} records in ${seen.renders} renders (${seen.tokenRenders} with live text); ` +
      `approval: ${approval.seqs.length} records; ${site.stats.cuts} stream cuts`);
  } finally {
    await site.close();
    await server.stop();
    b.cleanup();
  }
});
