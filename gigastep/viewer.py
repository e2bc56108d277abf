"""Deprecated alias of `gigastep.viz.viewer`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.viz.viewer import *  # noqa: F403
from gigastep.viz.viewer import __all__  # noqa: F401

warnings.warn(
    "gigastep.viewer moved to gigastep.viz.viewer; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
