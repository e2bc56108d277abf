"""Deprecated alias of `gigastep.adapters.gymnasium`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.adapters.gymnasium import *  # noqa: F403
from gigastep.adapters.gymnasium import __all__  # noqa: F401

warnings.warn(
    "gigastep.gymnasium moved to gigastep.adapters.gymnasium; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
