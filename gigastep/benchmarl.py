"""The BenchMARL adapter's public name; it lives in `gigastep.adapters.benchmarl`."""

from gigastep.adapters.benchmarl import *  # noqa: F403
from gigastep.adapters.benchmarl import __all__  # noqa: F401
