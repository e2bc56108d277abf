"""Deprecated alias of `gigastep.adapters.torchrl`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.adapters.torchrl import *  # noqa: F403
from gigastep.adapters.torchrl import __all__  # noqa: F401

warnings.warn(
    "gigastep.torchrl moved to gigastep.adapters.torchrl; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
