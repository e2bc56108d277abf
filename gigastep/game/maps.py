"""Obstacle maps: the map type, the built-in catalogue, map sets, scaling to the world and
prerendering (both cached per config)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING

import numpy as np

from gigastep._checks import closest, float_tuple
from gigastep._resources import read_catalog_toml

if TYPE_CHECKING:
    from gigastep.types import EnvConfig

__all__ = [
    "MapArrays",
    "MapSpec",
    "background",
    "builtin_maps",
    "map_arrays",
    "map_set",
    "map_set_names",
    "prerender",
]

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


class MapArrays:
    """The maps of a config as float32 numpy arrays in world coordinates.

    Numpy (not jax) arrays, so that a cached instance never holds a tracer; they become
    constants of whatever function uses them.

    Attributes:
        boxes: (K, B, 4) boxes [x1, y1, x2, y2]; padding boxes are all zero.
        box_valid: (K, B) bool, False for padding.
        start: (K, 2, 4) start region of team 0 and team 1.
        height: (K, 2) start altitude range.
        heading: (K, 2, 2) start heading range of team 0 and team 1.
    """

    def __init__(self, config: EnvConfig):
        k, b = len(config.maps), config.max_boxes
        scale = (
            np.array([config.limit_x, config.limit_y, config.limit_x, config.limit_y], np.float64)
            / 10.0
        )
        boxes = np.zeros((k, max(b, 1), 4), np.float64)
        valid = np.zeros((k, max(b, 1)), bool)
        for i, m in enumerate(config.maps):
            for j, box in enumerate(m.boxes):
                boxes[i, j] = np.asarray(box) * scale
                valid[i, j] = True
        self.boxes_np = boxes[:, :b].astype(np.float32)
        self.boxes = boxes.astype(np.float32)
        self.box_valid = valid
        self.start = np.asarray(
            [
                [np.asarray(m.start_team0) * scale, np.asarray(m.start_team1) * scale]
                for m in config.maps
            ],
            np.float32,
        )
        self.height = np.asarray([m.height for m in config.maps], np.float32)
        self.heading = np.asarray(
            [[m.heading_team0, m.heading_team1] for m in config.maps], np.float32
        )


@lru_cache(maxsize=64)
def map_arrays(config: EnvConfig) -> MapArrays:
    """`MapArrays(config)`, cached per config (numpy, so traced code embeds it as constants)."""
    return MapArrays(config)


@lru_cache(maxsize=16)
def background(config: EnvConfig) -> np.ndarray:
    """`prerender(config)`, cached per config."""
    return prerender(config)


def prerender(config: EnvConfig) -> np.ndarray:
    """Background image of every map: (K, res_x, res_y, 3) uint8, boxes grey (127, 127, 127).

    A box covers the half-open pixel block [X1, X2) x [Y1, Y2) with
    X = clip(trunc(x * res_x / limit_x), 0, res_x - 1) (likewise for y).
    """
    rx, ry = config.resolution
    images = np.zeros((len(config.maps), rx, ry, 3), np.uint8)
    boxes = MapArrays(config).boxes_np.astype(np.float32)
    fx = np.float32(rx) / np.float32(config.limit_x)
    fy = np.float32(ry) / np.float32(config.limit_y)
    for i, m in enumerate(config.maps):
        for x1, y1, x2, y2 in boxes[i, : len(m.boxes)]:
            X1, X2 = (int(np.clip(np.trunc(v * fx), 0, rx - 1)) for v in (x1, x2))
            Y1, Y2 = (int(np.clip(np.trunc(v * fy), 0, ry - 1)) for v in (y1, y2))
            images[i, X1:X2, Y1:Y2] = 127
    return images
