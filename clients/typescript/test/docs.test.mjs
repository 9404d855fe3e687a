// The guide's examples as written (docs/guides/streaming-to-a-web-page.md): the plain
// fetch one follows a run through a proxy that cuts every stream, and the client and React
// ones type-check against the package's declarations.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";

import { TetherClient } from "../dist/index.js";
import { backend, CHAIN, chainInput, chainNodes, cuttingProxy, exactlyOnceInOrder, ROOT, startServer, TOKEN } from "./kit.mjs";

const PACKAGE = join(ROOT, "clients/typescript");
const guide = readFileSync(join(ROOT, "docs/guides/streaming-to-a-web-page.md"), "utf8");
const block = (lang) => {
  const found = [...guide.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g"))].map((m) => m[1]);
  assert.equal(found.length, 1, `one ${lang} block in the guide`);
  return found[0];
};

test("the guide's plain fetch example follows a run through a proxy that cuts every stream", async (t) => {
  const dir = mkdtempSync(join(PACKAGE, "test/.guide-"));
  const b = backend("sqlite");
  const server = await startServer(b);
  const proxy = await cuttingProxy(server.url, { records: 2, ms: 1000 });
  try {
    writeFileSync(join(dir, "follow.mjs"), block("js"));
    const { followRun } = await import(pathToFileURL(join(dir, "follow.mjs")).href);
    const client = new TetherClient({ baseUrl: server.url, token: TOKEN });
    const [n, width] = [6, 2];
    const { run_id } = await client.start({ agent: CHAIN, input: chainInput(n, width, 0.05) });
    const records = [];
    let live = 0;
    await followRun({
      baseUrl: proxy.url,
      token: TOKEN,
      runId: run_id,
      onRecord: (record) => records.push({ seq: record.seq, data: record }),
      onLive: () => (live += 1),
    });
    const figures = exactlyOnceInOrder(assert, records);
    assert.equal(records.at(-1).data.status, "succeeded");
    assert.equal(records.filter((r) => r.data.body === "node_completed").length, chainNodes(n, width));
    assert.ok(proxy.stats.cuts >= 3, JSON.stringify(proxy.stats));
    t.diagnostic(`plain fetch: ${figures.records} records, ${proxy.stats.cuts} disconnects, ${live} live events, duplicates ${figures.duplicates}, gaps ${figures.gaps}`);
  } finally {
    await proxy.close();
    await server.stop();
    b.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the guide's client and React examples type-check", () => {
  const dir = mkdtempSync(join(PACKAGE, "test/.guide-"));
  try {
    writeFileSync(join(dir, "example.ts"), "declare const token: string;\n" + block("ts") + "\nexport {};\n");
    writeFileSync(join(dir, "page.tsx"), block("tsx") + "\nexport {};\n");
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", lib: ["ES2022", "DOM", "DOM.Iterable"],
          jsx: "react-jsx", types: [], strict: true, noEmit: true, skipLibCheck: true,
        },
        files: ["example.ts", "page.tsx"],
      }),
    );
    // "tether-client" resolves to this package itself (its exports), as in an app.
    execFileSync(join(PACKAGE, "node_modules/.bin/tsc"), ["-p", dir], { encoding: "utf8" });
  } catch (error) {
    assert.fail(`tsc: ${error.stdout ?? error}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
