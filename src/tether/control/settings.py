"""The settings of the `tether` command, its workers and its server, read in one place.

`Settings.from_env(environ)` reads them from an environment (a mapping: `os.environ` at the
entry point, a plain dict in a test); `Settings.from_args(args, environ)` lays a command's
flags over it. Flags win, then the environment, then defaults. Nothing below the entry
points reads the environment: the store, the blobs, logs, traces, the key ring, fault
points and the demo are handed these values as parameters. `ENVIRONMENT` names every
variable read here; docs/reference/environment.md documents each one (a test checks both).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.blobs.factory import default_blob_url
from tether.engine.ownership import DEFAULT_LEASE_TTL
from tether.store import DATA_DIR_ENV, DATABASE_URL_ENV, data_dir, default_url, store_url

if TYPE_CHECKING:
    from tether.foundation.crypto.keyring import KeyRing

DEFAULT_GRACE = 25.0
# Runs a worker (or the server's embedded one) executes at once.
DEFAULT_CONCURRENCY = 16
# Seconds between looks at the store: a worker's for expired leases, a stream's slow poll.
DEFAULT_POLL = 1.0

# Every variable `Settings.from_env` reads, and the setting it gives.
ENVIRONMENT = {
    DATABASE_URL_ENV: "db",
    DATA_DIR_ENV: "data_dir",
    "TETHER_BLOB_URL": "blobs",
    "TETHER_S3_ENDPOINT": "s3_endpoint",
    "TETHER_KEYS": "keys",
    "TETHER_PER_RUN_KEYS": "per_run_keys",
    "TETHER_CONCURRENCY": "concurrency",
    "TETHER_POLL": "poll",
    "TETHER_LOG_FORMAT": "log_format",
    "TETHER_API_TOKEN": "api_token",
    "TETHER_DEMO": "demo",
    "TETHER_DEMO_MODEL": "demo_model",
    "TETHER_DEMO_SPEED": "demo_speed",
    "TETHER_FAULT": "fault",
    "OTEL_TRACES_EXPORTER": "traces_exporter",
    "OTEL_SDK_DISABLED": "traces_disabled",
}

# The flag (its `args` attribute) that overrides each setting, where there is one.
FLAGS = {
    "db": "db",
    "blobs": "blobs",
    "lease_ttl": "lease_ttl",
    "grace": "grace",
    "concurrency": "concurrency",
    "poll": "poll",
    "log_format": "log_format",
    "api_token": "token",
    "demo": "demo",
    "demo_speed": "speed",
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the store and blobs are, how runs are owned and drained, and what the entry
    points (workers, the server, the demo) are told."""

    db: str
    # None: a directory beside the SQLite file, or in the data dir (`default_blob_url`).
    blobs: str | None = None
    data_dir: Path = field(default_factory=lambda: data_dir({}))
    # An S3 blob store's endpoint when its url has no `?endpoint=` (else obstore's AWS_*).
    s3_endpoint: str | None = None
    lease_ttl: float = DEFAULT_LEASE_TTL
    grace: float = DEFAULT_GRACE
    keys: KeyRing | None = field(default=None, repr=False)
    # Every new run gets its own data key (crypto-shredding); needs `keys`.
    per_run_keys: bool = False
    concurrency: int = DEFAULT_CONCURRENCY
    poll: float = DEFAULT_POLL
    # Checked when logs are configured (`tether worker`, `tether serve`), not before.
    log_format: str | None = None
    api_token: str | None = field(default=None, repr=False)
    demo: bool = False
    demo_model: str | None = None
    demo_speed: float | None = None
    fault: str = ""
    traces_exporter: str = ""
    traces_disabled: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """The settings `environ` gives, defaults for the rest. A malformed key ring,
        concurrency, poll interval or demo speed raises here, naming its variable."""
        return cls._read(environ, {})

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """The command's flags, then `environ` (default: the process's environment), then
        defaults; a malformed value stops every command here, naming its flag or variable."""
        flags = {
            name: value
            for name, flag in FLAGS.items()
            if (value := getattr(args, flag, None)) is not None
        }
        return cls._read(os.environ if environ is None else environ, flags)

    @classmethod
    def _read(cls, environ: Mapping[str, str], flags: Mapping[str, Any]) -> Settings:
        from tether.foundation.crypto.keyring import load_ring

        def given(name: str, variable: str) -> Any:
            return flags[name] if name in flags else environ.get(variable) or None

        per_run_keys = environ.get("TETHER_PER_RUN_KEYS", "").strip().lower() in (
            "1",
            "true",
            "yes",
        )
        keys = load_ring(environ.get("TETHER_KEYS"))
        if per_run_keys and keys is None:
            from tether.foundation.errors import KeyRingError

            raise KeyRingError("TETHER_PER_RUN_KEYS=1 needs a key ring: set TETHER_KEYS")
        speed = _number(flags, environ, "demo_speed", "TETHER_DEMO_SPEED", float, 0.0)
        runs = _number(flags, environ, "concurrency", "TETHER_CONCURRENCY", int, 1)
        poll = _number(flags, environ, "poll", "TETHER_POLL", float, 0.001)
        return cls(
            # `--db` takes a URL, or a SQLite file's path, or a directory (its tether.db).
            db=store_url(flags["db"]) if flags.get("db") else default_url(environ),
            blobs=given("blobs", "TETHER_BLOB_URL"),
            data_dir=data_dir(environ),
            s3_endpoint=environ.get("TETHER_S3_ENDPOINT") or None,
            lease_ttl=flags.get("lease_ttl", DEFAULT_LEASE_TTL),
            grace=flags.get("grace", DEFAULT_GRACE),
            keys=keys,
            per_run_keys=per_run_keys,
            concurrency=DEFAULT_CONCURRENCY if runs is None else int(runs),
            poll=DEFAULT_POLL if poll is None else poll,
            log_format=given("log_format", "TETHER_LOG_FORMAT"),
            api_token=given("api_token", "TETHER_API_TOKEN"),
            demo=bool(flags["demo"]) if "demo" in flags else environ.get("TETHER_DEMO") == "1",
            # `tether demo` and `resume` take theirs as `--model` (`limits --model` is not it).
            demo_model=environ.get("TETHER_DEMO_MODEL") or None,
            demo_speed=speed,
            fault=environ.get("TETHER_FAULT", ""),
            traces_exporter=environ.get("OTEL_TRACES_EXPORTER", "").strip().lower(),
            traces_disabled=bool(environ.get("OTEL_SDK_DISABLED")),
        )

    def blob_url(self) -> str:
        """`blobs` (`--blobs`, `$TETHER_BLOB_URL`), else beside the SQLite file or in the
        data dir."""
        return self.blobs or default_blob_url(self.db, self.data_dir)


def _number(
    flags: Mapping[str, Any],
    environ: Mapping[str, str],
    name: str,
    variable: str,
    kind: type[int] | type[float],
    least: float,
) -> float | None:
    """The flag if given, else `$variable`, else None; ValueError naming where a value that
    is not a number of at least `least` came from."""
    value = flags.get(name)
    where = f"--{FLAGS[name]}"
    if value is None:
        raw = environ.get(variable)
        if raw is None:
            return None
        where = f"${variable}"
        try:
            value = kind(raw)
        except ValueError:
            raise ValueError(
                f"{where}={raw!r} is not {'an integer' if kind is int else 'a number'}"
            ) from None
    if not math.isfinite(value) or value < least:
        raise ValueError(f"{where} must be at least {least:g}, not {value:g}")
    return float(value) if kind is float else value
