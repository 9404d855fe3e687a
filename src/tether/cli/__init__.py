"""The `tether` command: `tether.cli.app` parses and dispatches; each command group has
its own module here."""

from tether.cli.app import entry, main

__all__ = ["entry", "main"]
