"""Concurrency keys and priorities from the Python API: stored with the run, checked first."""

from __future__ import annotations

import pytest

from tether import BadLimit, Runtime, Status, Store

AGENT = "tests.limit_agents:nap"


async def test_a_submitted_run_carries_its_key_and_priority(store: Store) -> None:
    rt = Runtime(store)
    run_id = await rt.submit(AGENT, 0, key="tenant-1", priority=3)
    info = await store.runs.get(run_id)
    assert info is not None and (info.key, info.priority) == ("tenant-1", 3)
    plain = await store.runs.get(await rt.submit(AGENT, 0))
    assert plain is not None and (plain.key, plain.priority) == (None, 0)


async def test_a_started_run_carries_its_key_and_finishes(store: Store) -> None:
    outcome = await Runtime(store).start(AGENT, 0, key="tenant-2", priority=-1)
    assert outcome.status is Status.SUCCEEDED
    info = await store.runs.get(outcome.run_id)
    assert info is not None and (info.key, info.priority) == ("tenant-2", -1)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"key": ""}, "concurrency key ''"),
        ({"key": "x" * 201}, "give 1 to 200 printable characters"),
        ({"key": "a\nb"}, "concurrency key"),
        ({"priority": 1.5}, "priority 1.5: give an integer"),
        ({"priority": 2**40}, "priority"),
    ],
)
async def test_a_bad_key_or_priority_records_nothing(
    store: Store, kw: dict[str, object], message: str
) -> None:
    with pytest.raises(BadLimit, match=message):
        await Runtime(store).submit(AGENT, 0, run_id="bad-one", **kw)  # type: ignore[arg-type]
    assert await store.runs.get("bad-one") is None
