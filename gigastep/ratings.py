"""Deprecated alias of `gigastep.eval.ratings`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.eval.ratings import *  # noqa: F403
from gigastep.eval.ratings import __all__  # noqa: F401

warnings.warn(
    "gigastep.ratings moved to gigastep.eval.ratings; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
