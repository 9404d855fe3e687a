"""Storage faults: the blob directory full or read-only; SQLite killed mid-write.

The full disk is a real one: a 1 MiB tmpfs mounted for the test (the suite runs as root
in CI; elsewhere the test is skipped with the reason). Read-only is the same mount
remounted `ro`. Either way a run pauses with a reason that names the blob store and the
error, records nothing it could not back with its blob, and resumes once space is back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents import EXECUTIONS
from tests.faults.harness import REPO_ROOT, TETHER_SRC
from tests.offload_agents import offload
from tether import Runtime, Status, store_from_url
from tether.blobs import LocalBlobStore
from tether.model.records import decode_log
from tether.ops.blob_verify import verify_run


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "blobs"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs for the storage tests: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(root: Path) -> Path:
    """Write a file until the filesystem is full; return it."""
    filler = root / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def remount(root: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(root)], check=True)


@pytest.mark.parametrize("fault", ["full", "read-only"])
@pytest.mark.parametrize("spec", [{"out": 100_000}, {"attach": 10_000}], ids=["output", "attach"])
async def test_a_full_or_read_only_blob_store_pauses_the_run_and_loses_nothing(
    small_disk: Path, tmp_path: Path, fault: str, spec: dict[str, int]
) -> None:
    EXECUTIONS.clear()
    blobs = LocalBlobStore(small_disk)
    filler = fill(small_disk) if fault == "full" else None
    if fault == "read-only":
        remount(small_disk, "ro")
    async with store_from_url(f"sqlite:///{tmp_path / 'tether.db'}") as store:
        outcome = await Runtime(store, blobs=blobs).start(offload, spec, run_id="disk")
        assert outcome.status is Status.PAUSED, (outcome.status, outcome.reason)
        error = "No space left on device" if fault == "full" else "Read-only file system"
        assert f"blob store {small_disk}" in outcome.reason, outcome.reason
        assert error in outcome.reason, outcome.reason
        bodies = [
            r.WhichOneof("body") for r in decode_log("disk", await store.log.read_all("disk"))
        ]
        # Nothing recorded that its blob does not back: the root is not done.
        assert bodies == ["run_started", "run_paused"], bodies

        if filler is not None:
            filler.unlink()
        else:
            remount(small_disk, "rw")
        resumed = await Runtime(store, blobs=blobs).resume("disk")
        assert resumed.status is Status.SUCCEEDED, resumed.reason
        assert (await verify_run(store, blobs, "disk")).ok
    # The root ran before the pause and once more after it; the consumer once.
    assert sorted(EXECUTIONS.values()) == [1, 2], EXECUTIONS


KILLS = 100


def test_sqlite_killed_mid_write_always_reopens_with_a_clean_prefix(tmp_path: Path) -> None:
    """`tests.faults.sqlite_kills` SIGKILLs a writer KILLS times and reopens after each."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TETHER_SRC, REPO_ROOT])}
    done = subprocess.run(
        [sys.executable, "-m", "tests.faults.sqlite_kills", str(tmp_path / "k.db"), str(KILLS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(reports) == KILLS
    bad = [r for r in reports if r["problem"]]
    assert not bad, bad[:3]
    # Every kill landed while the writer was appending, and every append it was told
    # about survived: the reopened log is never shorter than what was acknowledged.
    assert all(r["records"] >= r["acked"] for r in reports)
    torn = Counter(r["records"] - r["acked"] for r in reports)
    print(
        f"\n[sqlite kills] {KILLS} SIGKILLs mid-write; {reports[-1]['records']} records at the "
        f"end, every reopen a clean prefix holding all acknowledged appends (unacknowledged "
        f"batches found committed: {dict(torn)})"
    )
