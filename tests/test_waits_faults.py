"""Faults around an event: the delivering process SIGKILLed right after the event's append."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from tests.agents import uid
from tests.test_cli import env as cli_env
from tests.test_waits import work_until_finished
from tests.waits_agents import EXECUTIONS, approvals
from tether import Runtime, Status, Store
from tether.foundation.ids import ROOT_ID, child_id
from tether.model.records import decode_log


async def test_a_delivery_killed_after_its_append_is_recorded_once_and_the_run_finishes(
    durable_store: Store, durable_store_url: str, tmp_path: object
) -> None:
    store = durable_store
    rt = Runtime(store)
    run_id = uid("k")
    assert (await rt.start(approvals, {"n": 1}, run_id=run_id)).status is Status.WAITING
    env = cli_env(tmp_path)  # type: ignore[arg-type]
    env["TETHER_FAULT"] = "after_append:1"
    args = ["signal", run_id, "approve-0", "--data", json.dumps({"approve": True})]
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "tether", "--db", durable_store_url, *args, "--event-id", "k1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == -9, err.decode()
    assert "SIGKILL at after_append:1" in err.decode()
    rows = await store.log.read_all(run_id)
    last = decode_log(run_id, rows)[-1]
    assert last.node_completed.wait.event_id == "k1"  # durable before the sender heard back
    info = await store.runs.get(run_id)
    assert info is not None and info.lease_until is not None  # still held by the dead process

    # The sender retries (it never got an answer): once the dead holder's lease runs out the
    # retry finds its event recorded and records nothing; a worker then finishes the run.
    again = await rt.signal(run_id, "approve-0", {"approve": True}, event_id="k1")
    assert again.duplicate and again.seq is None
    assert len(await store.log.read_all(run_id)) == len(rows)
    await work_until_finished(store, run_id)
    outcome = await rt.outcome(run_id)
    assert outcome.status is Status.SUCCEEDED and outcome.result == [[0, "done"]]
    assert EXECUTIONS[f"{run_id}:{child_id(ROOT_ID, 'act-0')}"] == 1
    events = [
        r
        for r in decode_log(run_id, await store.log.read_all(run_id))
        if r.HasField("node_completed") and r.node_completed.HasField("wait")
    ]
    assert len(events) == 1
