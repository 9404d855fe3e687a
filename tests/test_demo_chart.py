"""The demo's chart is a real PNG drawn in pure Python: bars as long as their values."""

from __future__ import annotations

import struct
import zlib

import pytest

from tether.demo.chart import BAR, bar_chart


def decode(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG with filter type 0 rows."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + data)
        chunks[kind] = data
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2) and b"IEND" in chunks
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + width * 3
    rows = [raw[y * stride + 1 : (y + 1) * stride] for y in range(height)]
    assert all(raw[y * stride] == 0 for y in range(height))
    return width, height, rows


def bar_lengths(rows: list[bytes]) -> list[int]:
    """The length in pixels of each run of bar-coloured rows, top to bottom."""
    colour, lengths, inside = bytes(BAR), [], False
    for row in rows:
        n = sum(row[i : i + 3] == colour for i in range(0, len(row), 3))
        if n and not inside:
            lengths.append(n)
        inside = n > 0
    return lengths


def test_the_chart_draws_one_bar_per_value_in_proportion() -> None:
    width, height, rows = decode(bar_chart("sources", [("a", 10), ("b", 40), ("c", 20)]))
    assert width == 560 and height > 100
    a, b, c = bar_lengths(rows)
    assert b > c > a
    assert abs(a / b - 0.25) < 0.02 and abs(c / b - 0.5) < 0.02


@pytest.mark.parametrize("bars", [[], [("a", -1)]])
def test_a_chart_of_nothing_or_negatives_is_refused(bars: list[tuple[str, float]]) -> None:
    with pytest.raises(ValueError, match="bar"):
        bar_chart("t", bars)
