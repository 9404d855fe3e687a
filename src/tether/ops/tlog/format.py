"""The `.tlog` file format: an exported run, its sub-agent runs and their blobs.

    file  = MAGIC, version (u32 big-endian), frame*, end frame
    frame = kind (1 ASCII byte), length (u64 big-endian), payload

Frames, in this order: one `H` (header, JSON), then per run an `R` (the run's row, JSON)
followed by its records as `L` frames (each the bytes of one run_log row, seqs 0, 1, ...
in order), then the blobs as `B` frames (32 bytes of sha256 digest, then the bytes), and
last an `E` frame (JSON: counts, and the sha256 of every byte before it). A file without
its `E` frame is truncated; one whose bytes do not hash to the `E` frame's is damaged.
Written and read in one pass: nothing needs seeking, so it streams over HTTP.
docs/reference/tlog.md is the user-facing description; keep the two in step.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

from tether.foundation.errors import BadTlog

MAGIC = b"\x89TLOG\r\n\x1a"
FORMAT_VERSION = 1
_HEAD = struct.Struct(">BQ")  # a frame's kind and payload length
# A frame longer than this is damage, not data: no record or blob is that large.
MAX_FRAME = 1 << 32

HEADER, RUN, RECORD, BLOB, END = (ord(c) for c in "HRLBE")
# What error messages call each kind of frame.
NAMES = {HEADER: "header", RUN: "run", RECORD: "record", BLOB: "blob", END: "end"}
_KINDS = set(NAMES)


@dataclass(frozen=True, slots=True)
class Frame:
    kind: int
    payload: bytes

    def json(self, source: str) -> dict[str, Any]:
        """The payload of a JSON frame (`H`, `R`, `E`); BadTlog if it is not an object."""
        try:
            value = json.loads(self.payload)
        except ValueError as exc:
            raise BadTlog(source, f"its {NAMES[self.kind]} frame is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise BadTlog(source, f"its {NAMES[self.kind]} frame is not a JSON object")
        return value


class FrameWriter:
    """Builds a file's bytes frame by frame, hashing them for the end frame."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def start(self) -> bytes:
        return self._hashed(MAGIC + struct.pack(">I", FORMAT_VERSION))

    def frame(self, kind: int, payload: bytes) -> bytes:
        return self._hashed(_HEAD.pack(kind, len(payload)) + payload)

    def json_frame(self, kind: int, value: dict[str, Any]) -> bytes:
        return self.frame(kind, json.dumps(value, sort_keys=True).encode())

    def end(self, counts: dict[str, int]) -> bytes:
        """The end frame: the counts and the sha256 of everything written before it."""
        body = {**counts, "sha256": self._hash.hexdigest()}
        return self.json_frame(END, body)

    def _hashed(self, data: bytes) -> bytes:
        self._hash.update(data)
        return data


async def read_frames(source: str, chunks: AsyncIterable[bytes]) -> AsyncIterator[Frame]:
    """The frames of a file, checked: magic, a version this code reads, whole frames of
    known kinds, and an end frame whose hash matches, with nothing after it (BadTlog)."""
    reader = _Reader(source, chunks)
    head = await reader.take(len(MAGIC) + 4, "the file header")
    if head[: len(MAGIC)] != MAGIC:
        raise BadTlog(source, "not a tether run file (.tlog): its first bytes are not the magic")
    (version,) = struct.unpack(">I", head[len(MAGIC) :])
    if version > FORMAT_VERSION:
        raise BadTlog(
            source,
            f"written in .tlog format version {version}; this tether reads up to version "
            f"{FORMAT_VERSION}: upgrade tether to import it",
        )
    if version < 1:
        raise BadTlog(source, f"format version {version} does not exist")
    while True:
        before = reader.digest()
        kind, length = _HEAD.unpack(await reader.take(_HEAD.size, "a frame header"))
        if kind not in _KINDS:
            raise BadTlog(source, f"frame kind {kind:#04x} is unknown (damaged file?)")
        if length > MAX_FRAME:
            raise BadTlog(source, f"a frame claims {length} bytes (damaged file?)")
        frame = Frame(kind, await reader.take(length, f"a {NAMES[kind]} frame"))
        if kind != END:
            yield frame
            continue
        if frame.json(source).get("sha256") != before:
            raise BadTlog(source, "its bytes do not match the hash in its end frame (damaged)")
        if not await reader.at_end():
            raise BadTlog(source, "bytes follow its end frame (damaged, or two files joined)")
        yield frame
        return


class _Reader:
    """Exact-size reads over a stream of chunks, hashing what was read."""

    def __init__(self, source: str, chunks: AsyncIterable[bytes]) -> None:
        self._source = source
        self._chunks = aiter(chunks)
        self._buf = bytearray()
        self._hash = hashlib.sha256()

    def digest(self) -> str:
        return self._hash.hexdigest()

    async def take(self, n: int, what: str) -> bytes:
        while len(self._buf) < n:
            try:
                self._buf += await anext(self._chunks)
            except StopAsyncIteration:
                where = f"inside {what}" if self._buf else f"where {what} should be"
                why = f"truncated: it ends {where} (no end frame)"
                raise BadTlog(self._source, why) from None
        data = bytes(self._buf[:n])
        del self._buf[:n]
        self._hash.update(data)
        return data

    async def at_end(self) -> bool:
        while not self._buf:
            try:
                self._buf += await anext(self._chunks)
            except StopAsyncIteration:
                return True
        return False
