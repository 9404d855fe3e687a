"""A bar chart as a PNG, in pure Python: the picture in the demo's report.

Nothing but `zlib` and `struct`: an RGB canvas, filled rectangles, and a 3x5 pixel font
(digits, capitals and a little punctuation) drawn at twice its size.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

RGB = tuple[int, int, int]
WHITE: RGB = (255, 255, 255)
INK: RGB = (31, 35, 40)
MUTED: RGB = (87, 96, 106)
BAR: RGB = (5, 80, 174)
RULE: RGB = (208, 215, 222)

# Each glyph is 5 rows of 3 pixels, top row first, as 15 bits.
_ROWS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001001001001", "8": "111101111101111",
    "9": "111101111001111", "A": "010101111101101", "B": "110101110101110",
    "C": "011100100100011", "D": "110101101101110", "E": "111100110100111",
    "F": "111100110100100", "G": "011100101101011", "H": "101101111101101",
    "I": "111010010010111", "J": "001001001101010", "K": "101101110101101",
    "L": "100100100100111", "M": "101111111101101", "N": "110101101101101",
    "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011",
    "R": "110101110101101", "S": "011100010001110", "T": "111010010010010",
    "U": "101101101101111", "V": "101101101101010", "W": "101101111111101",
    "X": "101101010101101", "Y": "101101010010010", "Z": "111001010100111",
    " ": "000000000000000", "-": "000000111000000", ".": "000000000000010",
    ":": "000010000010000", "%": "101001010100101", "?": "111001010000010",
    "'": "010010000000000", ",": "000000000010100", "/": "001001010100100",
}  # fmt: skip
SCALE = 2
ADVANCE = 4 * SCALE  # a glyph and one column of space


class Canvas:
    """An RGB image in memory."""

    def __init__(self, width: int, height: int, background: RGB = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, colour: RGB) -> None:
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(self.width, x + w), min(self.height, y + h)
        if x1 <= x0:
            return
        row = bytes(colour) * (x1 - x0)
        for yy in range(y0, y1):
            start = (yy * self.width + x0) * 3
            self.pixels[start : start + len(row)] = row

    def text(self, x: int, y: int, text: str, colour: RGB = INK) -> int:
        """Draw `text` (upper-cased; unknown characters as '?'); return its width."""
        for i, char in enumerate(text.upper()):
            bits = _ROWS.get(char, _ROWS["?"])
            for n, bit in enumerate(bits):
                if bit == "1":
                    col, row = n % 3, n // 3
                    self.rect(x + i * ADVANCE + col * SCALE, y + row * SCALE, SCALE, SCALE, colour)
        return len(text) * ADVANCE

    def png(self) -> bytes:
        stride = self.width * 3
        raw = b"".join(
            b"\x00" + bytes(self.pixels[y * stride : (y + 1) * stride]) for y in range(self.height)
        )
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw, 9))
            + _chunk(b"IEND", b"")
        )


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bar_chart(title: str, bars: Sequence[tuple[str, float]], *, width: int = 560) -> bytes:
    """Horizontal bars, one per (label, value), longest for the largest value; a PNG."""
    if not bars:
        raise ValueError("a bar chart needs at least one bar")
    if any(value < 0 for _, value in bars):
        raise ValueError("bar values must not be negative")
    pad, line, bar_h = 16, 28, 16
    label_w = max(len(label) for label, _ in bars) * ADVANCE + pad
    value_w = max(len(_number(v)) for _, v in bars) * ADVANCE + pad
    height = pad * 2 + line + len(bars) * line
    canvas = Canvas(width, height)
    canvas.text(pad, pad, title)
    top = pad + line
    span = width - 2 * pad - label_w - value_w
    most = max(value for _, value in bars) or 1.0
    for i, (label, value) in enumerate(bars):
        y = top + i * line
        canvas.text(pad, y + 3, label, MUTED)
        x = pad + label_w
        canvas.rect(x, y + line - 2, span, 1, RULE)
        length = max(1, round(span * value / most)) if value else 0
        canvas.rect(x, y, length, bar_h, BAR)
        canvas.text(x + length + 6, y + 3, _number(value))
    return canvas.png()


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"
