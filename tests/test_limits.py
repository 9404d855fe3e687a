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


async def test_limits_given_in_code_are_stored_with_the_first_run_and_a_set_one_wins(
    store: Store,
) -> None:
    from tether import ConcurrencyLimit, Registry

    coded = Registry("coded", entry="nap", max_running=4, max_running_per_key=2)
    coded.add("nap", lambda ctx, node: None)  # type: ignore[arg-type, return-value]
    await store.limits.set(ConcurrencyLimit("coded", 9))  # set by hand first: it wins
    rt = Runtime(store)
    await rt.submit(coded, key="k")
    await rt.submit(coded, key="k")
    assert await store.limits.all() == [
        ConcurrencyLimit("coded", 9),
        ConcurrencyLimit("coded", 2, each_key=True),
    ]
    with pytest.raises(BadLimit, match="max running must be 1 or more, not 0"):
        Registry("zero", entry="nap", max_running=0)
