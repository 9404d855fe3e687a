"""The `tether` command is a registry of command groups (`tether.cli.commands`): each module
holds its commands' parsers and actions, and adding a command is adding a module."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tether.cli import app, commands


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """`parser` and every parser below it."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_parsers(sub))
    return found


def test_each_group_module_holds_its_commands_parsers_and_actions() -> None:
    seen: list[str] = []
    for module in commands.modules():
        root = argparse.ArgumentParser()
        subparsers = root.add_subparsers()
        module.add_parser(subparsers)
        assert subparsers.choices, module.__name__
        seen.extend(subparsers.choices)
        for parser in _parsers(root)[1:]:
            fn = parser._defaults.get("fn")
            if fn is not None:  # a group's own parser (`tether keys`) may have none
                assert fn.__module__ == module.__name__, (parser.prog, fn)
    # Every command of `tether` comes from one group module, in the order of `tether --help`.
    top = next(a for a in app.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert seen == list(top.choices)


def test_a_command_is_added_by_adding_its_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "hello.py").write_text(
        "ORDER = 15\n"
        "def add_parser(sub):\n"
        "    p = sub.add_parser('hello', help='say hello')\n"
        "    p.add_argument('name')\n"
        "    p.set_defaults(fn=greet, opens_store=False)\n"
        "def greet(args):\n"
        "    print(f'hello {args.name}')\n"
        "    return 3\n"
    )
    monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
    top = next(a for a in app.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    names = list(top.choices)  # ORDER 15: after the run group's (10), before worker (20)
    assert names.index("cancel") < names.index("hello") == names.index("worker") - 1
    assert app.main(["hello", "you"]) == 3
    assert capsys.readouterr().out == "hello you\n"


def test_app_names_no_command() -> None:
    # The parser and dispatch know no command by name: every one is a group module's.
    source = Path(app.__file__).read_text()
    assert "add_parser(" not in source.replace("group.add_parser(sub)", "")
    for name in ("demo", "resume", "serve", "keys", "migrate", "check"):
        assert f'"{name}"' not in source, name
