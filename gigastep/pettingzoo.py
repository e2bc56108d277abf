"""Deprecated alias of `gigastep.adapters.pettingzoo`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.adapters.pettingzoo import *  # noqa: F403
from gigastep.adapters.pettingzoo import __all__  # noqa: F401

warnings.warn(
    "gigastep.pettingzoo moved to gigastep.adapters.pettingzoo; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
