"""Load named SQL queries and ordered migrations from a backend's .sql files."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(backend: str, file: str = "queries.sql") -> dict[str, str]:
    """Parse `sql/<backend>/<file>`: each query follows a `-- name: NAME` line."""
    text = resources.files("tether.store").joinpath("sql", backend, file).read_text()
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("--")]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(backend: str) -> list[Migration]:
    """Return `sql/<backend>/migrations/NNNN_name.sql` in version order."""
    folder = resources.files("tether.store").joinpath("sql", backend, "migrations")
    found = []
    for entry in folder.iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if m:
            found.append(Migration(int(m.group(1)), entry.name, entry.read_text()))
    found.sort(key=lambda mig: mig.version)
    return found


def load_schema(backend: str) -> str:
    """Return `sql/<backend>/schema.sql`: the whole current schema in one file."""
    return resources.files("tether.store").joinpath("sql", backend, "schema.sql").read_text()
