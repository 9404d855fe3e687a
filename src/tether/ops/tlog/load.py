"""Reading a `.tlog` file whole, checked, and importing it into a store all or nothing.

`read_tlog` parses and checks everything before anyone writes: the frames (`format`), the
runs' rows, every record (decodes, and replays on a graph of its own run), the family of
runs (the exported run first, each sub-agent run after its parent), and every blob's bytes
against its sha256. `import_tlog` then writes the blobs (content-addressed: a blob written
for an import that is refused later is harmless, and `tether blobs gc` collects it) and
creates every run in one transaction (`ForkTable.create_runs`). A run the store holds
already with the same records (or more: it went on after an earlier import) is left as it
is, so importing a file twice is a no-op; one with other records refuses the whole file.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.blobs import BlobStore
from tether.foundation.errors import (
    BadRunId,
    BadTlog,
    CorruptRecord,
    ImportConflict,
    RunExists,
    UnknownAgent,
)
from tether.foundation.ids import check_child_run_id, check_run_id
from tether.foundation.status import Status
from tether.model.columns import applied
from tether.model.graph import Graph
from tether.model.records import blob_refs, copy_of, decode_log, encode
from tether.ops.tlog.format import BLOB, END, HEADER, NAMES, RECORD, RUN, Frame, read_frames
from tether.store.base import RunInfo, Store
from tether.store.forks import NewRun, Origin


@dataclass(slots=True)
class TlogRun:
    """One run of a file: its row as exported, its origin, its rows and its replayed graph."""

    info: RunInfo
    origin: Origin | None
    rows: list[bytes] = field(default_factory=list)
    expected: int = 0
    graph: Graph | None = None


@dataclass(frozen=True, slots=True)
class Tlog:
    """A checked file: the exported run's id, its runs (it first) and its blobs by sha256."""

    run_id: str
    runs: list[TlogRun]
    blobs: dict[str, bytes]
    header: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Imported:
    """What an import did: the runs it created (none: the store had them all already)."""

    run_id: str
    created: list[str]
    records: int
    blobs: int

    @property
    def already(self) -> bool:
        return not self.created


async def read_tlog(source: str, chunks: AsyncIterable[bytes]) -> Tlog:
    """Read and check a whole file (BadTlog naming the first thing wrong)."""
    header: dict[str, Any] | None = None
    runs: list[TlogRun] = []
    blobs: dict[str, bytes] = {}
    end: dict[str, Any] = {}
    async for frame in read_frames(source, chunks):
        if header is None:
            if frame.kind != HEADER:
                raise BadTlog(source, "its first frame is not the header")
            header = frame.json(source)
            continue
        if frame.kind == RUN:
            _close_run(source, runs)
            runs.append(_run_of(source, frame))
        elif frame.kind == RECORD:
            if not runs:
                raise BadTlog(source, "a record comes before any run")
            runs[-1].rows.append(frame.payload)
        elif frame.kind == BLOB:
            sha256, data = _blob_of(source, frame)
            blobs[sha256] = data
        elif frame.kind == END:
            end = frame.json(source)
        else:
            raise BadTlog(source, f"a second {NAMES[frame.kind]} frame")
    assert header is not None  # read_frames ends with an end frame, after some frame
    _close_run(source, runs)
    records = sum(len(r.rows) for r in runs)
    if (end.get("runs"), end.get("records"), end.get("blobs")) != (len(runs), records, len(blobs)):
        raise BadTlog(source, "its end frame's counts differ from the frames it holds")
    _check_family(source, header, runs)
    for run in runs:
        run.graph = _replay(source, run)
    if header.get("blobs"):
        _check_blobs_held(source, runs, blobs)
    return Tlog(runs[0].info.run_id, runs, blobs, header)


async def import_run(
    store: Store,
    chunks: AsyncIterable[bytes],
    *,
    blobs: BlobStore | None = None,
    source: str = "the .tlog file",
) -> Imported:
    """Read a `.tlog` file's bytes (`export_run`'s), check all of it, then import it into
    `store` (and its blobs into `blobs`) all or nothing: `read_tlog`, then `import_tlog`.
    BadTlog names what is wrong with the file; ImportConflict a different run here."""
    return await import_tlog(store, await read_tlog(source, chunks), blobs=blobs, source=source)


