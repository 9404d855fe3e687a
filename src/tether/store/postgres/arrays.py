"""Array parameters as PostgreSQL array literals: one text parameter instead of an array.

asyncpg encodes a list parameter element by element, and for each element it asks
`isinstance(x, collections.abc.Iterable)` (and `Sized`, for a str): Python-level ABC
checks of ~2,000 instructions each. For the group commit's per-row columns that was a
third of the client's CPU a record. A literal is built with one `join` (and, only when
an element holds `"` or `\\`, one escape per element); the statement casts it back
(`$1::text::text[]`), and the server parses it in C.
"""

from __future__ import annotations

from collections.abc import Sequence


def text_array(items: Sequence[str]) -> str:
    """The array literal of `items` (each quoted, so commas, braces, spaces and NULL are
    plain text); a str with a NUL character cannot be PostgreSQL text at all."""
    if not items:
        return "{}"
    joined = '","'.join(items)
    if '"' in joined or "\\" in joined:
        joined = '","'.join(s.replace("\\", "\\\\").replace('"', '\\"') for s in items)
    return '{"' + joined + '"}'


def int_array(items: Sequence[int]) -> str:
    """The array literal of `items`, integers."""
    return "{" + ",".join(map(str, items)) + "}"
