"""Real `tether worker` processes on a real PostgreSQL, and the checks run after each scenario."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

import tether
from tests.faults.agent import EFFECTS_SQL, expected, node_ids
from tether.engine.runtime import Runtime
from tether.model.records import decode_log
from tether.store.postgres import PostgresStore

T = TypeVar("T")
AGENT = "tests.faults.agent:agent"
# Workers import tether from wherever this process did (a worktree or main), and the
# fault agent from this repository's root.
TETHER_SRC = str(Path(tether.__file__).resolve().parent.parent)
REPO_ROOT = str(Path(__file__).resolve().parents[2])

# Each appended row notes the run's epoch at the moment it was inserted. The fenced
# append holds the runs row FOR SHARE for the whole statement, so that epoch cannot move
# between the fence check and this trigger: it is the epoch the append was admitted at.
AUDIT_SQL = """
CREATE TABLE log_audit (
    run_id text, seq bigint, epoch bigint, at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, seq)
);
CREATE FUNCTION audit_append() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO log_audit (run_id, seq, epoch)
        SELECT NEW.run_id, NEW.seq, epoch FROM runs WHERE run_id = NEW.run_id;
    RETURN NEW;
END $$;
CREATE TRIGGER run_log_audit AFTER INSERT ON run_log FOR EACH ROW EXECUTE FUNCTION audit_append();
"""


def sync(fn: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(fn())  # type: ignore[arg-type]


async def sql(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def q(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    """One query from synchronous test code, retried while the server restarts."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return asyncio.run(sql(url, query, *args))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def prepare(url: str) -> None:
    """Add the side-effect table and the append audit to a migrated database."""
    q(url, EFFECTS_SQL)
    for statement in AUDIT_SQL.split(";\nCREATE"):
        q(url, statement if statement.startswith("\nCREATE") else f"CREATE{statement}")


class WorkerProc:
    """One `tether worker` subprocess; stderr (its log) goes to a file."""

    def __init__(
        self,
        url: str,
        log_dir: Path,
        *,
        ttl: float = 1.0,
        concurrency: int = 8,
        poll: float = 0.2,
        grace: float = 25.0,
        env: dict[str, str] | None = None,
    ) -> None:
        e = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        e.update(env or {})
        e["TETHER_DATABASE_URL"] = url
        e["PYTHONPATH"] = os.pathsep.join([TETHER_SRC, REPO_ROOT])
        self.log_path = log_dir / f"worker-{time.monotonic_ns()}.log"
        args = ["--concurrency", str(concurrency), "--lease-ttl", str(ttl), "--poll", str(poll)]
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tether", "worker", *args, "--grace", str(grace)],
                env=e,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.owner = ""

    def wait_ready(self, timeout: float = 120) -> WorkerProc:
        """The handshake: the worker prints `worker OWNER ready` once its store is open.

        A bound, not a wait: on a loaded 2-core machine a cold interpreter start has taken
        over 30 s.
        """
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        assert line.startswith("worker ") and "ready" in line, f"not ready: {line!r}\n{self.log}"
        self.owner = line.split()[1]
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(10)

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if still running after `timeout` seconds."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM, and the exit code of the drain."""
        self.signal(signal.SIGTERM)
        code = self.wait(timeout)
        assert code is not None, f"worker {self.pid} did not exit after SIGTERM\n{self.log}"
        return code


async def submit(url: str, inputs: dict[str, dict[str, Any]]) -> None:
    async with PostgresStore(url, min_size=1, max_size=2) as store:
        runtime = Runtime(store)
        for run_id, value in inputs.items():
            await runtime.submit(AGENT, value, run_id=run_id)


def wait_all_finished(url: str, timeout: float) -> None:
    """Poll the runs table (bounded) until no top-level run is unfinished."""
    deadline = time.monotonic() + timeout
    query = (
        "SELECT run_id, status, reason, owner, epoch FROM runs"
        " WHERE parent_run_id IS NULL AND status NOT IN ('succeeded', 'failed', 'cancelled')"
    )
    while time.monotonic() < deadline:
        if not q(url, query):
            return
        time.sleep(0.1)
    stuck = [dict(r) for r in q(url, query)]
    raise AssertionError(f"{len(stuck)} runs still unfinished after {timeout}s: {stuck[:5]}")


