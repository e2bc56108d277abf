"""Procedural obstacle maps: a layout of boxes drawn from (parameters, key) inside the reset.

`ProcMaps` holds the parameters (frozen and hashable: it sits in the static `EnvConfig`);
`draw_layout` draws one layout as pure JAX with a fixed amount of compute (no data-dependent
loop or branch, so it lowers for GPUs as it does for the CPU); `generate` is its host helper
for tools and docs. The named generators of the catalogue are `[generators.NAME]` tables of
`envs/maps.toml`.

How a layout is drawn (10 x 10 reference world, scaled to `limit_x` x `limit_y` like a
`MapSpec`; rules §6.1):

1. The box count k is uniform over [count_lo, count_hi]; with a symmetry the boxes come in
   pairs (a box and its image), k / 2 pairs.
2. Each box (each pair's first box) gets `tries` candidates: width and height uniform over
   the multiples of QUANTUM (1/64) in their ranges, the lower-left corner uniform over the
   multiples of QUANTUM that keep the box inside the world. It takes the first candidate
   that stays clear of both start regions enlarged by `margin` (with a symmetry, its image
   must stay clear too); a box without such a candidate is left out.
3. Reachability: on a GRID x GRID grid of cells, a cell is free when no box's interior meets
   it. Team 1's start region must be reached from team 0's by at most FLOOD_STEPS moves
   between edge-adjacent free cells (from the cells that meet one region to a cell that meets
   the other). While it is not, the box (pair) drawn last is removed. A free path of cells is
   a path of the world that enters no box, so no team is ever sealed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gigastep._util.checks import closest, float_tuple
from gigastep._util.resources import read_catalog_toml
from gigastep.game import random as grandom
from gigastep.game.maps import MapSpec

__all__ = [
    "CELL",
    "FLOOD_STEPS",
    "GRID",
    "MAX_SEED",
    "QUANTUM",
    "SYMMETRIES",
    "Layout",
    "ProcMaps",
    "builtin_generators",
    "draw_layout",
    "generate",
    "level_key",
    "generator_names",
    "mirror",
]

Box4 = tuple[float, float, float, float]
Pair = tuple[float, float]

WORLD = 10.0
"""Side of the reference world the parameters are given in."""
GRID = 20
"""Cells per axis of the reachability grid over the reference world."""
CELL = WORLD / GRID
"""Side of a reachability cell (0.5); the smallest start `margin`."""
FLOOD_STEPS = 100
"""Most moves between adjacent free cells from team 0's region to team 1's."""
QUANTUM = 1.0 / 64.0
"""Step of box sizes and corners: exact in float32, so is a corner's mirror image."""
STEPS = round(WORLD / QUANTUM)  # steps across the world
_UNROLL = 4  # flood steps per loop iteration (FLOOD_STEPS is a multiple of it)
MAX_SEED = 2**31 - 1
"""The largest level seed bound (seeds are drawn as int32)."""
SYMMETRIES = ("none", "point", "mirror_x", "mirror_y")
"""`none`; `point`: (x, y) -> (10 - x, 10 - y); `mirror_x`: x -> 10 - x; `mirror_y`: y -> 10 - y."""


