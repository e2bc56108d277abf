"""Deprecated alias of `gigastep.viz.render`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.viz.render import *  # noqa: F403
from gigastep.viz.render import __all__  # noqa: F401

warnings.warn(
    "gigastep.render moved to gigastep.viz.render; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
