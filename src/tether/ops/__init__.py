"""Operating tether: retention and erasure of runs."""

from tether.foundation.durations import parse_duration
from tether.ops.retention import DeleteReport, PruneReport, delete_run, prune

__all__ = ["DeleteReport", "PruneReport", "delete_run", "parse_duration", "prune"]
