"""The Gymnasium adapter's public name; it lives in `gigastep.adapters.gymnasium`."""

from gigastep.adapters.gymnasium import *  # noqa: F403
from gigastep.adapters.gymnasium import __all__  # noqa: F401
