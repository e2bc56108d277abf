"""The PettingZoo adapter's public name; it lives in `gigastep.adapters.pettingzoo`."""

from gigastep.adapters.pettingzoo import *  # noqa: F403
from gigastep.adapters.pettingzoo import __all__  # noqa: F401
