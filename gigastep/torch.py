"""Deprecated alias of `gigastep.adapters.torch`, kept for one release (removed in 0.3)."""

import warnings

from gigastep.adapters.torch import *  # noqa: F403
from gigastep.adapters.torch import __all__  # noqa: F401

warnings.warn(
    "gigastep.torch moved to gigastep.adapters.torch; the old name goes in gigastep 0.3",
    DeprecationWarning,
    stacklevel=2,
)