@dataclass(frozen=True)
class ProcMaps:
    """Parameters of a procedural obstacle map generator (10 x 10 reference coordinates).

    Set as `EnvConfig.map_generator` (or by name: `map_set="procgen_dense"`); every reset then
    draws a new layout (module doc, rules §6.1). Start regions, altitude and heading ranges
    mean what they mean in `MapSpec`.
    """

    name: str = "procgen"
    slots: int = 8  # box slots B of every layout (the padded shape)
    count: tuple[int, int] = (2, 6)  # boxes drawn, uniform in [lo, hi] (even with a symmetry)
    box_width: Pair = (0.5, 2.0)  # width range along x, [lo, hi]
    box_height: Pair = (0.5, 2.0)  # height range along y, [lo, hi]
    symmetry: str = "none"  # one of SYMMETRIES
    start_team0: Box4 = (1.0, 1.0, 4.0, 9.0)  # start region of team 0
    start_team1: Box4 = (6.0, 1.0, 9.0, 9.0)  # start region of team 1
    margin: float = 0.5  # clearance between boxes and the start regions (>= CELL)
    tries: int = 8  # candidate positions per box
    height: Pair = (0.0, 0.0)  # start altitude range [lo, hi)
    heading_team0: Pair = (0.0, 0.0)  # start heading range of team 0, radians
    heading_team1: Pair = (math.pi, math.pi)  # start heading range of team 1, radians
    # Level seeds [lo, hi): each reset draws a seed s uniformly in the range and plays the
    # layout `generate(self, s)` (a finite set of levels, as in Procgen). None: every reset
    # draws a fresh layout from its own key.
    seeds: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        where = f"map generator {self.name!r}"
        if self.seeds is not None:
            seeds = self.seeds
            if (
                not isinstance(seeds, (tuple, list))
                or len(seeds) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in seeds)
            ):
                raise TypeError(f"{where}: seeds must be two integers [lo, hi), got {seeds!r}")
            if not 0 <= seeds[0] < seeds[1] <= MAX_SEED:
                raise ValueError(
                    f"{where}: seeds {list(seeds)} must satisfy 0 <= lo < hi <= {MAX_SEED}"
                )
            object.__setattr__(self, "seeds", (int(seeds[0]), int(seeds[1])))
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"a map generator's name must be a non-empty string, got {self.name!r}")
        for field, low, high in (("slots", 1, 64), ("tries", 1, 64)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{where}: {field} must be an integer, got {value!r}")
            if not low <= value <= high:
                raise ValueError(f"{where}: {field} must be in [{low}, {high}], got {value}")
        count = tuple(self.count)
        if len(count) != 2 or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in count
        ):
            raise TypeError(f"{where}: count must be two integers (lo, hi), got {self.count!r}")
        object.__setattr__(self, "count", count)
        if not 0 <= count[0] <= count[1] <= self.slots:
            raise ValueError(
                f"{where}: count {count} must satisfy 0 <= lo <= hi <= slots ({self.slots})"
            )
        if self.symmetry not in SYMMETRIES:
            raise ValueError(
                f"{where}: symmetry must be one of {SYMMETRIES}, got {self.symmetry!r} "
                f"(closest: {closest(str(self.symmetry), SYMMETRIES, 1)[0]!r})"
            )
        if self.symmetry != "none" and (count[0] % 2 or count[1] % 2):
            raise ValueError(
                f"{where}: with symmetry {self.symmetry!r} boxes come in pairs, so count "
                f"{count} must hold even numbers"
            )
        for field in ("box_width", "box_height"):
            lo, hi = float_tuple(getattr(self, field), 2, f"{where}: {field}")
            if not (0.0 < lo <= hi <= WORLD):
                raise ValueError(
                    f"{where}: {field} ({lo:g}, {hi:g}) must satisfy 0 < lo <= hi <= {WORLD:g}"
                )
            if _steps((lo, hi))[0] > _steps((lo, hi))[1]:
                raise ValueError(
                    f"{where}: {field} ({lo:g}, {hi:g}) holds no multiple of {QUANTUM:g} (box "
                    f"sizes are drawn in steps of {QUANTUM:g}); widen the range"
                )
            object.__setattr__(self, field, (lo, hi))
        margin = self.margin
        if isinstance(margin, bool) or not isinstance(margin, (int, float)):
            raise TypeError(f"{where}: margin must be a number, got {margin!r}")
        if not CELL <= margin <= WORLD:
            raise ValueError(
                f"{where}: margin must be in [{CELL:g}, {WORLD:g}] (at least a reachability "
                f"cell, so that every cell meeting a start region is free), got {margin!r}"
            )
        object.__setattr__(self, "margin", float(margin))
        # the start regions, altitude and headings are validated as a MapSpec's
        try:
            spec = self.start_map()
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None
        for field in ("start_team0", "start_team1", "height", "heading_team0", "heading_team1"):
            object.__setattr__(self, field, getattr(spec, field))

    @property
    def primaries(self) -> int:
        """Boxes drawn independently: every slot, or one per pair with a symmetry."""
        return self.slots if self.symmetry == "none" else self.slots // 2

    def start_map(self) -> MapSpec:
        """A `MapSpec` without boxes holding this generator's start regions, altitude and
        headings: the one map of a config with this generator."""
        return MapSpec(
            name=self.name,
            boxes=(),
            start_team0=self.start_team0,
            start_team1=self.start_team1,
            height=self.height,
            heading_team0=self.heading_team0,
            heading_team1=self.heading_team1,
        )


