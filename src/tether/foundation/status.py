"""A run's status: one enum for the runs table, the graph, the views and the API.

The log records only how a run finished (`RunFinished.status`, a protobuf enum); the
conversions between the two live here and nowhere else.
"""

from __future__ import annotations

from enum import StrEnum

from tether._proto.tether.v1 import records_pb2 as pb


class Status(StrEnum):
    """Where a run stands."""

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    # Parked: only waits pending (events, timers); no process holds it.
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    def to_pb(self) -> pb.RunStatus:
        """The RunFinished status of a finished run (ValueError for an unfinished one)."""
        try:
            return _TO_PB[self]
        except KeyError:
            raise ValueError(f"status {self.value!r} is not a finished run's") from None

    @classmethod
    def from_pb(cls, status: pb.RunStatus) -> Status:
        """The status a RunFinished record gives its run.

        An unknown or unset value (a newer schema's) reads as failed: the run did not
        succeed as far as this version can tell, and it is finished either way.
        """
        return _FROM_PB.get(status, Status.FAILED)


_TO_PB: dict[Status, pb.RunStatus] = {
    Status.SUCCEEDED: pb.RUN_STATUS_SUCCEEDED,
    Status.FAILED: pb.RUN_STATUS_FAILED,
    Status.CANCELLED: pb.RUN_STATUS_CANCELLED,
}
_FROM_PB: dict[pb.RunStatus, Status] = {v: k for k, v in _TO_PB.items()}
