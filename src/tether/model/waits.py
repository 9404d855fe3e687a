"""Wait nodes: building their specs, judging an event against a run, recording timeouts.

A wait is a node that an event (or its deadline) completes instead of a handler. Its
completion is an ordinary `NodeCompleted` with a `WaitOutcome`, so the graph makes its
successors ready as for any node, live and on replay alike. These functions decide; the
executor (for a run executing here) and `tether.engine.delivery` (for a parked run) write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tether.foundation.core import Event, Sleep, Wait
from tether.foundation.errors import BadEventPayload, InvalidSpawn, UnknownWait, WaitCompleted
from tether.foundation.ids import child_id
from tether.model.graph import Graph, NodeState
from tether.model.records import NodeSpec, Record, Value, WaitSpec, dump_json, wait_completed
from tether.model.values import ValueCodec

# The kinds of wait nodes: no handler runs them (a registry may not even have these).
WAIT_KIND = "tether.wait"
SLEEP_KIND = "tether.sleep"


async def wait_spec(
    node_id: str,
    item: Wait | Sleep,
    parents: list[str],
    codec: ValueCodec,
    now_us: int,
) -> NodeSpec:
    """The spec of a wait (or sleep) spawned by `node_id`, its deadline fixed from `now_us`."""
    if not item.key:
        raise InvalidSpawn(f"node {node_id}: a wait needs a non-empty key")
    spec = NodeSpec(node_id=child_id(node_id, item.key), parent_ids=parents)
    wait = WaitSpec(key=item.key)
    if isinstance(item, Sleep):
        spec.kind = SLEEP_KIND
        wait.timer_only = True
        if (item.seconds is None) == (item.until is None):
            raise InvalidSpawn(f"node {node_id}: sleep {item.key!r} needs `seconds` or `until`")
        wait.deadline_us = (
            _deadline(node_id, item.key, now_us, item.seconds)
            if item.seconds is not None
            else _at_us(node_id, item.key, item.until)
        )
    else:
        spec.kind = WAIT_KIND
        if item.timeout is not None:
            wait.deadline_us = _deadline(node_id, item.key, now_us, item.timeout)
        if item.data is not None:
            wait.data.CopyFrom(await codec.encode(item.data))
        if item.schema is not None:
            wait.schema = _schema_bytes(node_id, item.key, item.schema)
    spec.wait.CopyFrom(wait)
    return spec


def _deadline(node_id: str, key: str, now_us: int, seconds: float) -> int:
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidSpawn(f"node {node_id}: wait {key!r} has a bad duration {seconds!r}")
    return now_us + max(1, int(seconds * 1_000_000))


def _at_us(node_id: str, key: str, until: float | None) -> int:
    if until is None or not math.isfinite(until) or until <= 0:
        raise InvalidSpawn(f"node {node_id}: sleep {key!r} has a bad `until` {until!r}")
    return int(until * 1_000_000)


def _schema_bytes(node_id: str, key: str, schema: Mapping[str, Any]) -> bytes:
    from jsonschema import SchemaError, validators

    try:
        validators.validator_for(dict(schema)).check_schema(dict(schema))
    except SchemaError as exc:
        raise InvalidSpawn(f"node {node_id}: wait {key!r} has an invalid schema: {exc}") from None
    return dump_json(dict(schema))


def find_wait(graph: Graph, key: str, event_id: str) -> NodeState | None:
    """The open wait an event for `key` completes; None if this very event completed it.

    UnknownWait if the run has no such wait (yet: events are not buffered), WaitCompleted
    if another event or its deadline completed it, or it is a sleep.
    """
    run_id = graph.run_id
    node_id = graph.waits.get(key)
    done = graph.completed(node_id) if node_id is not None else None
    if done is not None and event_id and done.wait.event_id == event_id:
        return None  # a retry of the event that completed it
    if graph.finished is not None:
        raise WaitCompleted(run_id, key, f"the run has finished ({graph.status})")
    if node_id is None:
        open_keys = sorted(w.key for w in graph.pending_waits())
        raise UnknownWait(
            run_id,
            key,
            "the run has no wait with this key (events for a wait that does not exist yet "
            f"are refused, not buffered); pending waits: {open_keys or 'none'}",
        )
    state = graph.nodes[node_id]
    if done is not None:
        how = "its deadline" if done.wait.timed_out else "another event"
        raise WaitCompleted(run_id, key, f"the wait was already completed by {how}")
    if state.spec.wait.timer_only:
        raise WaitCompleted(run_id, key, "it is a sleep: only its timer completes it")
    if node_id not in graph.open_waits:
        raise UnknownWait(run_id, key, "the wait has not opened yet (its parents are pending)")
    return state


def check_payload(graph: Graph, state: NodeState, payload: Any) -> None:
    """BadEventPayload if the payload is not JSON or does not fit the wait's schema."""
    key = state.spec.wait.key
    try:
        dump_json(payload)
    except Exception as exc:
        raise BadEventPayload(graph.run_id, key, str(exc)) from None
    raw = state.spec.wait.schema
    if not raw:
        return
    from jsonschema import validators

    schema = json.loads(raw)
    errors = sorted(validators.validator_for(schema)(schema).iter_errors(payload), key=str)
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(the payload)"
        raise BadEventPayload(
            graph.run_id,
            key,
            f"payload does not fit the wait's schema at {where}: {errors[0].message}",
        )


def event_record(state: NodeState, payload: Value, event_id: str) -> Record:
    """The record of an event completing the wait of `state`."""
    return wait_completed(state.spec, payload=payload, event_id=event_id)


def due_timeouts(graph: Graph, now_us: int) -> list[Record]:
    """The records of open waits whose deadline has passed (timed out, no payload)."""
    specs = [graph.spec(nid) for nid in graph.open_waits]
    return [
        wait_completed(spec, payload=None, timed_out=True)
        for spec in specs
        if 0 < spec.wait.deadline_us <= now_us
    ]


async def event_of(graph: Graph, key: str, codec: ValueCodec) -> Event:
    """The event that completed wait `key` (KeyError if it has not completed)."""
    node_id = graph.waits.get(key)
    done = graph.completed(node_id) if node_id is not None else None
    if done is None or node_id is None:
        raise KeyError(f"wait {key!r} of run {graph.run_id} has not completed")
    payload = None if done.wait.timed_out else await codec.decode_cached(node_id, done.output)
    return Event(key, payload, done.wait.timed_out, done.wait.event_id)