@dataclass
class Checked:
    """What a check counted, printed per scenario."""

    runs: int = 0
    children: int = 0
    nodes: int = 0
    executions: int = 0
    reexecuted: int = 0
    records: int = 0
    resumes: int = 0
    max_epoch: int = 0
    by_pid: Counter[int] = field(default_factory=Counter)

    def line(self) -> str:
        return (
            f"{self.runs} runs (+{self.children} sub-agent runs), {self.nodes} nodes recorded "
            f"exactly once, {self.executions} executions ({self.reexecuted} re-executions), "
            f"{self.records} records, "
            f"{self.resumes} resumptions, max epoch {self.max_epoch}, no seq gap, all admitted "
            f"at their writer's epoch, results equal the reference, none stuck"
        )


async def check(url: str, inputs: dict[str, dict[str, Any]]) -> Checked:
    """Every invariant the fault suite promises, for the runs of `inputs` and their children."""
    out = Checked()
    rows = {r["run_id"]: r for r in await sql(url, "SELECT run_id, status, reason FROM runs")}
    stuck = [r for r in rows.values() if r["status"] != "succeeded"]
    assert not stuck, f"runs not succeeded: {[dict(r) for r in stuck[:5]]}"
    effects: Counter[tuple[str, str]] = Counter()
    for r in await sql(url, "SELECT run_id, node_id, pid FROM effects"):
        effects[(r["run_id"], r["node_id"])] += 1
        out.by_pid[r["pid"]] += 1
    audit = {(r[0], r[1]): r[2] for r in await sql(url, "SELECT run_id, seq, epoch FROM log_audit")}
    seqs: dict[str, list[int]] = {}
    for r in await sql(url, "SELECT run_id, seq FROM run_log ORDER BY run_id, seq"):
        seqs.setdefault(r[0], []).append(r[1])
    children = await sql(
        url, "SELECT run_id FROM runs WHERE parent_run_id = ANY($1::text[])", list(inputs)
    )
    async with PostgresStore(url, min_size=1, max_size=2) as store:
        runtime = Runtime(store)
        for run_id in [*inputs, *(r[0] for r in children)]:
            # load() applies every record: a node recorded twice would fail right here.
            outcome = await runtime.outcome(run_id)
            assert outcome.status.value == "succeeded", (run_id, outcome.reason)
            if run_id in inputs:
                value = inputs[run_id]
                assert outcome.result == expected(value), (run_id, outcome.result, expected(value))
                assert set(outcome.graph.order) == node_ids(value), f"{run_id}: nodes differ"
                out.runs += 1
            else:
                out.children += 1
            recorded = outcome.graph.order
            assert len(recorded) == len(set(recorded)), f"{run_id}: a node recorded twice"
            for node_id in recorded:
                n = effects[(run_id, node_id)]
                assert n >= 1, f"{run_id} {node_id}: recorded but never executed"
                out.executions += n
                out.reexecuted += n - 1
            assert seqs[run_id] == list(range(len(seqs[run_id]))), f"{run_id}: a seq gap"
            epoch = 0
            raw = await store.log.read_all(run_id)
            for seq, record in enumerate(decode_log(run_id, raw)):
                if record.WhichOneof("body") == "run_resumed":
                    resumed = record.run_resumed.epoch
                    assert resumed > epoch, f"{run_id} seq {seq}: epoch {resumed} after {epoch}"
                    epoch = resumed
                    out.resumes += 1
                if seq > 0:
                    admitted = audit[(run_id, seq)]
                    assert admitted == epoch, (
                        f"{run_id} seq {seq}: written by epoch {epoch} but admitted while the "
                        f"run was at epoch {admitted}: a stale append landed"
                    )
            out.nodes += len(recorded)
            out.records += len(raw)
            out.max_epoch = max(out.max_epoch, epoch)
    return out
