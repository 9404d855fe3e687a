"""Deprecated: the scripted model server is `tether.testing` now; this name still imports it."""

import warnings

from tether.testing import *  # noqa: F403
from tether.testing import __all__  # noqa: F401

warnings.warn(
    "tether.agent.localserver moved to tether.testing; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
