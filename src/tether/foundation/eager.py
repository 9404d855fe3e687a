"""Tasks whose first step runs at once: a node whose handler never suspends costs no loop turn.

`loop.create_task` schedules a task's first step for the next loop iteration, and the loop
that awaits it wakes one iteration later: two iterations and a scheduled callback per node,
most of the executor's cost for a handler that returns without awaiting anything. An eager
task runs its coroutine up to its first suspension inside the call that makes it; if the
coroutine returns by then, the task is done before `start` returns.

Python 3.12 has this built in (`Task(..., eager_start=True)`). 3.11's C Task always
schedules its first step, so there the Python Task is started the way 3.12 starts it: it
is the current task while its first step runs (asyncio.timeout, TaskGroup and anyio bind
to it, not to the caller), in its own copy of the caller's context, and it is registered
with the loop (`asyncio.all_tasks`) only if it suspends. From its first suspension on it
is an ordinary task: cancellation, wake-ups and exceptions go through asyncio's own code.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

if sys.version_info >= (3, 12):

    def start(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task for `coro`, run up to its first suspension before this returns."""
        return asyncio.Task(coro, loop=loop, eager_start=True)

else:
    from asyncio import format_helpers, futures
    from asyncio import tasks as _tasks

    _PyTask: Any = _tasks._PyTask  # type: ignore[attr-defined]
    _step = _PyTask._Task__step  # the Python Task's own step (name-mangled in its class)
    _current = _tasks._current_tasks.get  # type: ignore[attr-defined]  # (loop) -> its task
    _enter, _leave, _register = _tasks._enter_task, _tasks._leave_task, _tasks._register_task
    _names = _tasks._task_name_counter  # type: ignore[attr-defined]
    _PENDING = futures._PENDING  # type: ignore[attr-defined]

    class _EagerTask(_PyTask):  # type: ignore[misc]
        """asyncio's Python Task, made without scheduling its first step (which `start`
        runs); the fields are those `Task.__init__` sets in 3.11."""

        def __init__(self, coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop):
            # Future.__init__'s fields, set here: one call less for every node.
            self._loop = loop
            self._callbacks: list[Any] = []
            if loop.get_debug():
                self._source_traceback = format_helpers.extract_stack(sys._getframe(1))
            self._num_cancels_requested = 0
            self._must_cancel = False
            self._fut_waiter = None
            self._coro: Coroutine[Any, Any, Any] | None = coro
            self._context = contextvars.copy_context()

        _name: str | None = None  # named when first asked: most are never asked

        def get_name(self) -> str:
            if self._name is None:
                self._name = f"Task-{_names()}"
            return self._name

        def __del__(self) -> None:
            # Task.__del__ and Future.__del__ are two Python calls for every node; they say
            # something only of a task destroyed pending or an exception never retrieved.
            pending = self._state == _PENDING and self._log_destroy_pending
            if pending or self._Future__log_traceback:
                super().__del__()

    def start(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """A task for `coro`, run up to its first suspension before this returns."""
        task = _EagerTask(coro, loop)
        # The step makes the task the loop's current task: the caller's task steps aside.
        caller = _current(loop)
        if caller is not None:
            _leave(loop, caller)
        try:
            task._context.run(_step, task)
        finally:
            if caller is not None:
                _enter(loop, caller)
        if task._state == _PENDING:  # it suspended: from now on an ordinary task
            _register(task)
        result: asyncio.Task[T] = task
        return result


__all__ = ["start"]
