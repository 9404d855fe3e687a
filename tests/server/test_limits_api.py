"""/v1/limits and a run's key and priority through the Python client; bad input refused."""

from __future__ import annotations

import pytest

from tests.server.kit import CHAIN, TOKEN, running
from tether.client import ApiError, TetherClient
from tether.store.base import Store


async def test_limits_over_http_and_a_run_says_why_it_waits(sqlite_store: Store) -> None:
    # No worker here (external): runs stay queued, so what holds them back shows.
    async with (
        running(sqlite_store, workers="external") as (url, _),
        TetherClient(url, TOKEN) as client,
    ):
        limit = await client.set_limit(CHAIN, 1, key="tenant-a")
        assert limit == {
            "agent": CHAIN, "key": "tenant-a", "each_key": False, "max_running": 1, "running": 0
        }  # fmt: skip
        await client.set_limit(CHAIN, 5, each_key=True)
        listed = (await client.limits())["limits"]
        assert [(x["key"], x["each_key"], x["max_running"]) for x in listed] == [
            ("tenant-a", False, 1),
            (None, True, 5),
        ]
        first = await client.start(CHAIN, {"n": 1}, key="tenant-a", priority=4)
        second = await client.start(CHAIN, {"n": 1}, key="tenant-a")
        [claim] = await sqlite_store.leases.claim("w", 10, 60.0)  # as a worker would
        assert claim.run_id == first["run_id"]
        run = await client.get(second["run_id"])
        assert (run["row"]["key"], run["row"]["priority"]) == ("tenant-a", 0)
        assert run["row"]["reason"].startswith("waiting: key tenant-a at its limit 1")
        page = (await client.list())["runs"]
        assert {r["run_id"]: r["priority"] for r in page} == {
            first["run_id"]: 4,
            second["run_id"]: 0,
        }
        removed = await client.remove_limit(CHAIN, key="tenant-a")
        assert removed == {"scope": f"key tenant-a of agent {CHAIN}", "removed": True}
        with pytest.raises(ApiError) as gone:
            await client.remove_limit(CHAIN, key="tenant-a")
        assert (gone.value.status, gone.value.kind) == (404, "unknown_limit")
        [claim] = await sqlite_store.leases.claim("w", 10, 60.0)
        assert claim.run_id == second["run_id"]


@pytest.mark.parametrize(
    ("body", "kind", "says"),
    [
        ({"max_running": 0}, "bad_limit", "max running must be 1 or more, not 0"),
        ({"max_running": -1}, "bad_limit", "not -1"),
        ({"key": "k", "each_key": True}, "bad_limit", "not both"),
        ({"agent": "not.served:here"}, "unknown_agent", "not served here"),
    ],
)
async def test_bad_limits_are_refused_and_nothing_stored(
    sqlite_store: Store, body: dict[str, object], kind: str, says: str
) -> None:
    args: dict[str, object] = {"agent": CHAIN, "max_running": 2, **body}
    async with (
        running(sqlite_store, workers="external") as (url, _),
        TetherClient(url, TOKEN) as client,
    ):
        with pytest.raises(ApiError) as refused:
            await client.set_limit(**args)  # type: ignore[arg-type]
        assert (refused.value.status, refused.value.kind) == (422, kind)
        assert says in str(refused.value)
        assert (await client.limits())["limits"] == []


async def test_a_bad_key_or_priority_starts_nothing(sqlite_store: Store) -> None:
    async with (
        running(sqlite_store, workers="external") as (url, _),
        TetherClient(url, TOKEN) as client,
    ):
        for kw in ({"key": ""}, {"key": "a\tb"}, {"priority": 2**40}):
            with pytest.raises(ApiError) as refused:
                await client.start(CHAIN, {"n": 1}, **kw)  # type: ignore[arg-type]
            assert refused.value.status in (400, 422), kw
        assert (await client.list())["runs"] == []
