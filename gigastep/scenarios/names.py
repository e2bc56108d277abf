"""The scenario catalogue's value types (agent types, a resolved scenario's identity) and the
name grammar: `<base>` or `<base>_<fobs|pobs>_<rgb|vec|ent>_<maps|void>_<cont|disc>`, the
suffix meanings being the `[suffixes]` tables of `envs/scenarios.toml`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

from gigastep._util.resources import read_catalog_toml
from gigastep.scenarios.checks import _check_config_keys


@dataclass(frozen=True)
class AgentType:
    """One row of the agent type table (`envs/agent_types.toml`)."""

    name: str
    sprite: int = 1
    """Sprite bit mask drawn in RGB observations (1 dot, 2 plus arms, 4 diagonals)."""
    max_health: float = 1.0
    """Health cap; agents start at full health."""
    detection_range: float = 1.0
    """Multiplier of the detection radius (as observer)."""
    damage_range: float = 1.0
    """Multiplier of the damage radius (as shooter); 0 means it never shoots."""
    thrust: float = 1.0
    """Throttle multiplier."""
    idle_reward: float = 0.0
    """Constant reward earned every step the agent starts alive."""

    def __post_init__(self) -> None:
        where = f"agent type {self.name!r}"
        sprite = self.sprite
        if isinstance(sprite, bool) or not isinstance(sprite, int):
            raise TypeError(
                f"{where}: sprite must be an integer bit mask in 0..7, "
                f"got {sprite!r} ({type(sprite).__name__})"
            )
        if not 0 <= sprite <= 7:
            raise ValueError(f"{where}: sprite must be in 0..7, got {sprite}")
        for name in ("max_health", "detection_range", "damage_range", "thrust", "idle_reward"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(
                    f"{where}: {name} must be a number, got {value!r} ({type(value).__name__})"
                )
            if not math.isfinite(value):
                raise ValueError(f"{where}: {name} must be finite, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.max_health <= 0:
            raise ValueError(f"{where}: max_health must be > 0, got {self.max_health}")
        for name in ("detection_range", "damage_range", "thrust"):
            if getattr(self, name) < 0:
                raise ValueError(f"{where}: {name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class ScenarioSpec:
    """Identity of a resolved scenario: its name, data version and content hash.

    `hash` is `scenario_hash(config)` of the exact config the environment runs, overrides
    included, so two environments with equal hashes play the same game.
    """

    name: str
    version: int
    hash: str


class ScenarioName(NamedTuple):
    """A scenario name split by the grammar: the base and its suffixes (none, or one per group)."""

    base: str
    suffixes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "_".join((self.base, *self.suffixes))


@cache
def _suffix_groups() -> dict[str, dict[str, dict[str, Any]]]:
    """{group: {suffix: EnvConfig fields}} in name order, from `envs/scenarios.toml`."""
    groups = read_catalog_toml("scenarios.toml")["suffixes"]
    for group, suffixes in groups.items():
        for suffix, fields in suffixes.items():
            _check_config_keys(fields, f"suffix _{suffix} ({group}) in scenarios.toml")
    return groups


def parse_name(name: str) -> ScenarioName:
    """Split `name` into base and suffixes: `<base>` or `<base>_<s1>_<s2>_<s3>_<s4>`.

    A name whose last parts are not one valid suffix per group, in group order, is all base.
    `str(parse_name(name)) == name` for every name.
    """
    groups = list(_suffix_groups().values())
    parts = str(name).split("_")
    tail = parts[len(parts) - len(groups) :]
    if len(parts) > len(groups) and all(s in g for s, g in zip(tail, groups, strict=True)):
        return ScenarioName("_".join(parts[: -len(groups)]), tuple(tail))
    return ScenarioName(str(name))


def _suffix_fields(suffixes: tuple[str, ...]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for suffix, group in zip(suffixes, _suffix_groups().values(), strict=False):
        fields.update(group[suffix])
    return fields
