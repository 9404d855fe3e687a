"""Settings are read in one place: flags, then the environment, then defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tether.cli.app import build_parser
from tether.control.wiring import DEFAULT_CONCURRENCY, DEFAULT_POLL, Settings


def settings(*argv: str) -> Settings:
    return Settings.from_args(build_parser().parse_args(list(argv)))


def test_concurrency_and_poll_come_from_flags_then_the_environment_then_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TETHER_CONCURRENCY", raising=False)
    monkeypatch.delenv("TETHER_POLL", raising=False)
    s = settings("worker")
    assert (s.concurrency, s.poll) == (DEFAULT_CONCURRENCY, DEFAULT_POLL)
    monkeypatch.setenv("TETHER_CONCURRENCY", "3")
    monkeypatch.setenv("TETHER_POLL", "0.25")
    s = settings("serve")
    assert (s.concurrency, s.poll) == (3, 0.25)
    s = settings("worker", "--concurrency", "7", "--poll", "2")
    assert (s.concurrency, s.poll) == (7, 2.0)


@pytest.mark.parametrize(
    ("env", "argv", "says"),
    [
        ({"TETHER_CONCURRENCY": "x"}, ("worker",), "$TETHER_CONCURRENCY='x' is not an integer"),
        ({}, ("worker", "--concurrency", "0"), "--concurrency must be at least 1, not 0"),
        ({"TETHER_POLL": "nan"}, ("serve",), "$TETHER_POLL must be at least"),
        ({}, ("serve", "--poll", "-1"), "--poll must be at least 0.001, not -1"),
    ],
)
def test_a_bad_concurrency_or_poll_names_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], argv: tuple[str, ...], says: str
) -> None:
    monkeypatch.delenv("TETHER_CONCURRENCY", raising=False)
    monkeypatch.delenv("TETHER_POLL", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError) as err:
        settings(*argv)
    assert says in str(err.value)


# (setting, command, flags, variable, its value, from the flag, from the variable, default)
PRECEDENCE = [
    ("db", "runs", ["--db", "sqlite:///f.db"], "TETHER_DATABASE_URL", "sqlite:///e.db",
     "sqlite:///f.db", "sqlite:///e.db", "sqlite:///.tether/tether.db"),
    ("blobs", "runs", ["--blobs", "/f"], "TETHER_BLOB_URL", "s3://e/p", "/f", "s3://e/p", None),
    ("concurrency", "worker", ["--concurrency", "7"], "TETHER_CONCURRENCY", "3", 7, 3,
     DEFAULT_CONCURRENCY),
    ("poll", "serve", ["--poll", "2"], "TETHER_POLL", "0.25", 2.0, 0.25, DEFAULT_POLL),
    ("log_format", "worker", ["--log-format", "json"], "TETHER_LOG_FORMAT", "text", "json",
     "text", None),
    ("api_token", "serve", ["--token", "f"], "TETHER_API_TOKEN", "e", "f", "e", None),
    ("demo", "worker", ["--demo"], "TETHER_DEMO", "1", True, True, False),
    ("demo", "serve", [], "TETHER_DEMO", "0", False, False, False),
    ("demo_model", "worker", [], "TETHER_DEMO_MODEL", "openai:e", "openai:e", "openai:e", None),
    ("demo_speed", "demo", ["--speed", "0"], "TETHER_DEMO_SPEED", "0.5", 0.0, 0.5, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "command", "flags", "variable", "value", "flagged", "from_env", "default"),
    PRECEDENCE,
    ids=[f"{p[0]}-{p[1]}" for p in PRECEDENCE],
)
def test_from_env_and_from_args_agree_flags_then_environment_then_defaults(
    name: str,
    command: str,
    flags: list[str],
    variable: str,
    value: str,
    flagged: object,
    from_env: object,
    default: object,
) -> None:
    parse = build_parser().parse_args
    bare, env = parse([command]), {variable: value}
    assert getattr(Settings.from_env({}), name) == default
    assert getattr(Settings.from_args(bare, {}), name) == default
    assert getattr(Settings.from_env(env), name) == from_env
    assert Settings.from_args(bare, env) == Settings.from_env(env)
    assert getattr(Settings.from_args(parse([command, *flags]), env), name) == flagged


def test_every_variable_read_is_documented_once() -> None:
    from tether.control.settings import ENVIRONMENT

    page = (ROOT / "docs" / "reference" / "environment.md").read_text()
    rows = re.findall(r"^\| `([A-Z0-9_]+)`", page, re.MULTILINE)
    assert len(rows) == len(set(rows)), rows
    named = set(re.findall(r"\bTETHER_[A-Z0-9_]+", "".join(p.read_text() for p in _sources())))
    assert set(ENVIRONMENT) | named <= set(rows) | {"TETHER_S3"}, set(ENVIRONMENT) - set(rows)


ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tether"
# Outside the demo and the test kit, only these read the environment: the command's
# settings, the model providers' API keys (their SDKs' convention), and the store's default
# url for code that opens one without settings (`store_from_url()`).
READERS = 3


def _sources() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if not {"testing", "demo", "_proto"} & set(p.parts)]


def test_at_most_three_modules_read_the_environment_and_none_writes_it() -> None:
    reads = re.compile(r"os\.environ|os\.getenv")
    readers = sorted(str(p.relative_to(SRC)) for p in _sources() if reads.search(p.read_text()))
    assert len(readers) <= READERS, f"{len(readers)} modules read the environment: {readers}"
    writes = re.compile(
        r"os\.environ\s*\[[^\]]*\]\s*=|os\.environ\.(update|setdefault|pop|clear)\b"
        r"|os\.putenv|os\.unsetenv|del\s+os\.environ"
    )
    writers = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if writes.search(p.read_text())]
    assert writers == [], writers


def test_a_bad_demo_speed_names_its_variable() -> None:
    with pytest.raises(ValueError, match=r"\$TETHER_DEMO_SPEED='fast' is not a number"):
        Settings.from_env({"TETHER_DEMO_SPEED": "fast"})
