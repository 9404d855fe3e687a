"""Delivering an event to a run: recorded in its log before the sender hears back.

A run executing in this process takes the event in its executor's loop. Any other run is
taken for a moment, like a claim: a new epoch fences the append, so whichever replica
receives the event (and however often it is retried) it is recorded once. Then the run is
given back: queued when the event made work ready (a worker wakes it), still parked
otherwise, or as it was (paused, queued).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.engine.executor import NotAccepting, wake_at_of
from tether.foundation.errors import RunHeldElsewhere, StaleEpoch, UnknownRun
from tether.model.graph import Graph
from tether.model.records import encode
from tether.model.waits import check_payload, event_record, find_wait
from tether.store.base import DRAIN, Status

if TYPE_CHECKING:
    from tether.engine.runtime import Runtime

log = logging.getLogger("tether.engine.delivery")

# How long a delivery holds a parked run: it needs milliseconds; if the delivering process
# dies holding it, a worker takes the run over once this has passed (the event, if its
# append landed, is in the log and is not recorded again).
HOLD_TTL_S = 10.0


@dataclass(frozen=True, slots=True)
class Delivered:
    """An event recorded in a run's log (or found there already: `duplicate`)."""

    run_id: str
    key: str
    seq: int | None
    duplicate: bool
    # The run's status after the delivery, as far as this process knows.
    status: Status


async def deliver(
    rt: Runtime, run_id: str, key: str, payload: Any, *, event_id: str, wait_s: float
) -> Delivered:
    """Record the event for wait `key` of `run_id`; raise, recording nothing, if it does
    not fit (EventRefused and its kinds, UnknownRun; RunHeldElsewhere after `wait_s`)."""
    here = await _to_executor(rt, run_id, key, payload, event_id)
    if here is not None:
        return here
    # Judge first, without taking anything: a bad event changes nothing, not even an epoch.
    graph = await rt.load(run_id)
    state = find_wait(graph, key, event_id)
    if state is None:
        return Delivered(run_id, key, None, True, graph.status)
    check_payload(graph, state, payload)
    give_up, delay = time.monotonic() + wait_s, 0.01
    while True:
        here = await _to_executor(rt, run_id, key, payload, event_id)
        if here is not None:
            return here
        info = await rt.store.runs.get(run_id)
        if info is None:
            raise UnknownRun(run_id)
        try:
            if info.parent_run_id is not None:
                done = await _deliver_to_child(rt, run_id, key, payload, event_id)
                if done is not None:
                    return done
            else:
                claim = await rt.keeper.take(run_id, ttl=HOLD_TTL_S)
                if claim is not None:
                    return await _deliver_held(
                        rt, run_id, key, payload, event_id, claim.epoch, info.status, info.reason
                    )
        except StaleEpoch:
            # Taken over (a forced resume) while this delivery held it: the event was not
            # written; it goes to the new owner, judged again below.
            pass
        # Held by another delivery, or finished meanwhile: judged again on the log, so an
        # event that lost a race hears so now rather than after its turn to hold the run.
        graph = await rt.load(run_id)
        if find_wait(graph, key, event_id) is None:  # else WaitCompleted
            return Delivered(run_id, key, None, True, graph.status)
        if time.monotonic() > give_up:
            raise RunHeldElsewhere(run_id, wait_s)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.25)


async def _to_executor(
    rt: Runtime, run_id: str, key: str, payload: Any, event_id: str
) -> Delivered | None:
    executor = rt.executing.get(run_id)
    if executor is None or not executor.accepting:
        return None
    try:
        seq = await executor.deliver(key, payload, event_id)
    except NotAccepting:
        return None  # it is parking: deliver through the store once it is released
    return Delivered(run_id, key, seq, seq is None, Status.RUNNING)


async def _deliver_held(
    rt: Runtime,
    run_id: str,
    key: str,
    payload: Any,
    event_id: str,
    epoch: int,
    was: Status,
    was_reason: str | None,
) -> Delivered:
    """With the run taken at `epoch`: read it again, append the event, give it back."""
    status, reason, wake_at, seq = was, was_reason, None, None
    try:
        graph = await rt.load(run_id)
        # Given back as it was unless the event lands (computed first: a refusal keeps it).
        status, reason, wake_at = _given_back(graph, was, was_reason)
        seq = await _append_event(rt, graph, key, payload, event_id, epoch)
        status, reason, wake_at = _given_back(graph, was, was_reason)
    finally:
        await rt.keeper.release(run_id, epoch, status, reason, wake_at=wake_at)
    return Delivered(run_id, key, seq, seq is None, status)


async def _append_event(
    rt: Runtime, graph: Graph, key: str, payload: Any, event_id: str, epoch: int
) -> int | None:
    """With the run taken at `epoch`, judged again on its log: append the event; its seq,
    or None if this event was recorded before."""
    state = find_wait(graph, key, event_id)
    if state is None:
        return None
    check_payload(graph, state, payload)
    value = await (await rt.codec_for(graph.run_id)).encode(payload)  # blobs first
    record = event_record(state, value, event_id)
    rt.check_record_size(graph.run_id, state.spec.node_id, encode(record))
    return await rt.writer.write(graph, record, epoch=epoch)


async def _deliver_to_child(
    rt: Runtime, run_id: str, key: str, payload: Any, event_id: str
) -> Delivered | None:
    """An event for a sub-agent run: take its top-level run (None if another process holds
    it), adopt each run down to this one (epochs fenced by their parents'), append to its
    log, and give the top-level run back queued: its node runs again and continues the
    child from its log, the child's successors running then."""
    chain = [run_id]  # this run, its parent, ..., the top-level run
    while (row := await rt.store.runs.get(chain[-1])) is not None and row.parent_run_id:
        chain.append(row.parent_run_id)
    if row is None:
        raise UnknownRun(chain[-1])
    top = row
    claim = await rt.keeper.take(top.run_id, ttl=HOLD_TTL_S)
    if claim is None:
        return None
    seq = None
    # Given back as it was unless the event lands (computed first: a refusal keeps wake_at).
    status, reason, wake_at = _given_back(await rt.load(top.run_id), top.status, top.reason)
    try:
        epoch = claim.epoch
        for child, parent in zip(reversed(chain[:-1]), reversed(chain[1:]), strict=True):
            epoch = await rt.store.leases.adopt_child(child, rt.owner, parent, epoch)
        seq = await _append_event(rt, await rt.load(run_id), key, payload, event_id, epoch)
        status, reason, wake_at = _given_back(await rt.load(top.run_id), top.status, top.reason)
    finally:
        await rt.keeper.release(top.run_id, claim.epoch, status, reason, wake_at=wake_at)
    return Delivered(run_id, key, seq, seq is None, status)


def _given_back(
    graph: Graph, was: Status, reason: str | None
) -> tuple[Status, str | None, float | None]:
    """The status a delivery leaves a run in: queued once work is ready (a worker takes
    it up; a parked run's own wake-up), parked still if not, else as it was."""
    if was is Status.WAITING:
        if graph.ready or not graph.open_waits or _due(graph):
            return Status.QUEUED, None, None
        return Status.WAITING, reason, wake_at_of(graph)
    if was is Status.RUNNING:  # orphaned (its lease ran out): runnable again
        return Status.QUEUED, None, None
    if was is Status.PAUSED and reason == DRAIN:
        return Status.PAUSED, reason, None
    return was, reason, None


def _due(graph: Graph) -> bool:
    wake = graph.wake_at_us()
    return bool(wake) and wake <= time.time_ns() // 1000
