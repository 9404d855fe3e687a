"""The `tether` command's groups: one module each, holding its parser and its actions.

A module here is a command group when it defines

- `ORDER`: where its commands stand in `tether --help` (lower first);
- `add_parser(subparsers)`: adds its commands to `tether`'s subparsers, each with
  `set_defaults(fn=ACTION)`. `ACTION(store, args)` is awaited with the store opened
  (`read_only=True`: opened with `Store.open_existing`, which creates nothing); with
  `opens_store=False`, `ACTION(args)` is called (and awaited if it is a coroutine) with no
  store opened. It returns the exit code.

Adding a command is adding its module here (and its line in docs/reference, generated from
the parser): `tether.cli.app` finds every module of this package.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def modules() -> list[ModuleType]:
    """The command groups, in `ORDER`."""
    found = [
        importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    ]
    return sorted(found, key=lambda module: (module.ORDER, module.__name__))
