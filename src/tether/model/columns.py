"""A run's node records read as columns: one parse of many rows, no object per record.

Rehydration's fast path (see `replay_rows`). Building a protobuf object per record and
reading its fields one by one cost ~19,000 instructions a record; the rows of a stretch of
node records, each followed by `MARK`, parse as one `LogColumns` (proto/tether/v1/
columns.proto) whose repeated fields hold every record's node id, spawned ids, times and
usage, read as lists. Only logs of the common shape are read so (`node_columns` says None
otherwise) and the graph checks the rest (`Graph.apply_columns`); anything else is read
record by record, which names the record that does not fit.
"""

from __future__ import annotations

import asyncio
import gc
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter

from google.protobuf.message import DecodeError

from tether._proto.tether.v1 import columns_pb2
from tether.foundation.errors import CorruptRecord
from tether.model.graph import Graph, GraphError
from tether.model.records import decode_log

# A row's mark: a one-record LogChunk whose node_completed holds one spawned spec with an
# empty node_id and an explicit false is_result. Parsed after each row, it closes that
# row's entries in those two columns. This counts on what every protobuf writer does
# (canonical encoding): a singular field is written once, an empty string or false not at
# all; and on tether's ids never being empty. A row's node_id then gives one entry (none
# if it has no node id: the stretch does not fit) and no row gives an empty one.
_NODE = b"\x2a\x02\x0a\x00" + b"\x58\x00"
_RECORD = b"\x12" + bytes((len(_NODE),)) + _NODE
MARK = b"\x0a" + bytes((len(_RECORD),)) + _RECORD


@dataclass(frozen=True, slots=True)
class NodeColumns:
    """What the graph needs of a stretch of node records, by column."""

    node_ids: list[str]  # the node each row records, in row order
    spawned: list[str]  # the ids of the specs they spawned, in spawn order
    spawner: Sequence[int]  # for each spawned id, the index of the row that spawned it
    last_at_us: int  # the latest of the rows' times (at_us, or finished_at_us if slim)
    result_row: int  # the first row whose output is the run's result, or -1
    tokens_in: int
    tokens_out: int
    costs: list[float]  # the rows' costs in row order (a float sum depends on its order)
    model_calls: int


def applied(graph: Graph, rows: Sequence[bytes]) -> Graph:
    """`graph` with `rows` (its run's records from seq graph.next_seq on) applied: how
    anyone rebuilds a run from its rows (`Runtime.load` and `catch_up`, a `.tlog` import).
    CorruptRecord naming the run and the seq of the first record that does not decode or
    does not fit; those before it are applied.

    The cyclic collector is off meanwhile: a replay allocates a few objects a record, none
    of them garbage, and every collection it would trigger walks the growing graph (a
    50,000-node load spent more per record than a 5,000-node one)."""
    with _replaying(graph):
        for _ in replay_pieces(graph, rows):
            pass
    return graph


async def applied_turns(graph: Graph, rows: Sequence[bytes]) -> Graph:
    """`applied`, giving the event loop turns after each piece of rows: a statement sent
    before it (a run's take while the run is built) is answered and goes on meanwhile, not
    after (a round trip takes two turns: the answer read, then the waiter woken)."""
    with _replaying(graph):
        for _ in replay_pieces(graph, rows):
            await asyncio.sleep(0)
            await asyncio.sleep(0)
    return graph


