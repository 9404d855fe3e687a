"""The names of a record's bodies: the `body` oneof of `tether.v1.Record`.

A fact of the record format that layers below the model (metrics, tracing) dispatch on
exhaustively; `tether.model.records.body_of` reads a record's.
"""

from typing import Literal

Body = Literal[
    "run_started",
    "node_completed",
    "node_failed",
    "run_paused",
    "run_resumed",
    "run_finished",
    "step_recorded",
    "run_waiting",
]
