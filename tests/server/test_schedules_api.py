"""/v1/schedules through the Python client: add, list, remove, and bad input refused."""

from __future__ import annotations

import pytest

from tests.server.kit import CHAIN, TOKEN, running
from tether.client import ApiError, TetherClient
from tether.store.base import Store


async def test_schedules_over_http(sqlite_store: Store) -> None:
    async with running(sqlite_store) as (url, _), TetherClient(url, TOKEN) as client:
        added = await client.add_schedule(
            "hourly", cron="0 * * * *", agent=CHAIN, input={"n": 2}, timezone="Europe/Paris"
        )
        assert (added["name"], added["timezone"], added["catch_up"]) == (
            "hourly", "Europe/Paris", "skip"
        )  # fmt: skip
        listed = (await client.schedules())["schedules"]
        assert [(s["name"], s["cron"], s["input"]) for s in listed] == [
            ("hourly", "0 * * * *", {"n": 2})
        ]
        with pytest.raises(ApiError) as taken:
            await client.add_schedule("hourly", cron="* * * * *", agent=CHAIN)
        assert (taken.value.status, taken.value.kind) == (409, "schedule_exists")
        assert await client.remove_schedule("hourly") == {"name": "hourly", "removed": True}
        with pytest.raises(ApiError) as gone:
            await client.remove_schedule("hourly")
        assert (gone.value.status, gone.value.kind) == (404, "unknown_schedule")


@pytest.mark.parametrize(
    ("body", "kind", "says"),
    [
        ({"cron": "* * *"}, "bad_schedule", "give 5 fields"),
        ({"timezone": "Nowhere/Land"}, "bad_schedule", "time zone"),
        ({"agent": "not.served:here"}, "unknown_agent", "not served here"),
        ({"name": "has space"}, "bad_schedule", "schedule name"),
    ],
)
async def test_bad_schedules_are_refused_and_nothing_stored(
    sqlite_store: Store, body: dict[str, str], kind: str, says: str
) -> None:
    args = {"name": "s", "cron": "0 3 * * *", "agent": CHAIN, **body}
    async with running(sqlite_store) as (url, _), TetherClient(url, TOKEN) as client:
        with pytest.raises(ApiError) as refused:
            await client.add_schedule(args.pop("name"), **args)
        assert (refused.value.status, refused.value.kind) == (422, kind)
        assert says in str(refused.value)
        assert (await client.schedules())["schedules"] == []