@contextmanager
def _replaying(graph: Graph) -> Iterator[None]:
    """The collector off (see `applied`); a record that does not fit: CorruptRecord."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    except GraphError as exc:
        # A record that does not fit is not applied: next_seq is its seq.
        raise CorruptRecord(graph.run_id, graph.next_seq, f"does not replay ({exc})") from None
    finally:
        if collecting:
            gc.enable()


# Rows parsed at once: a stretch of node records is read in pieces of at most this many, so
# the joined bytes of a piece (~250 KiB at 1,024 rows of a model turn's size) stay in the
# cache while they parse and a big load reuses the memory of the piece before (50,000 rows
# read by columns at once took 31.9 ms, in pieces of 1,024 23.2 ms; 5,000 rows 2.5 / 2.4).
PIECE = 1024


def replay_rows(graph: Graph, rows: Sequence[bytes]) -> None:
    """Apply `rows` (the run's records from seq graph.next_seq on) to `graph`: see
    `replay_pieces`."""
    for _ in replay_pieces(graph, rows):
        pass


def replay_pieces(graph: Graph, rows: Sequence[bytes]) -> Iterator[None]:
    """Apply `rows` (the run's records from seq graph.next_seq on) to `graph`, pausing
    after each piece of node records (`PIECE` rows at most): the graph
    `graph.replay` gives of their records, and the same GraphError or CorruptRecord at the
    same record. Stretches of node records go by columns when they have the common shape;
    every other record, and a stretch that does not fit, is decoded and replayed.

    A log is nearly all node records (a RunStarted first, a RunResumed now and then, a last
    record that ends the run), so pieces of rows are read by columns as they come, each row
    ahead looked at only when a piece does not parse as node records: then that piece's
    other rows are found (`_other_rows`) and the node records between them go by columns."""
    i, n = 0, len(rows)
    while i < n:
        if not _NODE_HEAD.match(_HEAD(rows[i])):  # another body (or a guess wrong: checked)
            graph.replay(decode_log(graph.run_id, rows[i : i + 1], graph.next_seq))
            i += 1
            continue
        end = min(n, i + PIECE)
        if not _NODE_HEAD.match(_HEAD(rows[end - 1])):
            end -= 1  # the run's last record, as a rule: alone, next
        piece = rows[i:end]
        columns = node_columns(piece)
        if columns is None or not graph.apply_columns(columns, piece):
            _replay_found(graph, piece)
        i = end
        yield


def _replay_found(graph: Graph, rows: Sequence[bytes]) -> None:
    """`replay_rows` of rows whose other records are found first: the node records between
    them by columns, where they fit, the others one by one."""
    start = 0
    for end in [*_other_rows(rows), len(rows)]:
        if end > start:
            stretch = rows[start:end]
            columns = node_columns(stretch)
            if columns is None or not graph.apply_columns(columns, stretch):
                graph.replay(decode_log(graph.run_id, stretch, graph.next_seq))
        if end < len(rows):
            graph.replay(decode_log(graph.run_id, rows[end : end + 1], graph.next_seq))
        start = end + 1


def _other_rows(rows: Sequence[bytes]) -> list[int]:
    """The indexes of the rows that do not start with a node_completed body, as every
    writer's do (a record's fields in number order): a guess the parse checks, since a row
    guessed wrong is only read record by record. Bytes 1-3 of each row, matched in C: the
    frame's length in one byte then the body's tag 0x12, or in two then the tag."""
    heads = b"".join(map(_HEAD, rows))
    if len(heads) != 3 * len(rows):  # a row shorter than 4 bytes: guess none
        return list(range(len(rows)))
    others: list[int] = []
    pos = 0
    while pos < len(heads):
        pos = _NODE_HEADS.match(heads, pos).end()  # type: ignore[union-attr]
        if pos < len(heads):
            others.append(pos // 3)
            pos += 3
    return others


_HEAD = itemgetter(slice(1, 4))
# A node record's head: its frame's length in one byte then the body's tag, or in two.
_HEAD_OF_NODE = rb"(?:[\x00-\x7f]\x12.|[\x80-\xff][\x00-\x7f]\x12)"
_NODE_HEADS = re.compile(_HEAD_OF_NODE + rb"*+", re.DOTALL)
# One row's head, whole (a row shorter than 4 bytes has a shorter head: no match).
_NODE_HEAD = re.compile(_HEAD_OF_NODE + rb"\Z", re.DOTALL)


def node_columns(rows: Sequence[bytes]) -> NodeColumns | None:
    """The columns of `rows` if each holds one node record of the common shape: a node id,
    spawned specs that are slim (no parents named: the spawner is their one parent) and no
    waits, no wait outcome, times all slim or none. None otherwise, or if they do not parse."""
    view = columns_pb2.LogColumns()
    try:
        view.ParseFromString(MARK.join(rows) + MARK)
    except DecodeError:
        return None
    rec = view.records
    nc = rec.node_completed
    m = len(rows)
    if (
        len(nc.node_id) != m
        or rec.run_started
        or rec.node_failed
        or rec.run_paused
        or rec.run_resumed
        or rec.run_finished
        or rec.step_recorded
        or rec.run_waiting
        or nc.wait
        or nc.spawned.parent_ids
        or nc.spawned.wait
    ):
        return None
    node_ids = list(nc.node_id)
    if "" in node_ids:
        return None
    found = _spawns(nc.spawned.node_id, m)
    last = _last_at(list(rec.at_us), list(nc.finished_at_us), m)
    if last is None:
        return None
    # One false a row (its mark), and a true for each result: none, most often.
    result_row = -1
    if len(nc.is_result) != m:
        flags = list(nc.is_result)
        result_row = flags[: flags.index(True)].count(False) if True in flags else -1
    used = nc.used
    return NodeColumns(
        node_ids,
        found[0],
        found[1],
        last,
        result_row,
        sum(used.tokens_in),
        sum(used.tokens_out),
        list(used.cost),
        sum(used.model_calls),
    )


def _spawns(column: Sequence[str], m: int) -> tuple[list[str], Sequence[int]]:
    """The spawned ids and the row that spawned each, from the column with its m marks."""
    p = len(column) - m
    if p <= m:
        head = list(column[0 : 2 * p : 2])
        if "" not in head:
            # Ids at 0, 2, .. 2p - 2, so the m marks at 1, 3, .. 2p - 1 and after: the first
            # p rows spawned one each and the others none (a chain, an agent's turns).
            return head, range(p)
    spawned: list[str] = []
    spawner: list[int] = []
    row = 0
    for sid in column:
        if sid:
            spawned.append(sid)
            spawner.append(row)
        else:
            row += 1
    return spawned, spawner


def _last_at(at: list[int], finished: list[int], m: int) -> int | None:
    """The latest of the rows' times: their at_us, or if slim (none) their finished_at_us;
    None if some rows are slim and others not (the pairs would need row by row)."""
    if not at:
        return max(finished, default=0)
    if len(at) == m and 0 not in at:
        return max(at)
    return None
