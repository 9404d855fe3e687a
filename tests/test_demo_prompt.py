"""`tether demo --approve`'s terminal prompt in a real pseudo-terminal: the real command, the
real line discipline (Ctrl-C is the terminal's SIGINT, Ctrl-D its end of input), SQLite and
PostgreSQL. Only an explicit yes or no records a decision."""

from __future__ import annotations

import asyncio
import os
import pty
import re
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.test_cli import env, tether
from tether import Runtime, Status, store_from_url
from tether.model.graph import Graph

# Only a guard against a test hanging forever: every wait below ends on an event (text on
# the terminal, the process's exit), long before this.
GUARD_S = 60
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
PROMPT = re.compile(r"approve calc\(.*\)\? \[y/n\] ")
HINT = re.compile(r"answer later with: tether signal (\S+) (\S+) --data '\{\"approve\": true\}'")


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    url: str = request.getfixturevalue("fresh_pg_database")
    return url


class Terminal:
    """`tether ARGS` with a pseudo-terminal as its controlling terminal (stdin, stdout and
    stderr), as a person at a shell runs it."""

    def __init__(self, home: Path, *args: str) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: its own session, the pty its controlling terminal
            try:
                os.execve(sys.executable, [sys.executable, "-m", "tether", *args], _env(home))
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.text = ""  # everything it printed, ANSI codes taken out
        self.status: int | None = None
        self.exited_at: float | None = None

    def _pump(self, until: float) -> bool:
        """Read what is there (waiting up to `until`); False once the terminal is closed."""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, until - time.monotonic()))
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child has exited and closed its side
            data = b""
        if not data:
            return False
        self.text += ANSI.sub("", data.decode(errors="replace"))
        return True

    def expect(self, pattern: re.Pattern[str], count: int = 1) -> list[re.Match[str]]:
        """Read until `pattern` has shown `count` times in all the output."""
        guard = time.monotonic() + GUARD_S
        while len(found := list(pattern.finditer(self.text))) < count:
            if time.monotonic() > guard or not self._pump(guard):
                raise AssertionError(f"never saw {pattern.pattern!r} x{count}:\n{self.text}")
        return found

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait_exit(self) -> int:
        """Read until the process exits; its exit status."""
        guard = time.monotonic() + GUARD_S
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.exited_at = time.monotonic()
                self.status = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > guard:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                raise AssertionError(f"still running after its input ended:\n{self.text}")
            if not self._pump(time.monotonic() + 0.05):
                # Its side is closed: it is exiting; reap it.
                _, status = os.waitpid(self.pid, 0)
                self.exited_at = time.monotonic()
                self.status = os.waitstatus_to_exitcode(status)
        while self._pump(time.monotonic()):  # what it printed last
            pass
        os.close(self.fd)
        return self.status

    def kill(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            os.close(self.fd)


def _env(home: Path) -> dict[str, str]:
    e = env(home)
    e["TERM"] = "xterm"
    return e


async def _graph(db: str, run_id: str) -> tuple[Graph, Status]:
    async with store_from_url(db) as store:
        info = await store.runs.get(run_id)
        assert info is not None
        return await Runtime(store).load(run_id), info.status


def _decisions(graph: Graph) -> list[str]:
    """The keys of the waits an event completed."""
    return [
        state.spec.wait.key
        for state in graph.nodes.values()
        if state.is_wait and state.completed is not None
    ]


def test_ctrl_c_at_the_prompt_leaves_the_run_waiting_and_exits(tmp_path: Path, db: str) -> None:
    term = Terminal(tmp_path, "--db", db, "demo", "--approve")
    try:
        term.expect(PROMPT)
        term.send(b"\x03")  # the terminal's interrupt character: SIGINT to the process
        sent = time.monotonic()
        code = term.wait_exit()
    finally:
        term.kill()
    assert term.exited_at is not None
    took = term.exited_at - sent
    print(f"exited {took:.3f} s after Ctrl-C (code {code})")
    assert code == 0, term.text
    (hint,) = HINT.finditer(term.text)
    run_id, key = hint.groups()
    assert "status: waiting" in term.text
    graph, status = asyncio.run(_graph(db, run_id))
    assert status is Status.WAITING and graph.status is Status.WAITING
    assert key in graph.waits and graph.waits[key] in graph.open_waits
    assert _decisions(graph) == []  # nobody decided, so nothing says anyone did


def test_empty_and_other_answers_ask_again_and_eof_decides_nothing(tmp_path: Path, db: str) -> None:
    term = Terminal(tmp_path, "--db", db, "demo", "--approve")
    try:
        term.expect(PROMPT)
        term.send(b"\r")  # Enter alone
        term.expect(PROMPT, 2)
        term.send(b"   \r")
        term.expect(PROMPT, 3)
        term.send(b"maybe\r")
        term.expect(re.compile("please answer y or n"))
        term.expect(PROMPT, 4)
        term.send(b"\x04")  # Ctrl-D on an empty line: the end of input
        code = term.wait_exit()
    finally:
        term.kill()
    assert code == 0, term.text
    assert "Traceback" not in term.text
    (hint,) = HINT.finditer(term.text)
    run_id, key = hint.groups()
    graph, status = asyncio.run(_graph(db, run_id))
    assert status is Status.WAITING and graph.waits[key] in graph.open_waits
    assert _decisions(graph) == []

    # The command it printed answers the run from another shell, later.
    signalled = tether(tmp_path, "--db", db, "signal", run_id, key, "--data", '{"approve": true}')
    assert f"event for wait '{key}' recorded" in signalled.stdout
    graph, _ = asyncio.run(_graph(db, run_id))
    assert _decisions(graph) == [key]
    out = graph.completed(graph.waits[key])
    assert out is not None and out.output.json == b'{"approve":true}'


@pytest.mark.parametrize("answer", ["YES", "no"])
def test_an_explicit_yes_or_no_decides(tmp_path: Path, db: str, answer: str) -> None:
    term = Terminal(tmp_path, "--db", db, "demo", "--approve")
    try:
        term.expect(PROMPT)
        term.send(answer.encode() + b"\r")
        # Every later prompt (if the model asks again) is approved, until the run ends.
        either = re.compile(rf"(?:{PROMPT.pattern})|status: \w+")
        answered = 1
        while "status: " not in term.expect(either, answered + 1)[-1].group(0):
            term.send(b"y\r")
            answered += 1
        code = term.wait_exit()
    finally:
        term.kill()
    assert code == 0, term.text
    run_id = re.search(r"run id: (\S+)", term.text)
    assert run_id is not None, term.text
    graph, status = asyncio.run(_graph(db, run_id.group(1)))
    assert status is Status.SUCCEEDED, term.text
    decided = _decisions(graph)
    first = graph.completed(graph.waits[decided[0]])
    assert first is not None
    approve = answer == "YES"
    payload = first.output.json.replace(b" ", b"")
    assert (b'"approve":true' in payload) is approve, payload
