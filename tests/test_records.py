"""The record format: golden logs decode forever, unknown fields are tolerated, codegen is fresh."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from tether.foundation.errors import CorruptRecord
from tether.model import records as r
from tether.model.graph import Graph

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).parent.parent


def read_golden(name: str) -> list[bytes]:
    data = (GOLDEN / name).read_bytes()
    rows, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        rows.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return rows


def test_golden_v1_log_decodes_and_rebuilds_the_run() -> None:
    rows = read_golden("v1.log")
    graph = Graph("golden")
    for record in r.decode_log("golden", rows):
        graph.apply(record)
    assert graph.status == "succeeded"
    assert graph.started is not None and graph.started.schema_version == 1
    assert graph.completed_count == 9
    assert graph.pending == 0
    kinds = sorted(graph.nodes[n].spec.kind for n in graph.order)
    assert kinds == ["subagent", "tool", "tool", "tool", "tool", "tool", "turn", "turn", "turn"]
    assert graph.finished is not None
    result = r.inline_json(graph.finished.run_finished.result)
    assert result["content"].startswith("Answer to 'golden': the strongest finding is")


def test_golden_v1_steps_log_decodes_with_its_journaled_steps() -> None:
    rows = read_golden("v1_steps.log")
    graph = Graph("golden")
    for record in r.decode_log("golden", rows):
        graph.apply(record)
    bodies = [rec.WhichOneof("body") for rec in r.decode_log("golden", rows)]
    assert bodies == [
        "run_started",
        "step_recorded",
        "step_recorded",
        "run_resumed",
        "step_recorded",
        "node_completed",
        "run_finished",
    ]
    assert graph.status == "succeeded"
    (root,) = graph.order
    steps = graph.nodes[root].steps
    assert steps is not None
    assert [(i, steps[i].name) for i in sorted(steps)] == [(0, "plan"), (1, "fetch"), (2, "write")]
    assert graph.tokens == 45
    assert graph.finished is not None
    result = r.inline_json(graph.finished.run_finished.result)
    assert [step["name"] for step in result] == ["plan", "fetch", "write"]


def test_every_row_is_a_one_record_chunk_and_rows_concatenate() -> None:
    rows = read_golden("v1.log")
    one_by_one = [r.decode_one("golden", seq, row) for seq, row in enumerate(rows)]
    assert list(r.decode_log("golden", rows)) == one_by_one


def test_unknown_fields_from_a_newer_build_are_tolerated() -> None:
    record = r.Record(at_us=1, node_failed=r.NodeFailed(node_id="n", message="m"))
    # Field 99 (varint) and field 98 (bytes) inside the record: written by a future schema.
    future = record.SerializeToString() + b"\x98\x06\x07" + b"\x92\x06\x03abc"
    row = b"\x0a" + bytes([len(future)]) + future
    decoded = r.decode_one("run", 0, row)
    assert decoded.node_failed.node_id == "n"
    assert decoded.node_failed.message == "m"
    # Unknown fields survive a re-encode, so a newer build can still read them back.
    assert r.encode(decoded) == row


def test_a_corrupt_record_names_the_run_and_the_seq() -> None:
    rows = read_golden("v1.log")
    rows[4] = b"\x0a\x05\xff\xff"  # a length that runs past the end
    with pytest.raises(CorruptRecord, match=r"run golden: record at seq 4 is not a valid"):
        r.decode_log("golden", rows)


def test_a_record_with_no_known_body_is_reported() -> None:
    row = r.encode(r.Record(at_us=5))
    with pytest.raises(CorruptRecord, match="seq 3 has no known body"):
        r.decode_one("x", 3, row)


def test_generated_code_matches_the_proto() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_frame_handles_multi_byte_lengths() -> None:
    big = r.Record(at_us=1, node_failed=r.NodeFailed(message="x" * 20_000))
    row = r.encode(big)
    assert r.decode_one("run", 0, row) == big


def test_golden_v1_waits_log_decodes_and_rebuilds_events_and_timeouts() -> None:
    rows = read_golden("v1_waits.log")
    graph = Graph("golden")
    records = r.decode_log("golden", rows)
    bodies = []
    for record in records:
        graph.apply(record)
        bodies.append(r.body_of(record))
    assert bodies.count("run_waiting") == 2
    assert graph.status == "succeeded" and graph.pending == 0 and not graph.open_waits
    outcomes = {
        nc.wait.key: (nc.wait.event_id, nc.wait.timed_out)
        for nid in graph.order
        if (nc := graph.nodes[nid].completed) is not None and nc.HasField("wait")
    }
    assert outcomes == {"approve-0": ("golden-event", False), "approve-1": ("", True)}
    assert graph.finished is not None
    assert r.inline_json(graph.finished.run_finished.result) == [[0, "done"], [1, "timed out"]]


def test_records_have_no_map_fields_so_encoding_is_deterministic_without_asking() -> None:
    """`encode` serializes without `deterministic=True`, which only orders map entries: a
    map field added to the schema would make a retried append's bytes differ from the
    first attempt's, so none may be added without asking for it again."""
    seen: set[str] = set()

    def maps(descriptor: Any) -> list[str]:
        if descriptor.full_name in seen:
            return []
        seen.add(descriptor.full_name)
        found = []
        for field in descriptor.fields:
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                found.append(f"{descriptor.full_name}.{field.name}")
            found += maps(field.message_type)
        return found

    assert maps(r.pb.Record.DESCRIPTOR) == [] and maps(r.pb.LogChunk.DESCRIPTOR) == []
    assert len(seen) > 10  # the walk reached the nested messages
    assert maps(struct_pb2.Struct.DESCRIPTOR) == ["google.protobuf.Struct.fields"]  # it finds one
