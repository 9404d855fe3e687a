"""The HTTP API: start runs, follow them through resumable event streams, watch them live."""

from tether.server.app import TetherServer
from tether.server.events import StreamSettings
from tether.server.launch import Launcher

__all__ = ["Launcher", "StreamSettings", "TetherServer"]
