"""Costs as people read them: one format for the CLI, pause reasons and errors."""

from __future__ import annotations


def money(amount: float) -> str:
    """A cost as people read it: dollars to four decimals, e.g. `$0.0423`."""
    return f"${amount:.4f}"
