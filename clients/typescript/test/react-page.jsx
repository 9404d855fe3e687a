// The test page of react.test.mjs (bundled by esbuild with React): three components on
// useRun() under StrictMode, through the test's gateway. It POSTs what they saw to /report.
import { StrictMode, useEffect, useRef } from "react";
import { createRoot } from "react-dom/client";

import { TetherApiError, TetherClient } from "../dist/index.js";
import { TetherProvider, useRun } from "../dist/react.js";

const client = new TetherClient({ baseUrl: "" }); // the gateway adds the token
const report = (body) => fetch("/report", { method: "POST", body: JSON.stringify(body) });
const seen = { renders: 0, tokenRenders: 0, maxTokenText: 0, wait: null, answered: null };
const done = {};

function summary(run) {
  return {
    status: run.status,
    seqs: run.records.map((r) => r.seq),
    nodes: Object.values(run.nodes).map((n) => n.status),
    used: run.budget.used,
    limits: run.budget.limits,
    waits: run.waits.length,
    tokens: Object.keys(run.tokens).length,
  };
}

function finish(name, value) {
  if (done[name]) return;
  done[name] = value;
  if (done.chain && done.approval && done.missing) report({ ok: true, ...done, seen });
}

function Chain({ id }) {
  const run = useRun(id);
  seen.renders += 1;
  const text = Object.values(run.tokens).join("");
  if (text) {
    seen.tokenRenders += 1;
    seen.maxTokenText = Math.max(seen.maxTokenText, text.length);
  }
  useEffect(() => {
    if (run.finished) finish("chain", summary(run));
  }, [run]);
  return (
    <section>
      <h2>{run.status}</h2>
      <pre>{text}</pre>
    </section>
  );
}

function Approval({ id }) {
  const run = useRun(id);
  const answered = useRef(false);
  useEffect(() => {
    const wait = run.waits.find((w) => w.key === "approve");
    if (wait && !answered.current) {
      answered.current = true; // as a person pressing Approve would, once
      seen.wait = wait;
      run.answer("approve", { approved: true }).then((r) => (seen.answered = [r.status, r.duplicate]));
    }
    if (run.finished) finish("approval", summary(run));
  }, [run]);
  return <p>{run.waits.map((w) => w.key).join(", ") || run.status}</p>;
}

function Missing() {
  const run = useRun("no-such-run");
  useEffect(() => {
    if (run.error) finish("missing", [run.error instanceof TetherApiError, run.error.status, run.error.code]);
  }, [run.error]);
  return null;
}

async function main() {
  const chain = await client.start({ agent: __CHAIN__, input: __CHAIN_INPUT__ });
  const approval = await client.start({ agent: __APPROVAL__ });
  createRoot(document.getElementById("root")).render(
    <StrictMode>
      <TetherProvider client={client}>
        <Chain id={chain.run_id} />
        <Approval id={approval.run_id} />
        <Missing />
      </TetherProvider>
    </StrictMode>,
  );
}

main().catch((e) => report({ ok: false, error: String((e && e.stack) || e) }));