async def import_tlog(
    store: Store, tlog: Tlog, *, blobs: BlobStore | None = None, source: str = "the file"
) -> Imported:
    """Create the file's runs in `store` (and its blobs in `blobs`), all or nothing.

    ImportConflict if the store holds a different run under one of the file's ids; runs
    it holds with the same records are left alone (a second import creates nothing).
    """
    if tlog.blobs and blobs is None:
        why = f"it holds {len(tlog.blobs)} blobs and there is no blob store to put them in"
        raise BadTlog(source, why)
    rows = {run.info.run_id: _rows_for(run, tlog, blobs) for run in tlog.runs}
    new = [run for run in tlog.runs if not await _held(store, run.info.run_id, rows)]
    if not new:
        return Imported(tlog.run_id, [], 0, 0)
    if blobs is not None:
        for data in tlog.blobs.values():
            await blobs.put(data)  # media types live in the records' refs
    creations = [_creation(run, rows[run.info.run_id]) for run in new]
    try:
        await store.forks.create_runs(creations)
    except RunExists as exc:
        raise ImportConflict(exc.run_id, "it was created while this file was imported") from None
    await store.leases.notify()
    return Imported(
        tlog.run_id,
        [run.info.run_id for run in new],
        sum(len(rows[run.info.run_id]) for run in new),
        len(tlog.blobs),
    )


