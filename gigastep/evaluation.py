"""Deprecated alias of `gigastep.eval.matches`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.eval.matches import *  # noqa: F403
from gigastep.eval.matches import __all__  # noqa: F401

warnings.warn(
    "gigastep.evaluation moved to gigastep.eval.matches; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
