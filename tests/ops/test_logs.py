"""`--log-format json`: one JSON object a line, with the run, node, owner and epoch."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.kit import child_env
from tether import Context, Node, NodeResult, Registry, Runtime, Store
from tether.foundation import logs
from tether.foundation.errors import TetherError

talky = Registry("test.talky", entry="speak")


@talky.node("speak")
async def speak(ctx: Context, node: Node) -> NodeResult:
    logging.getLogger("test.talky").info("saying %s", node.input)
    return NodeResult("said", is_result=True)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    out = io.StringIO()
    logs.configure("json", stream=out)
    try:
        yield out
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


async def test_a_log_line_inside_a_node_names_its_run_node_owner_and_epoch(
    store: Store, captured: io.StringIO
) -> None:
    rt = Runtime(store, owner="w-test")
    run_id = await rt.submit(talky, "hello")
    claim = await rt.store.leases.take(run_id, "w-test", 30)
    assert claim is not None
    await rt.continue_graph(await rt.load(run_id), epoch=claim.epoch)
    logging.getLogger("test.outside").info("after the run")
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    said = next(line for line in lines if line["logger"] == "test.talky")
    assert said["message"] == "saying hello"
    assert (said["run_id"], said["node_id"], said["owner"], said["epoch"]) == (
        run_id, "root", "w-test", claim.epoch,
    )  # fmt: skip
    assert said["level"] == "info" and said["ts"] > 0
    after = next(line for line in lines if line["logger"] == "test.outside")
    assert "run_id" not in after and "node_id" not in after


def test_a_bad_log_format_is_named() -> None:
    from tether.control.settings import Settings

    chosen = Settings.from_env({"TETHER_LOG_FORMAT": "xml"}).log_format
    with pytest.raises(TetherError, match="log format 'xml' is not one of text, json"):
        logs.log_format(chosen)
    assert logs.log_format("json") == "json"
    assert logs.log_format(None) == "text"


def test_worker_json_logs(tmp_path: Path) -> None:
    env = child_env({"TETHER_DEMO_SPEED": "0", "TETHER_LOG_FORMAT": "json"})
    base = [sys.executable, "-m", "tether", "--db", f"sqlite:///{tmp_path / 't.db'}"]
    run_id = subprocess.run(
        [*base, "submit", "demo", "--input", '"why?"'],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    proc = subprocess.Popen(
        [*base, "worker"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            out = subprocess.run(
                [*base, "runs", "--json"], env=env, capture_output=True, text=True, check=True
            ).stdout
            if any(r["run_id"] == run_id and r["status"] == "succeeded" for r in json.loads(out)):
                break
            assert time.monotonic() < deadline, "the run did not finish in 60 s"
            time.sleep(0.2)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    lines = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    released = [ln for ln in lines if ln["message"].startswith(f"run {run_id}: released")]
    assert released, err
    # Epoch 1 unless a loaded machine let the lease run out and the run was claimed again.
    assert released[0]["run_id"] == run_id and released[0]["epoch"] >= 1
    assert isinstance(released[0]["owner"], str) and released[0]["owner"]
