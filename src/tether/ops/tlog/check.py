"""The replay check: can the agent code here continue the runs saved in `.tlog` files?

Per file: does it decode (every frame, record and blob, as an import checks them), and for
each unfinished run in it, `tether.engine.continuity.check_run` with the version left out (the check
is about the code here, whatever version the run was on): a handler for every pending node
kind, and every pending input fitting its kind's declared shape. What a CI job runs on
saved logs before a deploy (`tether check AGENT FILE_OR_DIR...`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.engine.continuity import Problem, check_run
from tether.engine.registry import Registry
from tether.foundation.errors import BadTlog
from tether.model.records import Value, load_json
from tether.model.values import ValueCodec
from tether.ops.tlog.load import Tlog, read_tlog

CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileCheck:
    """One file's verdict: why it does not decode, or the problems of its runs."""

    path: str
    runs: int = 0
    pending: int = 0  # pending nodes checked, over all its runs
    undecodable: str | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.undecodable is None and not self.problems


class _FileCodec(ValueCodec):
    """Decodes values whose bytes the file holds (exported with its blobs): a pending
    input kept in a blob is checked too. One the file lacks, or a sealed one, is not read
    (`check_run` leaves it out)."""

    def __init__(self, tlog: Tlog) -> None:
        super().__init__(None)
        self._blobs = tlog.blobs

    async def decode(self, value: Value) -> Any:
        if value.WhichOneof("kind") == "blob" and value.blob.sha256 in self._blobs:
            return load_json(self._blobs[value.blob.sha256])
        return await super().decode(value)


async def file_chunks(path: str | Path) -> AsyncIterator[bytes]:
    """A file's bytes in chunks (what `read_tlog` reads), read off the event loop."""
    f = await asyncio.to_thread(Path(path).open, "rb")
    try:
        while chunk := await asyncio.to_thread(f.read, CHUNK):
            yield chunk
    finally:
        f.close()


def tlog_files(paths: Iterable[str]) -> list[Path]:
    """The files named, and the `.tlog` files under the directories named, sorted."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(p.rglob("*.tlog"))
        elif p.exists():
            found.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    return found


async def check_file(registry: Registry, path: str | Path) -> FileCheck:
    """Check one file against `registry`'s code."""
    try:
        tlog = await read_tlog(str(path), file_chunks(path))
    except BadTlog as exc:
        return FileCheck(str(path), undecodable=exc.why)
    return await check_tlog(registry, tlog, str(path))


async def check_tlog(registry: Registry, tlog: Tlog, path: str) -> FileCheck:
    """Check a file already read: each unfinished run against `registry` if it is a run
    of its agent, else against the agent its name resolves to here."""
    problems: list[Problem] = []
    pending = 0
    root = tlog.runs[0]
    if root.info.agent != registry.name:
        why = f"a run of agent {root.info.agent!r}, not {registry.name!r}"
        problems.append(Problem(root.info.run_id, "agent", why))
    for run in tlog.runs:
        graph = run.graph
        assert graph is not None
        if graph.status.finished:
            continue
        pending += graph.pending
        mine = registry if graph.agent == registry.name else None
        problems += await check_run(mine, graph, codec=_FileCodec(tlog), version=False)
    return FileCheck(path, len(tlog.runs), pending, problems=problems)