class Layout(NamedTuple):
    """One drawn layout in reference coordinates (B = `slots`).

    Slots [0, P) hold the independently drawn boxes; with a symmetry, slot P + i holds the
    image of slot i (P = slots // 2).
    """

    boxes: jax.Array  # (B, 4) float32 [x1, y1, x2, y2]; zero where not valid
    box_valid: jax.Array  # (B,) bool, the boxes of the map
    drawn: jax.Array  # (B,) bool, slots given a box by the count draw
    placed: jax.Array  # (B,) bool, drawn and placed clear of the start regions


def mirror(boxes: jax.Array, symmetry: str) -> jax.Array:
    """(..., 4) the images of boxes under `symmetry` (corners re-ordered so x1 <= x2)."""
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    if symmetry in ("point", "mirror_x"):
        x1, x2 = WORLD - x2, WORLD - x1
    if symmetry in ("point", "mirror_y"):
        y1, y2 = WORLD - y2, WORLD - y1
    return jnp.stack([x1, y1, x2, y2], -1)


def _overlaps(boxes: jax.Array, region: np.ndarray) -> jax.Array:
    """(...,) bool: a box's interior meets the closed `region`."""
    return (
        (boxes[..., 0] < region[2])
        & (boxes[..., 2] > region[0])
        & (boxes[..., 1] < region[3])
        & (boxes[..., 3] > region[1])
    )


def _cells_meeting(region: tuple[float, ...]) -> np.ndarray:
    """(GRID, GRID) bool: the cells that meet the closed `region`."""
    lo = np.arange(GRID) * CELL
    hi = lo + CELL
    in_x = (lo <= region[2]) & (hi >= region[0])
    in_y = (lo <= region[3]) & (hi >= region[1])
    return in_x[:, None] & in_y[None, :]


def _free_rows(boxes: jax.Array, valid: jax.Array) -> jax.Array:
    """(R, GRID) uint32: bit y of row x is set when no box of the variant's `valid` (R, B)
    has an interior that meets cell (x, y)."""
    lo = jnp.asarray(np.arange(GRID) * CELL, jnp.float32)
    hi = jnp.asarray(np.arange(1, GRID + 1) * CELL, jnp.float32)
    in_x = (boxes[:, 0, None] < hi) & (boxes[:, 2, None] > lo)  # (B, GRID)
    in_y = (boxes[:, 1, None] < hi) & (boxes[:, 3, None] > lo)
    f32 = jnp.float32
    # how many boxes meet each cell: small integer counts, exact in float32
    hits = jnp.einsum("rb,bx,by->rxy", valid.astype(f32), in_x.astype(f32), in_y.astype(f32))
    return _pack(hits == 0)


def _pack(cells: jax.Array | np.ndarray) -> jax.Array:
    """(..., GRID) uint32 from (..., GRID, GRID) bool: bit y of word x is cell (x, y)."""
    bits = jnp.asarray(1 << np.arange(GRID, dtype=np.uint32))
    return jnp.sum(jnp.where(jnp.asarray(cells), bits, jnp.uint32(0)), axis=-1, dtype=jnp.uint32)


