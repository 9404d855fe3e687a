"""Eager tasks (tether.foundation.eager) and the executor running nodes on them: a node's
first step runs at once, as its own task; what suspends goes on as an ordinary task."""

from __future__ import annotations

import asyncio
import contextvars
import gc

import pytest

from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, Status, Store
from tether.foundation.eager import start

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="caller")


async def test_a_coroutine_that_never_suspends_is_done_when_start_returns() -> None:
    loop = asyncio.get_running_loop()
    caller = asyncio.current_task()
    seen: list[asyncio.Task[object] | None] = []

    async def body() -> str:
        seen.append(asyncio.current_task())
        VAR.set("task")  # its own copy of the context: the caller keeps its value
        return "done"

    task = start(loop, body())
    assert task.done() and task.result() == "done"
    assert seen == [task] and task is not caller
    assert asyncio.current_task() is caller  # the caller is the current task again
    assert VAR.get() == "caller"
    assert task not in asyncio.all_tasks()  # never registered: it never waited


async def test_a_coroutine_that_suspends_goes_on_as_a_task() -> None:
    loop = asyncio.get_running_loop()
    gate = loop.create_future()
    steps: list[str] = []

    async def body() -> int:
        steps.append("first")
        value: int = await gate
        steps.append("after")
        assert VAR.get() == "task"
        return value * 2

    async def wrapped() -> int:
        VAR.set("task")
        return await body()

    task = start(loop, wrapped())
    assert steps == ["first"] and not task.done()
    assert task in asyncio.all_tasks()
    gate.set_result(21)
    assert await task == 42
    assert steps == ["first", "after"]


async def test_an_exception_in_the_first_step_is_the_tasks() -> None:
    async def body() -> None:
        raise KeyError("boom")

    task = start(asyncio.get_running_loop(), body())
    assert task.done()
    with pytest.raises(KeyError):
        task.result()


async def test_an_eager_task_still_reports_what_asyncio_reports_when_it_is_dropped() -> None:
    # Its __del__ skips asyncio's two for the common case; these two cases must still say.
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
    try:

        async def fails() -> None:
            raise KeyError("never retrieved")

        async def waits() -> None:
            await loop.create_future()

        start(loop, fails())  # done, its exception never retrieved
        gc.collect()
        pending = start(loop, waits())  # suspended, then dropped without an await
        pending._coro.close()  # type: ignore[attr-defined]
        del pending
        gc.collect()
        fine = start(loop, asyncio.sleep(0, "ok"))
        assert not fine.done()
        assert await fine == "ok"
        del fine
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert len(reported) == 2, reported
    assert reported[0].endswith("exception was never retrieved")
    assert reported[1] == "Task was destroyed but it is pending!"


async def test_an_eager_task_is_named_when_asked() -> None:
    async def body() -> None:
        return None

    loop = asyncio.get_running_loop()
    first, second = start(loop, body()), start(loop, body())
    assert first.get_name().startswith("Task-") and first.get_name() != second.get_name()
    assert first.get_name() == first.get_name()  # named once
    second.set_name("mine")
    assert second.get_name() == "mine" and "mine" in repr(second)


async def test_cancelling_a_suspended_eager_task_cancels_only_it() -> None:
    loop = asyncio.get_running_loop()
    cleaned: list[str] = []

    async def body() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append("finally")

    task = start(loop, body())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["finally"] and task.cancelled()


async def test_a_timeout_and_a_task_group_entered_eagerly_bind_to_the_eager_task() -> None:
    # Entered in the first step (before any suspension): they must cancel the eager task
    # when they fire, never the task that started it.
    loop = asyncio.get_running_loop()

    async def timed() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(60)
        except TimeoutError:
            return "timed out"
        return "not reached"

    async def failing() -> None:
        raise ValueError("child failed")

    async def grouped() -> str:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(failing())
                await asyncio.sleep(60)
        except ExceptionGroup as group:
            return f"group failed: {group.exceptions[0]}"
        return "not reached"

    timed_task, group_task = start(loop, timed()), start(loop, grouped())
    assert await timed_task == "timed out"
    assert await group_task == "group failed: child failed"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


# -- the executor on eager tasks ------------------------------------------------------------

eager_agent = Registry("test.eager", entry="step")


@eager_agent.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    """A chain of `input` nodes that never suspend; each checks it runs as its own task."""
    current = asyncio.current_task()
    assert current is not None and current is not OUTER.get()
    left: int = node.input
    if left <= 1:
        return NodeResult(output=left, is_result=True)
    return NodeResult(output=left, spawn=[Spawn("step", left - 1)])


timing_out = Registry("test.eager_timeout", entry="timed")


@timing_out.node("timed", timeout=0.05)
async def timed(ctx: Context, node: Node) -> str:
    """Suspends past its timeout: the node fails, the run's own task is not cancelled."""
    await asyncio.sleep(60)
    return "not reached"


OUTER: contextvars.ContextVar[asyncio.Task[object] | None] = contextvars.ContextVar(
    "OUTER", default=None
)


async def test_a_chain_that_never_suspends_still_lets_other_tasks_run(store: Store) -> None:
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    rt = Runtime(store)
    graph = await rt.create(eager_agent, 300)
    ticking = asyncio.create_task(ticker())
    OUTER.set(asyncio.current_task())
    outcome = await rt.execute(graph)
    stop.set()
    await ticking
    assert outcome.status is Status.SUCCEEDED and outcome.graph.completed_count == 300
    # On memory: nothing awaited by a node or an append suspends, yet the loop gave other
    # tasks turns while the run went on (counted, not timed).
    assert ticks >= 300 // 32


async def test_a_node_timeout_cancels_the_node_not_the_run(store: Store) -> None:
    rt = Runtime(store)
    graph = await rt.create(timing_out)
    outcome = await rt.execute(graph)
    assert outcome.status is Status.FAILED
    assert "timed out" in outcome.reason
