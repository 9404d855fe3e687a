"""`tether db migrate --partitions N`: run_log hash-partitioned by run_id, nothing lost."""

from __future__ import annotations

import asyncpg
import pytest

from tether.cli.app import main
from tether.store import RunInfo, Status, migrate_url
from tether.store.postgres import PostgresStore


async def _fill(url: str, runs: int, rows: int) -> None:
    async with PostgresStore(url) as store:
        for r in range(runs):
            await store.runs.create(RunInfo(f"p{r}", "agent", Status.QUEUED), b"started")
            await store.log.append(f"p{r}", [(s, b"p%d-%d" % (r, s)) for s in range(1, rows)])


async def _partitions(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'run_log'::regclass ORDER BY 1"
        )
        return [r[0] for r in rows]
    finally:
        await conn.close()


async def test_partitioning_keeps_every_record_and_the_store_works_on_it(
    pg_database: str,
) -> None:
    await _fill(pg_database, 12, 5)
    assert await migrate_url(pg_database, partitions=4) == ["partitions 4"]
    assert len(await _partitions(pg_database)) == 4
    assert await migrate_url(pg_database, partitions=4) == []  # already so
    async with PostgresStore(pg_database) as store:
        assert await store.log_partitions() == 4
        for r in range(12):
            assert await store.log.read_all(f"p{r}") == [b"started"] + [
                b"p%d-%d" % (r, s) for s in range(1, 5)
            ]
        # Appends, their judgement and new runs work on the partitioned log.
        await store.log.append("p3", [(5, b"more")])
        await store.log.append("p3", [(5, b"more")])
        await store.runs.create(RunInfo("new", "agent", Status.QUEUED), b"started")
        assert await store.log.read("new") == [(0, b"started")]
    # Repartitioned, and back to one plain table: still every record.
    assert await migrate_url(pg_database, partitions=8) == ["partitions 8"]
    assert len(await _partitions(pg_database)) == 8
    assert await migrate_url(pg_database, partitions=1) == ["partitions 1"]
    assert await _partitions(pg_database) == []
    async with PostgresStore(pg_database) as store:
        assert (await store.log.read("p3"))[-1] == (5, b"more")


def test_the_cli_names_a_bad_partition_count(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--db", f"sqlite:///{tmp_path}/t.db", "db", "migrate", "--partitions", "4"]) == 2
    assert "--partitions needs a postgresql:// store" in capsys.readouterr().err


def test_the_cli_refuses_a_count_out_of_range(
    pg_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--db", pg_database, "db", "migrate", "--partitions", "0"]) == 2
    assert "choose 1 (plain) to 1024" in capsys.readouterr().err
