"""Settings are read in one place: flags, then the environment, then defaults."""

from __future__ import annotations

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
