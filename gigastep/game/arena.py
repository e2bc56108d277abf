"""A config's obstacle maps as arrays in world coordinates, and their prerendered background.

Both are cached per config; the maps themselves (`MapSpec`, the catalogue) are data in
`gigastep.game.maps`. A game's own boxes and background, whether its map comes from the
config's maps or was drawn at reset by a generator (`gigastep.game.procmaps`), are read
through `episode_boxes` and `episode_background`.
"""

from __future__ import annotations

from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.game import procmaps
from gigastep.game.types import EnvConfig, EpisodeState

__all__ = [
    "MapArrays",
    "background",
    "draw_boxes",
    "episode_background",
    "episode_boxes",
    "generated_boxes",
    "map_arrays",
    "prerender",
]


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


def generated_boxes(config: EnvConfig, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(boxes (B, 4) float32 in world units, box_valid (B,) bool): the layout that
    `config.map_generator` draws from `key` (through its level seeds, if it has them:
    `procmaps.level_key`), scaled from the reference world like a map's."""
    if config.map_generator is None:
        raise ValueError("generated_boxes: the config has no map_generator")
    layout = procmaps.draw_layout(
        config.map_generator, procmaps.level_key(config.map_generator, key)
    )
    scale = np.asarray([config.limit_x, config.limit_y] * 2, np.float32) / np.float32(10.0)
    return layout.boxes * scale, layout.box_valid


def episode_boxes(config: EnvConfig, episode: EpisodeState) -> tuple[jax.Array, jax.Array]:
    """(boxes (B, 4) float32 world units, box_valid (B,) bool) of one game's map: the boxes
    drawn at its reset (a config with a generator), else those of map `episode.map_idx`."""
    if episode.boxes is not None and episode.box_valid is not None:
        return episode.boxes, episode.box_valid
    maps = map_arrays(config)
    return jnp.asarray(maps.boxes)[episode.map_idx], jnp.asarray(maps.box_valid)[episode.map_idx]


def draw_boxes(config: EnvConfig, boxes: jax.Array, box_valid: jax.Array) -> jax.Array:
    """(res_x, res_y, 3) uint8: the background of one map of boxes (B, 4), with the pixel rule
    of `prerender` (the half-open block [X1, X2) x [Y1, Y2), X = clip(trunc(x * res_x /
    limit_x), 0, res_x - 1)), boxes grey (127, 127, 127)."""
    rx, ry = config.resolution
    fx = np.float32(rx) / np.float32(config.limit_x)
    fy = np.float32(ry) / np.float32(config.limit_y)
    boxes = boxes.astype(jnp.float32)
    cx = jnp.clip(jnp.trunc(boxes[:, 0::2] * fx), 0, rx - 1).astype(jnp.int32)  # (B, 2)
    cy = jnp.clip(jnp.trunc(boxes[:, 1::2] * fy), 0, ry - 1).astype(jnp.int32)
    px, py = jnp.arange(rx), jnp.arange(ry)
    in_x = (px[None, :] >= cx[:, :1]) & (px[None, :] < cx[:, 1:])  # (B, rx)
    in_y = (py[None, :] >= cy[:, :1]) & (py[None, :] < cy[:, 1:])  # (B, ry)
    # how many boxes cover each pixel: small integer counts, exact in float32
    f32 = jnp.float32
    hits = jnp.einsum("b,bx,by->xy", box_valid.astype(f32), in_x.astype(f32), in_y.astype(f32))
    grey = jnp.where(hits > 0, jnp.uint8(127), jnp.uint8(0))
    return jnp.broadcast_to(grey[..., None], (rx, ry, 3))


def episode_background(config: EnvConfig, episode: EpisodeState) -> jax.Array:
    """(K, res_x, res_y, 3) uint8 backgrounds to draw one game's images on: every map's
    prerendered image (`background`), or the one drawn map's (K = 1), painted from its boxes
    at each call: a fused compare over B x res_x x res_y that keeps the state free of a
    res_x x res_y x 3 image per game."""
    if episode.boxes is not None and episode.box_valid is not None:
        return draw_boxes(config, episode.boxes, episode.box_valid)[None]
    return jnp.asarray(background(config))
