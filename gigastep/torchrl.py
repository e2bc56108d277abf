"""The TorchRL adapter's public name; it lives in `gigastep.adapters.torchrl`."""

from gigastep.adapters.torchrl import *  # noqa: F403
from gigastep.adapters.torchrl import __all__  # noqa: F401
