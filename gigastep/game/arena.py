"""A config's obstacle maps as arrays in world coordinates, and their prerendered background.

Both are cached per config; the maps themselves (`MapSpec`, the catalogue) are data in
`gigastep.game.maps`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gigastep.game.types import EnvConfig

__all__ = ["MapArrays", "background", "map_arrays", "prerender"]


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