def _dilate(reach: jax.Array) -> jax.Array:
    """(..., GRID) uint32 rows: the cells of `reach` and their four edge neighbours (bits
    shifted past GRID are cleared by the free mask that follows)."""
    zero = jnp.zeros_like(reach[..., :1])
    below = jnp.concatenate([zero, reach[..., :-1]], axis=-1)  # row x - 1, moved to x
    above = jnp.concatenate([reach[..., 1:], zero], axis=-1)  # row x + 1, moved to x
    return reach | (reach << 1) | (reach >> 1) | below | above


def _reaches(params: ProcMaps, free: jax.Array) -> jax.Array:
    """(R,) bool: team 1's cells are reached from team 0's within FLOOD_STEPS moves on the
    free cells `free` (R, GRID) (packed rows)."""
    source = _pack(_cells_meeting(params.start_team0))
    target = _pack(_cells_meeting(params.start_team1))

    def steps(_: int, reach: jax.Array) -> jax.Array:
        for _ in range(_UNROLL):
            reach = _dilate(reach) & free
        return reach

    reach = jax.lax.fori_loop(0, FLOOD_STEPS // _UNROLL, steps, source & free)
    return jnp.any((reach & target) != 0, axis=-1)


def _with_images(params: ProcMaps, primary: jax.Array) -> jax.Array:
    """(B, ...) the slots' values from the primaries' (P, ...): the primaries, their images
    (a symmetry), and zero padding to B."""
    if params.symmetry == "none":
        return primary
    if primary.ndim == 2:  # boxes
        both = jnp.concatenate([primary, mirror(primary, params.symmetry)])
    else:
        both = jnp.concatenate([primary, primary])
    pad = params.slots - both.shape[0]
    return jnp.pad(both, [(0, pad)] + [(0, 0)] * (both.ndim - 1))


def _steps(bounds: Pair) -> tuple[int, int]:
    """The whole QUANTUM steps (lo, hi) inside the range `bounds`."""
    return math.ceil(bounds[0] / QUANTUM - 1e-9), math.floor(bounds[1] / QUANTUM + 1e-9)


def _pick(u: jax.Array, lo: int, n: int | jax.Array) -> jax.Array:
    """int32 lo + floor(u * n): uniform over the n integers from lo, u uniform in [0, 1)."""
    n = jnp.asarray(n, jnp.int32)
    return lo + jnp.minimum(jnp.floor(u * n.astype(jnp.float32)).astype(jnp.int32), n - 1)


def draw_layout(params: ProcMaps, key: jax.Array) -> Layout:
    """One layout of `params` drawn from `key` (module doc); pure, jit- and vmap-able.

    Every number comes from one `gigastep.game.random.uniform` draw of 1 + 4 P tries
    uniforms, so the layout is a pure function of (params, key) on every platform.
    """
    p, t = params.primaries, params.tries
    u = grandom.uniform(key, (1 + 4 * p * t,))
    pair = 1 if params.symmetry == "none" else 2
    lo, hi = params.count[0] // pair, params.count[1] // pair
    k = _pick(u[0], lo, hi - lo + 1)
    drawn = jnp.arange(p) < k  # (P,)

    # Sizes and corners in whole steps of QUANTUM: each is one product of a uniform and an
    # integer, floored, so no compiler can fuse a multiply-add into it and round differently,
    # and every corner is exact in float32.
    c = u[1:].reshape(p, t, 4)
    (w_lo, w_hi), (h_lo, h_hi) = _steps(params.box_width), _steps(params.box_height)
    w = _pick(c[..., 2], w_lo, w_hi - w_lo + 1)
    h = _pick(c[..., 3], h_lo, h_hi - h_lo + 1)
    x1 = _pick(c[..., 0], 0, STEPS - w + 1)
    y1 = _pick(c[..., 1], 0, STEPS - h + 1)
    cand = jnp.stack([x1, y1, x1 + w, y1 + h], -1).astype(jnp.float32) * np.float32(QUANTUM)

    m = params.margin
    regions = [
        np.asarray(r) + np.asarray([-m, -m, m, m]) for r in (params.start_team0, params.start_team1)
    ]
    shapes = [cand] if params.symmetry == "none" else [cand, mirror(cand, params.symmetry)]
    ok = jnp.ones((p, t), bool)
    for b in shapes:
        for region in regions:
            ok &= ~_overlaps(b, region)
    first = jnp.argmax(ok, axis=1)
    primary = jnp.take_along_axis(cand, first[:, None, None], axis=1)[:, 0]  # (P, 4)
    placed = drawn & jnp.any(ok, axis=1)

    # Removing the last r placed boxes, for every r at once: keep the fewest removals whose
    # layout connects the regions (r = all placed leaves no box, which always does).
    n_placed = jnp.sum(placed)
    rank = jnp.cumsum(placed) - 1  # (P,) the order of the placed boxes
    removals = jnp.arange(p + 1)[:, None]  # (P + 1, 1)
    keep = placed[None, :] & (rank[None, :] < n_placed - removals)  # (P + 1, P)
    slots_boxes = _with_images(params, primary)
    free = _free_rows(slots_boxes, jax.vmap(partial(_with_images, params))(keep))
    reached = _reaches(params, free) | (removals[:, 0] >= n_placed)
    valid_p = keep[jnp.argmax(reached)]

    box_valid = _with_images(params, valid_p)
    return Layout(
        boxes=jnp.where(box_valid[:, None], slots_boxes, 0.0).astype(jnp.float32),
        box_valid=box_valid,
        drawn=_with_images(params, drawn),
        placed=_with_images(params, placed),
    )


@partial(jax.jit, static_argnums=0)
def _draw_jit(params: ProcMaps, key: jax.Array) -> Layout:
    return draw_layout(params, key)


def level_key(params: ProcMaps, key: jax.Array) -> jax.Array:
    """The key a reset draws its layout from, given the reset's map key `key`: `key` itself,
    or with `params.seeds`, `PRNGKey(s)` for a level seed s drawn uniformly in [lo, hi) from
    it, so that the layout is `generate(params, s)`."""
    if params.seeds is None:
        return key
    lo, hi = params.seeds
    seed = jax.random.randint(key, (), lo, hi, dtype=jnp.int32)
    return jax.random.PRNGKey(seed)


def generate(params: ProcMaps, seed: int) -> np.ndarray:
    """(k, 4) float32 numpy: the boxes of the layout that `draw_layout` draws from
    `jax.random.PRNGKey(seed)`, in reference coordinates (the valid slots, in slot order)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"generate: seed must be an integer, got {seed!r}")
    if not isinstance(params, ProcMaps):
        raise TypeError(f"generate: params must be a gigastep ProcMaps, got {params!r}")
    layout = _draw_jit(params, jax.random.PRNGKey(int(seed)))
    return np.asarray(layout.boxes)[np.asarray(layout.box_valid)]


@cache
def builtin_generators() -> dict[str, ProcMaps]:
    """The named generators of `envs/maps.toml` (`[generators.NAME]`), by name."""
    table = read_catalog_toml("maps.toml").get("generators", {})
    out = {}
    for name, fields in table.items():
        fields = dict(fields)
        for key in ("count", "box_width", "box_height"):
            if key in fields:
                fields[key] = tuple(fields[key])
        out[name] = ProcMaps(name=name, **fields)
    return out


def generator_names() -> tuple[str, ...]:
    """The names of the built-in generators, in catalogue order."""
    return tuple(builtin_generators())
