"""SQLite only: the schema file and the migrations agree; migrate_url works on a file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.store import migrate_url
from tether.store.queries import load_migrations, load_schema


def _schema_of(path: Path) -> list[tuple[str, str, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master"
            " WHERE name NOT LIKE 'sqlite_%' AND tbl_name <> 'schema_migrations' ORDER BY name"
        ).fetchall()
    conn.close()
    return [(t, n, tbl, " ".join(sql.split())) for t, n, tbl, sql in rows]


async def test_schema_sql_equals_all_migrations(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    names = [m.name for m in load_migrations("sqlite")]
    assert await migrate_url(f"sqlite:///{migrated}") == names
    assert await migrate_url(f"sqlite:///{migrated}") == []
    from_schema = tmp_path / "schema.db"
    with sqlite3.connect(from_schema) as conn:
        conn.executescript(load_schema("sqlite"))
    conn.close()
    assert _schema_of(from_schema), "schema.sql created no tables"
    assert _schema_of(from_schema) == _schema_of(migrated)
