"""Private PostgreSQL clusters for tests that stop, kill, fail over or partition a server.

The machine's server at 5432 is shared (other test runs, benchmarks, developers): a test
that restarts it breaks everyone else's work. A destructive test gets a cluster of its
own instead: `initdb` into a fresh temp directory, its own free port on 127.0.0.1, fsync
on, removed at the end. PostgreSQL refuses to run as root, so the binaries run as the
`postgres` OS user (through `runuser`) when the tests run as root.

Two test sessions on one machine never collide: directories come from mkdtemp, ports
from the kernel (and a start that loses a port race retries on another).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg

from tests.s3server import free_port


def _bin_dir() -> Path:
    """TETHER_TEST_PG_BIN, else the newest Debian PostgreSQL install."""
    if "TETHER_TEST_PG_BIN" in os.environ:
        return Path(os.environ["TETHER_TEST_PG_BIN"])
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    return installed[-1] if installed else Path("/usr/lib/postgresql/15/bin")


BIN = _bin_dir()
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    # No unix socket: its default directory is shared with the machine's server.
    "unix_socket_directories": "''",
    "fsync": "on",
    "synchronous_commit": "on",
    "max_connections": "300",
    "shared_buffers": "32MB",
    "log_min_messages": "warning",
    "logging_collector": "off",
}


def _as_postgres(args: list[str]) -> list[str]:
    """The command run as the `postgres` OS user when we are root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _run(args: list[str], timeout: float = 120) -> str:
    done = subprocess.run(
        _as_postgres(args), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


class PgCluster:
    """One private PostgreSQL cluster: initdb'd on creation, `start()`ed by its owner."""

    def __init__(self, root: Path, name: str = "pg", **settings: str) -> None:
        self.data = root / name
        self.log_file = root / f"{name}.log"
        self.port = 0
        self._settings = {**SETTINGS, **settings}

    @property
    def url(self) -> str:
        return self.url_of("postgres")

    def url_of(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def initdb(self) -> PgCluster:
        # --no-sync: initdb's own final fsync of a throwaway directory costs seconds on a
        # busy disk and buys nothing; the running server has fsync on.
        _run(
            [
                str(BIN / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )
        # Our settings live in a file of their own: postgresql.auto.conf belongs to
        # ALTER SYSTEM and pg_basebackup -R (a standby's primary_conninfo).
        _run(
            [
                "sh",
                "-c",
                f"echo \"include_if_exists = 'tether.conf'\" >> {self.data}/postgresql.conf",
            ]
        )
        return self

    def configure(self, **settings: str) -> None:
        """Change settings (written at the next start)."""
        self._settings.update(settings)

    def _write_conf(self) -> None:
        lines = [f"{k} = {v}" for k, v in {**self._settings, "port": str(self.port)}.items()]
        conf = self.data / "tether.conf"
        _run(["sh", "-c", f"cat > {conf} <<'EOF'\n" + "\n".join(lines) + "\nEOF"])

    def start(self, attempts: int = 5) -> PgCluster:
        """Start on a free port (a new one if another process took it meanwhile)."""
        for attempt in range(attempts):
            if not self.port or attempt:
                self.port = free_port()
            self._write_conf()
            try:
                _run(self._ctl("start", "-w", "-t", "60", "-l", str(self.log_file)))
                return self
            except RuntimeError:
                if attempt == attempts - 1 or "in use" not in self.log_text():
                    raise
        raise AssertionError("unreachable")

    def _ctl(self, *args: str) -> list[str]:
        return [str(BIN / "pg_ctl"), "-D", str(self.data), *args]

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m MODE`: fast (clean), immediate (a crash: no checkpoint)."""
        _run(self._ctl("stop", "-w", "-t", "60", "-m", mode))

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same port (clients reconnect to the same URL)."""
        self.stop(mode)
        self.start_again()

    def start_again(self) -> None:
        """Start a stopped cluster on the port it had (clients reconnect to the same URL)."""
        _run(self._ctl("start", "-w", "-t", "60", "-l", str(self.log_file)))

    def promote(self) -> None:
        _run(self._ctl("promote", "-w", "-t", "60"))

    def running(self) -> bool:
        done = subprocess.run(_as_postgres(self._ctl("status")), capture_output=True, check=False)
        return done.returncode == 0

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def base_backup_into(self, standby: PgCluster, via_port: int = 0) -> None:
        """Make `standby` a streaming replica of this (running) cluster.

        `via_port`: a proxy's port in front of this cluster, which the standby then
        streams through (so a test can delay or cut replication).
        """
        _run(
            [
                str(BIN / "pg_basebackup"),
                "-h",
                "127.0.0.1",
                "-p",
                str(via_port or self.port),
                "-U",
                "postgres",
                "-D",
                str(standby.data),
                "-R",  # standby.signal + primary_conninfo
                "-X",
                "stream",
                "--no-sync",
                "-C",
                "-S",
                standby.data.name,  # a replication slot: the primary keeps WAL for it
            ]
        )


@contextmanager
def private_root() -> Iterator[Path]:
    """A temp directory the postgres user owns, removed (with whatever ran in it) at exit."""
    root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    _own(root)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def open_cluster(**settings: str) -> Iterator[PgCluster]:
    """A started private cluster, stopped and removed at exit (also after a failure)."""
    with private_root() as root:
        cluster = PgCluster(root, **settings).initdb()
        try:
            yield cluster.start()
        finally:
            shutdown(cluster)


def shutdown(cluster: PgCluster) -> None:
    """Stop the cluster whatever state it is in (a crash stop: the data is thrown away)."""
    if cluster.data.exists() and cluster.running():
        try:
            cluster.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            pid_file = cluster.data / "postmaster.pid"
            if pid_file.exists():
                os.kill(int(pid_file.read_text().split()[0]), 9)


async def wait_connectable(url: str, within: float = 60) -> None:
    """Until a connection to `url` succeeds (a handshake after a start or promote)."""
    deadline = time.monotonic() + within
    while True:
        try:
            conn = await asyncpg.connect(url, timeout=5)
            await conn.close()
            return
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
