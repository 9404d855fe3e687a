"""Array literals (store/postgres_arrays.py) read back by PostgreSQL as the very lists."""

from __future__ import annotations

import asyncio

import asyncpg
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.store.postgres.arrays import int_array, text_array

# PostgreSQL text holds any character but NUL.
TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
AWKWARD = ["", "NULL", "null", " a b ", 'q"uote', "back\\slash", '\\"', "{,}", "é☃", "a,b"]


async def _round_trip(url: str, texts: list[str], ints: list[int]) -> None:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT $1::text::text[], $2::text::bigint[]", text_array(texts), int_array(ints)
        )
    finally:
        await conn.close()
    assert row is not None
    assert list(row[0]) == texts
    assert list(row[1]) == ints


def test_awkward_strings_read_back_as_given(pg_database: str) -> None:
    asyncio.run(_round_trip(pg_database, AWKWARD, [0, -1, 2**63 - 1, -(2**63)]))
    asyncio.run(_round_trip(pg_database, [], []))


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.one_of(TEXT, st.sampled_from(AWKWARD)), max_size=12),
    ints=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=12),
)
def test_any_lists_read_back_as_given(pg_database: str, texts: list[str], ints: list[int]) -> None:
    asyncio.run(_round_trip(pg_database, texts, ints))
