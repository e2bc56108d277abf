"""The game's data types: `EnvConfig` (static settings), `EnvState` and its parts, `MapSpec`.

They are defined with the engine (`gigastep.game.types`); this module is their public name.
"""

from gigastep.game.types import *  # noqa: F403
from gigastep.game.types import __all__  # noqa: F401
