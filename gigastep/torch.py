"""The PyTorch adapter's public name; it lives in `gigastep.adapters.torch`."""

from gigastep.adapters.torch import *  # noqa: F403
from gigastep.adapters.torch import __all__  # noqa: F401
