"""The scenario catalogue as data: agent types, maps and scenarios (TOML) → `EnvConfig`.

See `gigastep.scenarios.catalogue` for the name grammar and the order in which settings apply.
Environments are built above this layer, by `gigastep.make` (`gigastep.registry`).
"""

from typing import Any

from gigastep.scenarios.catalogue import *  # noqa: F403
from gigastep.scenarios.catalogue import __all__  # noqa: F401


def __getattr__(name: str) -> Any:
    # `gigastep.scenarios.make` moved to `gigastep.make` (gigastep.registry); this deprecated
    # path (removed in 0.3) is listed in tests/architecture/test_imports.py until it goes.
    if name in ("make", "make_scenario"):
        import warnings

        from gigastep import registry

        warnings.warn(
            f"gigastep.scenarios.{name} moved to gigastep.{name} (gigastep.registry); the old "
            "name goes in gigastep 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(registry, name)
    raise AttributeError(f"module 'gigastep.scenarios' has no attribute {name!r}")
