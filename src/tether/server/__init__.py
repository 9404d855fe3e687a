"""The HTTP API: start runs, follow them through resumable event streams, watch them live."""

from tether.server.app import TetherServer
from tether.server.connections import ConnectionLimits
from tether.server.events import StreamSettings
from tether.server.launch import Launcher
from tether.server.limits import Limits

__all__ = ["ConnectionLimits", "Launcher", "Limits", "StreamSettings", "TetherServer"]
