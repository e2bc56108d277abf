"""Deprecated alias of `gigastep.viz.replay`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.viz.replay import *  # noqa: F403
from gigastep.viz.replay import __all__  # noqa: F401

warnings.warn(
    "gigastep.replay moved to gigastep.viz.replay; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
