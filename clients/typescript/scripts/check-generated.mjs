// Fails when the committed OpenAPI document or the types generated from it have drifted:
// openapi.json must be what the server's code produces now (scripts/openapi.py), and
// src/openapi.ts what openapi-typescript makes of it. `npm run generate` rewrites both.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const here = new URL("..", import.meta.url).pathname;
const python = process.env.PYTHON ?? "python3";
const drift = [];

const document = execFileSync(python, [join(here, "scripts/openapi.py"), "-"], {
  encoding: "utf8",
});
if (document !== readFileSync(join(here, "openapi.json"), "utf8")) {
  drift.push("openapi.json differs from the server's /openapi.json");
}

const dir = mkdtempSync(join(tmpdir(), "tether-client-"));
try {
  const out = join(dir, "openapi.ts");
  execFileSync(
    join(here, "node_modules/.bin/openapi-typescript"),
    [join(here, "openapi.json"), "--default-non-nullable", "false", "--empty-objects-unknown", "-o", out],
    { stdio: "ignore" },
  );
  if (readFileSync(out, "utf8") !== readFileSync(join(here, "src/openapi.ts"), "utf8")) {
    drift.push("src/openapi.ts differs from the types generated from openapi.json");
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

if (drift.length) {
  for (const line of drift) console.error(`tether-client: ${line}`);
  console.error("tether-client: run `npm run generate` in clients/typescript and commit the result");
  process.exit(1);
}
console.log("tether-client: openapi.json and src/openapi.ts match the server");
