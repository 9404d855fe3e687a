"""SIGKILL in the middle of a framework agent's run, then `tether resume` in another process.

The example agents (examples/pydantic_ai_agent.py, examples/openai_agents_agent.py) run in a
subprocess against a local model server in this process, whose request log proves what was
asked.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tether import Store
from tether.model.records import decode_log, inline_json
from tether.testing import serve_local_models
from tether.testing.demo import DEMO_SCRIPTS

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
SRC = Path(__file__).parent.parent.parent / "src"


def _env(store_url: str, base_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "OPENAI_"))}
    env.update(
        TETHER_DATABASE_URL=store_url,
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="local",
        PYTHONPATH=os.pathsep.join([str(SRC), str(EXAMPLES), env.get("PYTHONPATH", "")]),
        **extra,
    )
    return env


# (example, the module it needs, its model request step, its search tool step)
FRAMEWORKS = [
    ("pydantic_ai_agent.py", "pydantic_ai", "researcher__model.request", "call_tool:search"),
    ("openai_agents_agent.py", "agents", "researcher.model", "researcher.tool:search"),
]


async def _example(example: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / example),
        "What keeps agents alive?",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _records(store: Store, run_id: str) -> list[Any]:
    return list(decode_log(run_id, await store.log.read_all(run_id)))


async def _result(store: Store, run_id: str) -> Any:
    last = (await _records(store, run_id))[-1]
    assert last.HasField("run_finished"), last
    return inline_json(last.run_finished.result)


@pytest.mark.parametrize(("example", "module", "model_step", "tool_step"), FRAMEWORKS)
async def test_a_run_killed_mid_tool_resumes_in_another_process_asking_nothing_recorded(
    durable_store: Store,
    durable_store_url: str,
    example: str,
    module: str,
    model_step: str,
    tool_step: str,
) -> None:
    pytest.importorskip(module)
    async with serve_local_models(dict(DEMO_SCRIPTS)) as server:
        # An uninterrupted run: what the model was asked, and the answer.
        whole = await _example(example, _env(durable_store_url, server.openai_base_url))
        out, err = await asyncio.wait_for(whole.communicate(), 120)
        assert whole.returncode == 0, err.decode()
        whole_id = out.decode().split()[1]
        asked_whole = [r.turn_index for r in server.requests]
        assert asked_whole == [0, 1]
        server.reset()

        # The same question, killed while its tool calls run (each takes a minute).
        env = _env(durable_store_url, server.openai_base_url, EXAMPLE_SEARCH_DELAY="60")
        proc = await _example(example, env)
        assert proc.stdout is not None
        run_id = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().split()[1]
        for _ in range(1200):  # until the first model response is recorded (a 60 s bound)
            if any(r.HasField("step_recorded") for r in await _records(durable_store, run_id)):
                break
            await asyncio.sleep(0.05)
        proc.kill()
        await proc.wait()
        steps = [
            r.step_recorded.name
            for r in await _records(durable_store, run_id)
            if r.step_recorded.name
        ]
        assert steps == [model_step], steps
        assert [r.turn_index for r in server.requests] == [0]

        resume = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tether",
            "resume",
            run_id,
            "--quiet",
            # The killed process's lease is still running: wait for it to end.
            "--wait",
            env=_env(durable_store_url, server.openai_base_url),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(resume.communicate(), 120)
        assert resume.returncode == 0, (out + err).decode()

    # Nothing recorded was asked again: the killed and resumed run asked what the whole did.
    assert [r.turn_index for r in server.requests] == asked_whole
    assert await _result(durable_store, run_id) == await _result(durable_store, whole_id)
    names = [
        r.step_recorded.name for r in await _records(durable_store, run_id) if r.step_recorded.name
    ]
    calls = [n for n in names if tool_step in n]
    assert len(calls) == 2 and len(names) == 4  # each search recorded once, after the resume


async def test_an_approval_answered_from_other_processes_after_the_asker_was_killed(
    durable_store: Store, durable_store_url: str
) -> None:
    pytest.importorskip("agents")
    async with serve_local_models(dict(DEMO_SCRIPTS)) as server:
        env = _env(durable_store_url, server.openai_base_url)
        proc = await _example("openai_agents_approval.py", env)
        assert proc.stdout is not None
        run_id = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().split()[1]
        keys = []
        while not (
            line := (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        ).startswith("then:"):
            if line.strip().startswith("tether signal"):
                keys.append(line.split()[3])
        proc.kill()  # the run is parked: killing the process that asked loses nothing
        await proc.wait()
        assert len(keys) == 2 and [r.turn_index for r in server.requests] == [0]

        async def tether(*args: str) -> str:
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tether", *args, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(child.communicate(), 120)
            assert child.returncode == 0, (out + err).decode()
            return out.decode()

        await tether("signal", run_id, keys[0], "--data", '{"approve": true}')
        await tether("signal", run_id, keys[1], "--data", '{"approve": false, "reason": "no"}')
        await tether("resume", run_id, "--quiet", "--wait")

    result = await _result(durable_store, run_id)
    assert result["content"].startswith("I read 2 search results")
    # Asked once before the approvals and once after: nothing recorded was asked again.
    assert [r.turn_index for r in server.requests] == [0, 1]
    names = [
        r.step_recorded.name for r in await _records(durable_store, run_id) if r.step_recorded.name
    ]
    assert names.count("researcher.tool:search") == 1  # the rejected call never ran