def _run_of(source: str, frame: Frame) -> TlogRun:
    value = frame.json(source)
    try:
        origin = value.get("origin")
        info = RunInfo(
            run_id=str(value["run_id"]),
            agent=str(value["agent"]),
            status=Status(value["status"]),
            parent_run_id=value.get("parent_run_id") or None,
            reason=value.get("reason") or None,
            agent_version=value.get("agent_version") or None,
        )
        return TlogRun(
            info,
            None if not origin else Origin(str(origin["run_id"]), int(origin["seq"])),
            expected=int(value["records"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadTlog(source, f"a run frame lacks or garbles {exc}") from None


def _close_run(source: str, runs: list[TlogRun]) -> None:
    if runs and len(runs[-1].rows) != runs[-1].expected:
        run = runs[-1]
        raise BadTlog(
            source,
            f"run {run.info.run_id} has {len(run.rows)} records, its frame says {run.expected}",
        )


def _blob_of(source: str, frame: Frame) -> tuple[str, bytes]:
    if len(frame.payload) < 32:
        raise BadTlog(source, "a blob frame is shorter than its sha256")
    sha256, data = frame.payload[:32].hex(), frame.payload[32:]
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise BadTlog(source, f"blob {sha256}: its bytes hash to {actual} (damaged)")
    return sha256, data


def _check_family(source: str, header: dict[str, Any], runs: Sequence[TlogRun]) -> None:
    """The exported run first, top-level; every other run a sub-agent run of one before it."""
    if not runs:
        raise BadTlog(source, "it holds no run")
    ids = [r.info.run_id for r in runs]
    if header.get("runs") != ids or header.get("run_id") != ids[0]:
        raise BadTlog(source, "its header's runs differ from the runs it holds")
    if runs[0].info.parent_run_id:
        raise BadTlog(source, f"its first run {ids[0]} is a sub-agent run")
    try:
        check_run_id(ids[0])  # what a caller could have named it; children derive from it
    except BadRunId as exc:
        raise BadTlog(source, str(exc)) from None
    seen: set[str] = set()
    for run in runs:
        parent = run.info.parent_run_id
        if run is not runs[0] and parent not in seen:
            raise BadTlog(source, f"run {run.info.run_id}'s parent {parent} is not before it")
        if parent:
            try:  # the parent's id, a node's id and a key: nothing else, in the one set
                check_child_run_id(run.info.run_id, parent)
            except BadRunId as exc:
                raise BadTlog(source, str(exc)) from None
        if run.info.run_id in seen:
            raise BadTlog(source, f"run {run.info.run_id} appears twice")
        seen.add(run.info.run_id)


def _replay(source: str, run: TlogRun) -> Graph:
    """The run's graph: every record decodes and fits the ones before it."""
    run_id = run.info.run_id
    if not run.rows:
        raise BadTlog(source, f"run {run_id} has no records")
    try:  # as a load rebuilds a run: every record decoded and checked before it applies
        graph = applied(Graph(run_id), run.rows)
    except CorruptRecord as exc:
        raise BadTlog(source, str(exc)) from None
    started = graph.started
    if started is None or (started.parent_run_id or None) != run.info.parent_run_id:
        raise BadTlog(
            source, f"run {run_id}: its run frame and its first record name other parents"
        )
    if started.agent != run.info.agent:  # the row is listed as one agent, would run another
        raise BadTlog(
            source,
            f"run {run_id}: its run frame names agent {run.info.agent!r}, its run_started "
            f"record agent {started.agent!r}",
        )
    return graph


def check_agents(source: str, tlog: Tlog, agents: Collection[str]) -> None:
    """UnknownAgent naming the first run of `tlog` (children included) whose agent is not
    one of `agents`: a server imports no run it would not execute (resolving an agent
    imports its module)."""
    for run in tlog.runs:
        if run.info.agent not in agents:
            raise UnknownAgent(
                f"{source}: not imported: run {run.info.run_id} names agent "
                f"{run.info.agent!r}, which is not served here; this server runs {sorted(agents)}"
            )


def _check_blobs_held(source: str, runs: Sequence[TlogRun], blobs: dict[str, bytes]) -> None:
    for run in runs:
        for seq, record in enumerate(decode_log(run.info.run_id, run.rows)):
            for where, ref in blob_refs(record):
                if ref.sha256 not in blobs:
                    raise BadTlog(
                        source,
                        f"run {run.info.run_id} seq {seq}: the {where} is blob {ref.sha256}, "
                        "which the file does not hold",
                    )


def _rows_for(run: TlogRun, tlog: Tlog, blobs: BlobStore | None) -> list[bytes]:
    """The rows to store: the file's, with the refs of blobs it carries pointing into
    `blobs` (the same content, where this store keeps it)."""
    if not tlog.blobs or blobs is None:
        return run.rows
    out = []
    for seq, record in enumerate(decode_log(run.info.run_id, run.rows)):
        refs = list(blob_refs(record))
        if all(ref.url == blobs.url_for(ref.sha256) for _, ref in refs):
            out.append(run.rows[seq])
            continue
        record = copy_of(record)
        for _, ref in blob_refs(record):
            ref.url = blobs.url_for(ref.sha256)
        out.append(encode(record))
    return out


async def _held(store: Store, run_id: str, rows: dict[str, list[bytes]]) -> bool:
    """Whether the store holds this run with the file's records (True), or not at all
    (False); ImportConflict if it holds another run under the id."""
    if await store.runs.get(run_id) is None:
        return False
    mine, theirs = rows[run_id], await store.log.read_all(run_id)
    for seq, row in enumerate(mine):
        if seq >= len(theirs):
            raise ImportConflict(run_id, f"it has {len(theirs)} records, the file {len(mine)}")
        if theirs[seq] != row:
            raise ImportConflict(run_id, f"its record at seq {seq} differs from the file's")
    return True


def _creation(run: TlogRun, rows: list[bytes]) -> NewRun:
    """A run's row as this store creates it: finished and paused runs as they were, any
    other queued (a worker serving its agent continues it, and parks it again if it only
    waits, with its wake-up time; a sub-agent run is adopted by its parent's owner)."""
    assert run.graph is not None
    status, reason = run.graph.status, run.graph.reason or None
    if not status.finished and status is not Status.PAUSED:
        status, reason = Status.QUEUED, None
    info = RunInfo(
        run.info.run_id,
        run.info.agent,
        status,
        parent_run_id=run.info.parent_run_id,
        reason=reason,
        agent_version=run.info.agent_version,
    )
    return NewRun(info, rows[0], run.origin, entries=list(enumerate(rows))[1:])
