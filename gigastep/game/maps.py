"""Obstacle maps as data: the map type, the built-in catalogue and the named map sets.

A config's maps as arrays in world coordinates, and their prerendered background, are in
`gigastep.game.arena`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from gigastep._util.checks import closest, float_tuple
from gigastep._util.resources import read_catalog_toml

__all__ = ["MapSpec", "builtin_maps", "map_set", "map_set_names"]

Box4 = tuple[float, float, float, float]
Pair = tuple[float, float]


@dataclass(frozen=True)
class MapSpec:
    """One obstacle map, in coordinates of a 10 x 10 reference world.

    Scaled to the environment's `limit_x` x `limit_y` when used (heights and headings are not).
    """

    name: str
    boxes: tuple[Box4, ...] = ()  # [x1, y1, x2, y2] each; agents strictly inside die
    start_team0: Box4 = (1.0, 1.0, 4.0, 9.0)  # start region of team 0
    start_team1: Box4 = (6.0, 1.0, 9.0, 9.0)  # start region of team 1
    height: Pair = (0.0, 0.0)  # start altitude range [lo, hi)
    heading_team0: Pair = (0.0, 0.0)  # start heading range of team 0, radians
    heading_team1: Pair = (math.pi, math.pi)  # start heading range of team 1, radians

    def __post_init__(self) -> None:
        boxes = tuple(float_tuple(b, 4, f"map {self.name!r} box") for b in self.boxes)
        object.__setattr__(self, "boxes", boxes)
        for name, size in (
            ("start_team0", 4),
            ("start_team1", 4),
            ("height", 2),
            ("heading_team0", 2),
            ("heading_team1", 2),
        ):
            object.__setattr__(self, name, float_tuple(getattr(self, name), size, name))
        for b in boxes:
            if not (b[0] <= b[2] and b[1] <= b[3]):
                raise ValueError(f"map {self.name!r}: box {b} must have x1 <= x2 and y1 <= y2")
        for region in (self.start_team0, self.start_team1):
            if not (region[0] < region[2] and region[1] < region[3]):
                raise ValueError(
                    f"map {self.name!r}: start region {region} must have x1 < x2 and y1 < y2"
                )
            if not (
                0.0 <= region[0] and 0.0 <= region[1] and region[2] <= 10.0 and region[3] <= 10.0
            ):
                raise ValueError(
                    f"map {self.name!r}: start region {region} lies outside the world; in the "
                    f"10 x 10 reference coordinates of a map it must lie within [0, 10] x [0, 10]"
                )
        if not 0.0 <= self.height[0] <= self.height[1] <= 10.0:
            raise ValueError(
                f"map {self.name!r}: height {self.height} must satisfy 0 <= lo <= hi <= 10"
            )


@cache
def builtin_maps() -> dict[str, MapSpec]:
    """The built-in maps of `envs/maps.toml`, by name, in catalogue order."""
    table = read_catalog_toml("maps.toml")["maps"]
    return {name: MapSpec(name=name, **fields) for name, fields in table.items()}


def map_set_names() -> tuple[str, ...]:
    """Every name `map_set` accepts, once each: the named sets, then each built-in map (the set
    "empty" and the map "empty" share a name)."""
    sets = read_catalog_toml("maps.toml")["sets"]
    return tuple(dict.fromkeys((*sets, *builtin_maps())))


def map_set(name: str) -> tuple[MapSpec, ...]:
    """The maps of a named set (`"all"`, `"empty"`) or the single built-in map `name`."""
    sets = read_catalog_toml("maps.toml")["sets"]
    maps = builtin_maps()
    if name in sets:
        return tuple(maps[m] for m in sets[name])
    if name in maps:
        return (maps[name],)
    raise ValueError(
        f"unknown map set {name!r}; expected one of {list(map_set_names())} "
        f"(closest: {closest(str(name), map_set_names())})"
    )
