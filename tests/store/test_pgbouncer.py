"""The PostgreSQL store behind PgBouncer in transaction mode (`statement_cache_size=0`).

A private `pgbouncer` (the Debian package; `scripts/test.sh` installs it) listens on a free
port in front of the shared server; every pooled statement may run on another server
connection than the one before. Skipped, naming why, only where `pgbouncer` is not
installed. LISTEN/NOTIFY is session state and does not pass a transaction pooler: workers
behind one find work by polling (`tether worker --poll`), which these tests do not need.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bench.agents import chain
from tests.s3server import free_port
from tether.engine.runtime import Runtime
from tether.foundation.errors import StaleEpoch
from tether.store import RunInfo, Status
from tether.store.postgres import PostgresStore

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
)
pytestmark = pytest.mark.skipif(
    PGBOUNCER is None, reason="pgbouncer is not installed (apt-get install pgbouncer)"
)


@pytest.fixture(scope="module")
def bouncer_url(pg_database: str) -> Iterator[str]:
    """A URL of the module's database through a transaction-mode PgBouncer."""
    assert PGBOUNCER is not None
    server = urlsplit(pg_database)
    # Not under pytest's tmp_path (private to root): pgbouncer drops root for the postgres
    # user, which must write its log here.
    work = Path(tempfile.mkdtemp(prefix="tether-pgbouncer-"))
    work.chmod(0o777)
    port = free_port()
    user = server.username or "postgres"
    (work / "users.txt").write_text(f'"{user}" ""\n')
    (work / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={server.hostname or "127.0.0.1"} port={server.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {work / "users.txt"}
pool_mode = transaction
default_pool_size = 4
max_client_conn = 100
logfile = {work / "pgbouncer.log"}
pidfile = {work / "pgbouncer.pid"}
"""
    )
    cmd = [PGBOUNCER, str(work / "pgbouncer.ini")]
    if os.geteuid() == 0:
        cmd[1:1] = ["-u", "postgres"]  # pgbouncer refuses to run as root
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not _accepts(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (
                    (work / "pgbouncer.log").read_text()
                    if (work / "pgbouncer.log").exists()
                    else ""
                )
                err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
                pytest.fail(f"pgbouncer did not start on port {port}: {err}{log}")
            time.sleep(0.05)
        yield f"postgresql://{user}@127.0.0.1:{port}{server.path}?statement_cache_size=0"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
        shutil.rmtree(work, ignore_errors=True)


def _accepts(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
async def store(bouncer_url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(bouncer_url, min_size=2, max_size=8) as store:
        yield store  # type: ignore[misc]


async def test_migrate_append_read_claim_and_release_through_pgbouncer(
    store: PostgresStore,
) -> None:
    assert await store.migrate() == []  # the schema is current: migrations ran through it
    await store.runs.create(RunInfo("pb", "agent", Status.QUEUED), b"started")
    (claim,) = [c for c in await store.leases.claim("w", limit=10, ttl=30) if c.run_id == "pb"]
    for seq in range(1, 20):  # more statements than server connections: they move around
        await store.log.append("pb", [(seq, b"r%d" % seq)], epoch=claim.epoch)
    await store.log.append("pb", [(19, b"r19")], epoch=claim.epoch)  # an idempotent retry
    assert await store.log.read_all("pb") == [b"started"] + [b"r%d" % s for s in range(1, 20)]
    assert (await store.leases.renew("w", [claim], 30)).lost == []
    await store.leases.release("pb", claim.epoch, Status.PAUSED, "drain")
    (again,) = [c for c in await store.leases.claim("w2", limit=10, ttl=30) if c.run_id == "pb"]
    with pytest.raises(StaleEpoch):
        await store.log.append("pb", [(20, b"late")], epoch=claim.epoch)
    await store.log.append("pb", [(20, b"r20")], epoch=again.epoch)


async def test_concurrent_runs_group_commit_through_pgbouncer(store: PostgresStore) -> None:
    store._log._group.statements = 1  # appends that start meanwhile share a statement
    before = store._log._group.statistics()["group_statements"]
    outcomes = await asyncio.gather(*(Runtime(store).start(chain, 10) for _ in range(20)))
    assert {o.status for o in outcomes} == {Status.SUCCEEDED}
    assert store._log._group.statistics()["group_statements"] > before
    graph = await Runtime(store).load(outcomes[0].run_id)
    assert graph.completed_count == 10


def test_the_url_option_reaches_the_pool(bouncer_url: str) -> None:
    assert PostgresStore(bouncer_url)._db.statement_cache_size == 0
    assert "statement_cache_size" not in PostgresStore(bouncer_url)._db.dsn
