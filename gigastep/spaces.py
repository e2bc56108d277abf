"""Action and observation spaces on the JAX side, convertible to Gymnasium spaces."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import gymnasium

    from gigastep.game.types import EnvConfig

__all__ = ["Box", "Discrete", "Tuple", "entity_bounds", "float_bounds", "vector_bounds"]

Space: TypeAlias = "Box | Discrete | Tuple"
"""Any space of this module."""

Sample: TypeAlias = "jax.Array | tuple[Sample, ...]"
"""A value of a space: an array, or a tuple of values for a `Tuple`."""


@dataclass(frozen=True, eq=False)
class Box:
    """Values of `shape` and `dtype` with element-wise bounds [low, high]."""

    low: np.ndarray
    high: np.ndarray
    shape: tuple[int, ...]
    dtype: np.dtype

    @staticmethod
    def create(
        low: npt.ArrayLike, high: npt.ArrayLike, shape: Sequence[int], dtype: npt.DTypeLike
    ) -> Box:
        dtype = np.dtype(dtype)
        low = np.broadcast_to(np.asarray(low, dtype), shape)
        high = np.broadcast_to(np.asarray(high, dtype), shape)
        return Box(low=low, high=high, shape=tuple(shape), dtype=dtype)

    def sample(self, key: jax.Array) -> jax.Array:
        """A uniform sample (bounded dims); unbounded dims draw from a standard normal."""
        if np.issubdtype(self.dtype, np.integer):
            return jax.random.randint(
                key, self.shape, self.low.astype(np.int64), self.high.astype(np.int64) + 1
            ).astype(self.dtype)
        low, high = self.low.astype(np.float32), self.high.astype(np.float32)
        bounded = np.isfinite(low) & np.isfinite(high)
        k1, k2 = jax.random.split(key)
        u = jax.random.uniform(k1, self.shape, jnp.float32)
        safe_low, safe_high = np.where(bounded, low, 0), np.where(bounded, high, 1)
        x = jnp.where(
            bounded, safe_low + u * (safe_high - safe_low), jax.random.normal(k2, self.shape)
        )
        return x.astype(self.dtype)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        if x.shape != self.shape:
            return False
        if np.issubdtype(self.dtype, np.integer) != np.issubdtype(x.dtype, np.integer):
            return False
        return bool(np.all(x >= self.low) & np.all(x <= self.high))

    def to_gymnasium(self) -> gymnasium.spaces.Box:
        import gymnasium

        return gymnasium.spaces.Box(
            low=self.low, high=self.high, shape=self.shape, dtype=self.dtype
        )

    def __repr__(self) -> str:
        lo, hi = self.low.flat[0], self.high.flat[0]
        return f"Box({lo}, {hi}, {self.shape}, {self.dtype})"


@dataclass(frozen=True)
class Discrete:
    """Integers 0..n-1."""

    n: int
    shape: tuple[int, ...] = ()
    dtype: np.dtype = np.dtype(np.int32)

    def sample(self, key: jax.Array) -> jax.Array:
        return jax.random.randint(key, (), 0, self.n, jnp.int32)

    def contains(self, x: Any) -> bool:
        x = np.asarray(x)
        return bool(x.shape == () and np.issubdtype(x.dtype, np.integer) and 0 <= x < self.n)

    def to_gymnasium(self) -> gymnasium.spaces.Discrete:
        import gymnasium

        return gymnasium.spaces.Discrete(self.n)


@dataclass(frozen=True)
class Tuple:
    """A tuple of spaces (the `rgb_vector` observation)."""

    spaces: tuple[Space, ...]

    def sample(self, key: jax.Array) -> tuple[Sample, ...]:
        keys = jax.random.split(key, len(self.spaces))
        return tuple(s.sample(k) for s, k in zip(self.spaces, keys, strict=True))

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, tuple)
            and len(x) == len(self.spaces)
            and all(s.contains(v) for s, v in zip(self.spaces, x, strict=True))
        )

    def to_gymnasium(self) -> gymnasium.spaces.Tuple[Any]:
        import gymnasium

        return gymnasium.spaces.Tuple([s.to_gymnasium() for s in self.spaces])

    def __getitem__(self, i: int) -> Space:
        return self.spaces[i]

    def __len__(self) -> int:
        return len(self.spaces)


# ------------------------------------------------------------------------------------------
# Bounds of the vector observation
# ------------------------------------------------------------------------------------------

# Relative margin on the speed bound: it absorbs the float32 rounding of the speed update,
# which a contracting recursion keeps below a few ulps (1e-4 of the bound is ~800 ulps).
_SPEED_MARGIN = 1e-4


def _speed_range(config: EnvConfig) -> tuple[float, float]:
    """[lo, hi] of every agent's speed over any game of `config` (hi is inf when unbounded).

    Reset speeds are 1 and a step's speed is at least `min_speed`, so lo = min(1, min_speed).
    For hi, bound one step (rules §3): v1 = v + a u (|u| <= 1, a = dt throttle_rate max thrust),
    v2 = v1 - b v1^2 (b = dt drag), v'^2 = max(v2^2 + k g (z - z'), min_speed^2) with
    |z - z'| <= dt dive_rate: so v' <= M(S) = sqrt(max(G(S)^2 + c, min_speed^2)) where S bounds
    v, G(S) = max |v1 - b v1^2| over v1 in [lo - a, S + a] and c = |k g| dt dive_rate. M is
    non-decreasing, so any S >= 1 with M(S) <= S bounds every speed; iterating M from the
    reset speed converges to the least such S (if the speed cannot grow without bound, e.g.
    when drag = 0). Continuous diving is over-counted (altitude runs out), so this bounds from
    above rather than being reached.
    """
    lo = min(1.0, config.min_speed)
    a = config.dt * config.throttle_rate * max(config.thrust)
    b = config.dt * config.drag
    z_span = max(config.z_max, *(m.height[1] for m in config.maps))
    c = abs(config.dive_speed_exchange * config.gravity) * min(config.dt * config.dive_rate, z_span)

    def g(v1: float) -> float:
        return abs(v1 - b * v1 * v1)

    def bound(s: float) -> float:
        lo1, hi1 = lo - a, s + a
        top = max(g(lo1), g(hi1))
        if b > 0 and lo1 <= 1.0 / (2.0 * b) <= hi1:
            top = max(top, 1.0 / (4.0 * b))
        return math.sqrt(max(top * top + c, config.min_speed**2))

    s = max(1.0, config.min_speed)
    for _ in range(100_000):
        nxt = max(s, bound(s))
        if nxt > 1e6:
            return lo, math.inf
        if nxt - s <= 1e-12 * nxt:
            break
        s = nxt
    s *= 1.0 + _SPEED_MARGIN
    return lo, (s if bound(s) <= s else math.inf)


def _up(x: float) -> np.float32:
    """The float32 next above the float32 nearest to `x` (one ulp of rounding room)."""
    return np.nextafter(np.float32(x), np.float32(np.inf))


def vector_bounds(config: EnvConfig) -> tuple[np.ndarray, np.ndarray]:
    """Element-wise bounds (low, high), float32 (L,), of the vector observation of `config`.

    Derived from the game (rules §5.2), not measured; a dead agent's observation (all zeros)
    and unseen rows (zeros) are inside them. Per row of 9 features, ego row (slot 0) / others:
    seen and same-team flags in [0, 1]; x / limit_x and y / limit_y in [0, 1] / [-1, 1]
    (alive agents are inside the map: leaving it kills); z / z_max in [0, r] / [-r, r] with
    r = max(z_max, highest start altitude) / z_max; heading in [-pi, pi] (wrapped); speed /
    diagonal in [0, hi] / [-(hi - lo), hi - lo] (`_speed_range`); health in [0, max of
    max_health]; sprite in [0, max sprite]. Waypoint corners: (w - x) / limit in [-1, 1]
    shortened by the waypoint size on the side it cannot reach, flag in [0, 1]. Boxes: the
    range over the config's maps of each box coordinate (0 for padding). Bounds that come
    out of float32 products and quotients are widened by one float32 ulp.
    """
    m = config.vec_agents
    lx, ly = config.limit_x, config.limit_y
    diag = math.sqrt(lx * lx + ly * ly)
    r = max(config.z_max, *(mp.height[1] for mp in config.maps)) / config.z_max
    v_lo, v_hi = _speed_range(config)
    pi = np.float32(math.pi)
    ego_hi = [
        1.0,
        1.0,
        _up(1.0),
        _up(1.0),
        _up(r),
        pi,
        _up(v_hi / diag),
        max(config.max_health),
        max(config.sprites),
    ]
    ego_lo = [0.0, 0.0, 0.0, 0.0, 0.0, -pi, 0.0, 0.0, 0.0]
    dv = _up((v_hi - v_lo) / diag)
    other_hi = [1.0, 1.0, _up(1.0), _up(1.0), _up(r), pi, dv, ego_hi[7], ego_hi[8]]
    other_lo = [0.0, 0.0, -_up(1.0), -_up(1.0), -_up(r), -pi, -dv, 0.0, 0.0]
    low = [ego_lo] + [other_lo] * (m - 1)
    high = [ego_hi] + [other_hi] * (m - 1)
    lows: list[np.ndarray] = [np.ravel(np.asarray(low, np.float32))]
    highs: list[np.ndarray] = [np.ravel(np.asarray(high, np.float32))]
    if config.enable_waypoints:
        # the square's low corner w0 lies in [0, limit - size] (a size above the world makes
        # that interval [limit - size, 0]), its high corner at w0 + size; the ego in [0, limit]
        size = config.waypoint_size
        corners = []
        for limit in (lx, ly):
            w0 = (min(0.0, limit - size), max(0.0, limit - size))
            corners.append(((w0[0] - limit) / limit, w0[1] / limit))
        for limit in (lx, ly):
            w2 = (min(size, limit), max(size, limit))
            corners.append(((w2[0] - limit) / limit, w2[1] / limit))
        lows.append(np.array([*(-_up(-c[0]) for c in corners), 0.0], np.float32))
        highs.append(np.array([*(_up(c[1]) for c in corners), 1.0], np.float32))
    if config.max_boxes and config.map_generator is not None:
        # drawn boxes lie inside the world: [0, 1] after scaling, one ulp of rounding room
        lows.append(np.zeros(4 * config.max_boxes, np.float32))
        highs.append(np.full(4 * config.max_boxes, np.nextafter(np.float32(1), np.float32(2))))
    elif config.max_boxes:
        scale = np.array([lx, ly, lx, ly], np.float32)
        per_map = np.zeros((len(config.maps), config.max_boxes, 4), np.float32)
        for i, mp in enumerate(config.maps):
            for j, box in enumerate(mp.boxes):
                per_map[i, j] = (np.asarray(box, np.float64) * scale / 10.0).astype(np.float32)
        values = (per_map / scale).reshape(len(config.maps), -1)
        lo, hi = np.minimum(values.min(0), 0.0), np.maximum(values.max(0), 0.0)
        # zeros (padding, dead egos) are exact; other values get one ulp of rounding room
        lows.append(np.where(lo < 0, np.nextafter(lo, np.float32(-np.inf)), lo))
        highs.append(np.where(hi > 0, np.nextafter(hi, np.float32(np.inf)), hi))
    return np.concatenate(lows), np.concatenate(highs)


def entity_bounds(config: EnvConfig) -> tuple[np.ndarray, np.ndarray]:
    """Element-wise bounds (low, high), float32 (entity_size,), of the entity observation.

    Derived from the game (rules §5.5), not measured; empty slots and a dead agent's zeros
    are inside them. Flags, sprite bits and health fractions in [0, 1]; cosines and sines in
    [-1, 1]; type features in [0, the config's largest value]. An agent's forward, left and
    distance are at most diag / S apart (both inside the map); up in [-r, r] (r as in
    `vector_bounds`); speed / diag in [0, hi] (`_speed_range`). The self row's x / limit_x and
    y / limit_y lie in [0, 1], z / z_max in [0, r]. A box centre and the distance to the box are
    at most the farthest a map point is from a box centre (a waypoint's: from a point of the
    square it can be drawn in); half extents up to the largest box (the waypoint's half side).
    Bounds that come out of float32 products and quotients are widened by one float32 ulp.
    """
    from gigastep.game.observations.entity import COLUMNS, group_slices

    lx, ly = config.limit_x, config.limit_y
    s, diag = max(lx, ly), math.sqrt(lx * lx + ly * ly)
    r = max(config.z_max, *(mp.height[1] for mp in config.maps)) / config.z_max
    _, v_hi = _speed_range(config)
    c = {name: i for i, name in enumerate(COLUMNS)}
    f = len(COLUMNS)

    def rows(hi_values: dict[str, float], lo_values: dict[str, float]) -> tuple[np.ndarray, ...]:
        hi, lo = np.zeros(f, np.float32), np.zeros(f, np.float32)
        for name in COLUMNS[:6]:  # presence and group flags
            hi[c[name]] = 1.0
        for name in ("cos_bearing", "sin_bearing", "cos_heading", "sin_heading"):
            lo[c[name]], hi[c[name]] = -1.0, 1.0
        for name, value in hi_values.items():
            hi[c[name]] = _up(value)
        for name, value in lo_values.items():
            lo[c[name]] = -_up(-value) if value < 0 else value
        return lo, hi

    types = {
        "sprite_dot": 1.0,
        "sprite_plus": 1.0,
        "sprite_diagonal": 1.0,
        "health": 1.0,
        "detection_range": max(config.detection_range),
        "damage_range": max(config.damage_range),
        "thrust": max(config.thrust),
        "max_health": max(config.max_health),
    }
    speed = v_hi / diag
    ego = rows({"forward": 1.0, "left": 1.0, "up": r, "speed": speed, **types}, {})
    reach = diag / s
    agent = rows(
        {"forward": reach, "left": reach, "up": r, "distance": reach, "speed": speed, **types},
        {"forward": -reach, "left": -reach, "up": -r},
    )

    def square(farthest: float, half_w: float, half_d: float) -> tuple[np.ndarray, ...]:
        return rows(
            {
                "forward": farthest,
                "left": farthest,
                "distance": farthest,
                "half_width": half_w,
                "half_depth": half_d,
            },
            {"forward": -farthest, "left": -farthest},
        )

    groups = group_slices(config)
    low, high = [ego[0]], [ego[1]]
    for name in ("allies", "enemies"):
        size = groups[name].stop - groups[name].start
        low += [agent[0]] * size
        high += [agent[1]] * size
    if config.max_boxes:
        boxes = np.concatenate([m.reshape(-1, 4) for m in _map_boxes(config)])
        cx, cy = 0.5 * (boxes[:, 0] + boxes[:, 2]), 0.5 * (boxes[:, 1] + boxes[:, 3])
        far = np.hypot(
            np.maximum(np.abs(cx), np.abs(lx - cx)), np.maximum(np.abs(cy), np.abs(ly - cy))
        )
        half_w = 0.5 * float(np.max(boxes[:, 2] - boxes[:, 0]))
        half_d = 0.5 * float(np.max(boxes[:, 3] - boxes[:, 1]))
        box = square(float(np.max(far)) / s, half_w / s, half_d / s)
        low += [box[0]] * config.max_boxes
        high += [box[1]] * config.max_boxes
    if config.enable_waypoints:
        size = config.waypoint_size
        far = math.hypot(max(lx, size), max(ly, size)) / s
        wp = square(far, 0.5 * size / s, 0.5 * size / s)
        low.append(wp[0])
        high.append(wp[1])
    return np.concatenate(low), np.concatenate(high)


def _map_boxes(config: EnvConfig) -> list[np.ndarray]:
    """The real boxes of each map of `config` in world units, float64 (k_i, 4)."""
    scale = np.array([config.limit_x, config.limit_y, config.limit_x, config.limit_y]) / 10.0
    gen = config.map_generator
    if gen is not None:
        # the extremes of any drawn box: the smallest in a corner (its centre nearest to the
        # world's corner, so farthest from the opposite one) and the largest (half extents)
        (w_lo, w_hi), (h_lo, h_hi) = gen.box_width, gen.box_height
        extremes = np.array([[0.0, 0.0, w_lo, h_lo], [0.0, 0.0, w_hi, h_hi]])
        return [extremes * scale]
    return [np.asarray(m.boxes, np.float64).reshape(-1, 4) * scale for m in config.maps]


def float_bounds(config: EnvConfig) -> tuple[np.ndarray, np.ndarray]:
    """Bounds (low, high) of the float32 observation of `config`: `entity_bounds` for
    "entity", else `vector_bounds` (the vector of "vector" and "rgb_vector")."""
    if config.obs_type == "entity":
        return entity_bounds(config)
    return vector_bounds(config)
