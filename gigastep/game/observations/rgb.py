"""RGB observations: one ego-centred image per agent, and the team-coloured global view.

Every image is indexed ``img[px, py, c]`` with shape ``(res_x, res_y, 3)`` uint8, channels
(R, G, B): the first axis is world x. An agent at (x, y, z) sits at pixel
``px = round(x * (res_x / limit_x))``, ``py = round(y * (res_y / limit_y))`` (round half to
even, in float32; each scale is one float32 constant, so jit and eager agree bit for bit) and
has altitude shade ``pz = round(z * (255 / z_max))``.

Ego image of agent e (rules §5.3 with the §15 decisions), drawn on the prerendered map:

1. Border on three edges, ``px = 0``, ``px = res_x - 1`` and ``py = 0``: white, or red
   (R = 255, G and B show the map) on a step in which the ego took damage.
2. Waypoint (``enable_waypoints`` and active only): the square of
   ``max(trunc(size * res / limit), 1)`` pixels per axis from
   ``(round(W_x1 * res_x / limit_x), round(W_y1 * res_y / limit_y))`` is set to (127, 0, 127).
   Nothing is drawn while it is inactive.
3. Health bar on the fourth edge, ``py = res_y - 1``: green (0, 255, 0) for
   ``px < trunc(health * (res_x / max_health))``, white from there on.
4. Tails, for k = 1..4 with intensity ``I_k = 255 - 51 k``: the point k pixels behind each agent
   along its heading (clipped into the image per axis, then truncated) gets ``I_k`` added,
   saturating at 255, in B for seen teammates and in R for seen enemies; then all channels of the
   ego's own k-th tail point are raised to at least ``I_k`` (a white ego tail).
5. Agents: the ego's centre pixel is set to black, then every sprite pixel is raised (max) to
   the agent's colour: the ego ``(255 - pz, 255, 255 - pz)``; another agent
   ``(255 [enemy] s, pz s, 255 [teammate] s)`` with ``s`` = the ego sees it, so unseen agents
   are not drawn. Sprite bits: 1 the centre, 2 the four arms, 4 the four diagonals.

A dead ego's image is all zeros. The global view has no ego: all four edges white, the
waypoint, the tails of alive agents (team 1 red, team 0 blue, saturating add) and alive agents
in ``(255 [team 1], pz, 255 [team 0])``; dead agents are invisible. Pixels that fall outside
the image are dropped, never wrapped to the opposite edge.

How it is drawn fast (XLA on CPU turns any fusion more complex than a copy into slow scalar
loops): each image starts as a copy of a per-map template with the border already drawn, fused
with the health bar; everything else touches a few pixels only, by scatters. Those pixels are
at the same positions in every ego's image, so the waypoint, the ego centres and the sprites
are each one scatter whose update window spans all the images at once (a "set", a "set" to
black and a "max"). The tails are drawn as the rules say, level by level: one scatter of
single pixels (image, x, y, channel) per level whose update adds the level's intensity,
saturating (pixels that a tail does not colour are dropped), then a "max" of the egos' own
tail points. Saturating adds of non-negative values commute, so coinciding tails need no
special case (computing every tail pixel's final value from the points' pairwise equality
and "set"-ting it costs far more than the scatters).
The small per-agent values that those scatters' indices and updates read (pixel positions,
shades, the seen mask, the tail channels) are `stored` once, or XLA recomputes them inside
each index computation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.game.dynamics import heading_trig
from gigastep.game.types import AgentState, EnvConfig, EpisodeState
from gigastep.game.xla import stored, varying_like

__all__ = [
    "TAIL_INTENSITY",
    "global_view",
    "native_rgb_observations",
    "native_rgb_supported",
    "pixel_coords",
    "rgb_observations",
    "sprite_offsets",
]

TAIL_INTENSITY = (204, 153, 102, 51)
"""Intensity ``255 - 51 k`` of the tail point k = 1..4 pixels behind an agent."""

WAYPOINT_RGB = (127, 0, 127)

NO_TAIL = 3
"""The channel index of a tail not drawn: beyond the 3 channels, so its scatter drops it."""

_Box: TypeAlias = tuple[jax.Array, jax.Array, int, int, jax.Array]
"""(x0, y0, nx, ny, active) of the waypoint square, `_waypoint_box`."""

_SPRITE_BITS = (
    (1, ((0, 0),)),
    (2, ((1, 0), (-1, 0), (0, 1), (0, -1))),
    (4, ((1, 1), (1, -1), (-1, 1), (-1, -1))),
)


def sprite_offsets(sprite: int) -> tuple[tuple[int, int], ...]:
    """Pixel offsets (dx, dy) lit by a sprite bit mask (1 centre, 2 arms, 4 diagonals)."""
    return tuple(off for bit, offs in _SPRITE_BITS if sprite & bit for off in offs)


def _scale(res: int, limit: float) -> np.float32:
    return np.float32(res / limit)


def pixel_coords(config: EnvConfig, agents: AgentState) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Pixel position and altitude shade of every agent.

    Returns:
        px, py: (n,) int32, clipped to [-2, res + 1] (every sprite pixel of a clipped position
            is outside the image, as it would have been unclipped).
        pz: (n,) int32 in [0, 255].
    """
    rx, ry = config.resolution
    fx = jnp.clip(agents.x * _scale(rx, config.limit_x), -2.0, rx + 1.0)
    fy = jnp.clip(agents.y * _scale(ry, config.limit_y), -2.0, ry + 1.0)
    pz = jnp.clip(jnp.round(agents.z * _scale(255, config.z_max)), 0.0, 255.0)
    xy = stored(jnp.round(jnp.stack([fx, fy])).astype(jnp.int32))
    return xy[0], xy[1], stored(pz.astype(jnp.int32))


def _tail_points(
    config: EnvConfig, px: jax.Array, py: jax.Array, heading: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(4, n) int32 x and y of the tail points: entry [k, j] is agent j's (k+1)-th."""
    rx, ry = config.resolution
    k = jnp.arange(1, 5, dtype=jnp.float32)[:, None]
    cos_h, sin_h = heading_trig(heading)  # the step's own, computed once (XLA merges them)
    tx = px.astype(jnp.float32) - k * cos_h
    ty = py.astype(jnp.float32) - k * sin_h
    tx = jnp.clip(tx, 0, rx - 1).astype(jnp.int32)
    ty = jnp.clip(ty, 0, ry - 1).astype(jnp.int32)
    return stored(tx), stored(ty)


def _sprite_points(
    config: EnvConfig, px: jax.Array, py: jax.Array
) -> tuple[jax.Array, jax.Array, np.ndarray]:
    """Every lit sprite pixel: x, y (m,) int32 (pixels outside the image at the drop sentinel)
    and owner (m,), the static index of the agent each belongs to."""
    owners: list[int] = []
    offsets: list[tuple[int, int]] = []
    for j, sprite in enumerate(config.sprites):
        for off in sprite_offsets(sprite):
            owners.append(j)
            offsets.append(off)
    owner = np.asarray(owners, np.int32).reshape(-1)
    dxy = np.asarray(offsets, np.int32).reshape(-1, 2)
    sx, sy = px[owner] + dxy[:, 0], py[owner] + dxy[:, 1]
    return (*_drop_outside(config, sx, sy), owner)


def _drop_outside(
    config: EnvConfig, x: jax.Array, y: jax.Array, keep: bool | jax.Array = True
) -> tuple[jax.Array, jax.Array]:
    """Move pixels outside the image (or not kept) to (res_x, res_y), which a "drop" scatter
    ignores (a negative index would otherwise wrap to the opposite edge)."""
    rx, ry = config.resolution
    inside = keep & (x >= 0) & (x < rx) & (y >= 0) & (y < ry)
    return jnp.where(inside, x, rx), jnp.where(inside, y, ry)


def _waypoint_box(config: EnvConfig, episode: EpisodeState) -> _Box:
    """(x0, y0, nx, ny, active): the waypoint square [x0, x0 + nx) x [y0, y0 + ny), where
    n = max(trunc(size * res / limit), 1) (static) and x0 = round(W_x1 * res_x / limit_x)."""
    rx, ry = config.resolution
    nx = max(int(config.waypoint_size * rx / config.limit_x), 1)
    ny = max(int(config.waypoint_size * ry / config.limit_y), 1)
    x0 = jnp.round(episode.waypoint[0] * _scale(rx, config.limit_x)).astype(jnp.int32)
    y0 = jnp.round(episode.waypoint[1] * _scale(ry, config.limit_y)).astype(jnp.int32)
    return x0, y0, nx, ny, episode.waypoint_time > 0


def _on_waypoint(config: EnvConfig, box: _Box, x: jax.Array, y: jax.Array, bar: bool) -> jax.Array:
    """Whether pixels (x, y) are drawn by the waypoint (with `bar`, the bar edge is not)."""
    x0, y0, nx, ny, active = box
    on = active & (x >= x0) & (x < x0 + nx) & (y >= y0) & (y < y0 + ny)
    return on & (y != config.resolution_y - 1) if bar else on


def _waypoint_pixels(config: EnvConfig, box: _Box, bar: bool) -> tuple[jax.Array, jax.Array]:
    """x, y (nx ny,) of the drawn waypoint pixels, the others at the drop sentinel."""
    x0, y0, nx, ny, _ = box
    x = x0 + np.repeat(np.arange(nx, dtype=np.int32), ny)
    y = y0 + np.tile(np.arange(ny, dtype=np.int32), nx)
    return _drop_outside(config, x, y, _on_waypoint(config, box, x, y, bar))


def _templates(config: EnvConfig, background: jax.Array, ego: bool) -> jax.Array:
    """Per-map images with the border drawn: (K, 2, res_x * res_y * 3) uint8 for egos
    (undamaged: three white edges; damaged: the same edges red), (K, 1, ...) for the global
    view (four white edges)."""
    rx, ry = config.resolution
    k = background.shape[0]
    if ego:
        white = background.at[:, :, 0].set(255).at[:, 0].set(255).at[:, rx - 1].set(255)
        red = background.at[:, :, 0, 0].set(255).at[:, 0, :, 0].set(255)
        red = red.at[:, rx - 1, :, 0].set(255)
        return jnp.stack([white, red], 1).reshape(k, 2, -1)
    white = background.at[:, :, 0].set(255).at[:, :, ry - 1].set(255)
    white = white.at[:, 0].set(255).at[:, rx - 1].set(255)
    return white.reshape(k, 1, -1)


class _Viewers(NamedTuple):
    """What differs between the images drawn at once (the egos, or the single global view).

    V = number of images. Colours are int32 in [0, 255].
    """

    visible: jax.Array  # (V,) bool; an invisible image is all zeros (a dead ego)
    template: jax.Array  # (V,) int32; border template (0 white, 1 red)
    bar_cut: jax.Array | None  # (V,) int32 health-bar cut; None: no bar (the global view)
    tail_channel: jax.Array  # (V, n) int32; the one channel agent j's tails add to (0 R,
    # 2 B), or NO_TAIL: none (its tails are not drawn in that image)
    colour: jax.Array  # (V, n, 3) int32; agent j's sprite colour
    ego: bool  # image v belongs to agent v: white ego tail, black centre


def _draw(
    config: EnvConfig,
    background: jax.Array,
    episode: EpisodeState,
    px: jax.Array,
    py: jax.Array,
    heading: jax.Array,
    viewers: _Viewers,
) -> jax.Array:
    """Draw V images: (V, res_x, res_y, 3) uint8 (rules §5.3 / §5.4 with §15)."""
    rx, ry = config.resolution
    v = viewers.visible.shape[0]
    visible = viewers.visible.astype(jnp.uint8)
    templates = _templates(config, background, viewers.ego)  # (K, T, rx ry 3)
    map_idx = 0 if background.shape[0] == 1 else episode.map_idx
    img = (templates[map_idx, viewers.template] * visible[:, None]).reshape(v, rx, ry, 3)
    if viewers.bar_cut is not None:
        img = img.at[:, :, ry - 1, :].set(_bar(viewers, jnp.arange(rx)) * visible[:, None, None])

    def draw(
        img: jax.Array, x: jax.Array, y: jax.Array, values: jax.Array, combine: str = "set"
    ) -> jax.Array:
        values = (values * visible[:, None, None]).astype(jnp.uint8)
        return getattr(img.at[:, x, y, :], combine)(values, mode="drop")

    if config.enable_waypoints:
        box = _waypoint_box(config, episode)
        wx, wy = _waypoint_pixels(config, box, bar=viewers.bar_cut is not None)
        img = draw(img, wx, wy, jnp.broadcast_to(jnp.asarray(WAYPOINT_RGB), (v, wx.size, 3)))

    tx, ty = _tail_points(config, px, py, heading)
    img = _draw_tails(img, tx, ty, viewers)

    if viewers.ego:
        cx, cy = _drop_outside(config, px, py)
        img = img.at[jnp.arange(v), cx, cy, :].set(jnp.uint8(0), mode="drop")
    sx, sy, owner = _sprite_points(config, px, py)
    return draw(img, sx, sy, viewers.colour[:, owner, :], "max")


def _draw_tails(img: jax.Array, tx: jax.Array, ty: jax.Array, viewers: _Viewers) -> jax.Array:
    """The tail phase (rules §5.3 step 5), level by level: for k = 1..4 the k-th tail point of
    every agent adds I_k, saturating at 255, to the channels it colours in each image; then, in
    an ego image, the ego's own k-th tail point is raised to at least I_k in every channel.

    Each level is one scatter of single pixels (image, x, y, channel), one per agent and
    image (a tail colours one channel at most), whose update is the saturating add of a
    constant, min(p, 255 - I_k) + I_k; a tail not drawn in an image (channel NO_TAIL, or an
    invisible image) is dropped as out of bounds. Coinciding tails apply the add once each, and
    saturating adds of non-negative values commute, so their order does not matter.

    Args:
        img: (V, res_x, res_y, 3) uint8. tx, ty: (4, n) int32 tail points, inside the image.
    """
    v, n = viewers.tail_channel.shape
    channel = stored(jnp.where(viewers.visible[:, None], viewers.tail_channel, NO_TAIL))
    image = jnp.broadcast_to(jnp.arange(v)[:, None], (v, n))
    numbers = jax.lax.ScatterDimensionNumbers(
        update_window_dims=(),
        inserted_window_dims=(0, 1, 2, 3),
        scatter_dims_to_operand_dims=(0, 1, 2, 3),
    )
    for k, intensity in enumerate(TAIL_INTENSITY):
        x, y = (jnp.broadcast_to(t[k][None, :], (v, n)) for t in (tx, ty))
        at = jnp.stack([image, x, y, channel], -1)
        add = _add_saturating(intensity)
        img = jax.lax.scatter_apply(img, at, add, numbers, update_shape=(v, n), mode="drop")
        if viewers.ego:
            own = jnp.uint8(intensity) * viewers.visible.astype(jnp.uint8)
            img = img.at[jnp.arange(v), tx[k, :v], ty[k, :v], :].max(own[:, None], mode="drop")
    return img


def _add_saturating(amount: int) -> Callable[[jax.Array], jax.Array]:
    """uint8 p -> min(p + amount, 255), computed without overflow as min(p, 255 - amount) +
    amount."""
    headroom, added = np.uint8(255 - amount), np.uint8(amount)
    return lambda p: jnp.minimum(p, headroom) + added


def _bar(viewers: _Viewers, x: jax.Array) -> jax.Array:
    """(V, *x.shape, 3) uint8 health-bar colour at columns x: green below the cut, else white."""
    assert viewers.bar_cut is not None  # only views with a health bar draw one
    white = x[None] >= viewers.bar_cut.reshape((-1,) + (1,) * x.ndim)
    return jnp.where((jnp.arange(3) == 1) | white[..., None], jnp.uint8(255), jnp.uint8(0))


def rgb_observations(
    config: EnvConfig,
    background: jax.Array,
    agents: AgentState,
    episode: EpisodeState,
    seen: jax.Array,
    took_damage: jax.Array,
) -> jax.Array:
    """Ego images of every agent of one game (rules §5.3 with §15; see the module docstring).

    Args:
        config: the environment's config (static).
        background: (K, res_x, res_y, 3) uint8, `gigastep.game.arena.prerender(config)`.
        agents: the agents after the step.
        episode: gives the map index and the waypoint.
        seen: (n, n) bool, ``seen[e, i]`` = ego e sees agent i.
        took_damage: (n,) bool, the ego took positive damage this step (red border).
    Returns:
        (n, res_x, res_y, 3) uint8; all zeros for a dead ego.
    """
    n = config.n_agents
    team = np.asarray(config.teams)
    same = jnp.asarray(team[:, None] == team[None, :])  # (e, j)
    s = stored(seen.astype(bool).astype(jnp.int32))
    seen = s > 0
    px, py, pz = pixel_coords(config, agents)
    other = jnp.stack([255 * s * ~same, pz[None, :] * s, 255 * s * same], -1)
    ego = jnp.stack([255 - pz, jnp.full_like(pz, 255), 255 - pz], -1)
    viewers = _Viewers(
        visible=agents.alive.astype(bool),
        template=stored(took_damage.astype(jnp.int32)),
        bar_cut=stored(_bar_cut(config, agents)),
        tail_channel=jnp.where(seen, jnp.where(same, 2, 0), NO_TAIL),
        colour=jnp.where(jnp.eye(n, dtype=bool)[..., None], ego[:, None, :], other),
        ego=True,
    )
    return _draw(config, background, episode, px, py, agents.heading, viewers)


def _bar_cut(config: EnvConfig, agents: AgentState) -> jax.Array:
    """(n,) int32: the health bar is green for px < trunc(health * res_x / max_health)."""
    cut_scale = jnp.asarray(config.resolution_x / np.asarray(config.max_health), jnp.float32)
    return jnp.trunc(agents.health * cut_scale).astype(jnp.int32)


def native_rgb_supported(config: EnvConfig) -> bool:
    """Whether `native_rgb_observations` serves this config: JAX's default backend is the CPU
    and the kernels are built and loaded (on a GPU machine nothing is compiled or loaded)."""
    from gigastep.game import _native

    return jax.default_backend() == "cpu" and _native.load()


def native_rgb_observations(
    config: EnvConfig,
    background: jax.Array,
    agents: AgentState,
    episode: EpisodeState,
    seen: jax.Array,
    took_damage: jax.Array,
) -> jax.Array:
    """`rgb_observations` drawn by one CPU kernel call (FFI target ``gigastep_rgb_obs``,
    gigastep/game/_native/rgb_obs.cc): the same bytes on every state. The pixel positions,
    shades, tail points and bar cuts are computed here by the same JAX code; the kernel draws
    each image from its template while it is in the cache, where XLA draws the batch phase by
    phase (a pass over every image per phase). CPU only: callers pick it with
    `jax.lax.platform_dependent`.

    Raises:
        ValueError: an argument's shape does not fit the config (before any call).
        RuntimeError: the native kernels are switched off (``GIGASTEP_NATIVE=0``) or could
            not be built.
    """
    from gigastep.game import _native

    n, (rx, ry) = config.n_agents, config.resolution
    k = np.shape(background)[0] if np.ndim(background) == 4 else 0
    for name, value, shape in (
        ("background", background, (max(k, 1), rx, ry, 3)),
        ("seen", seen, (n, n)),
        ("took_damage", took_damage, (n,)),
        ("agents.alive", agents.alive, (n,)),
    ):
        if np.shape(value) != shape:
            raise ValueError(
                f"native_rgb_observations: {name} has shape {np.shape(value)}; expected "
                f"{shape} for {n} agents and {rx} x {ry} images"
            )
    if not _native.load():
        raise RuntimeError(
            "native_rgb_observations: the native CPU kernels are unavailable "
            f"({_native.status()['detail']}); use rgb_observations"
        )
    px, py, pz = pixel_coords(config, agents)
    tx, ty = _tail_points(config, px, py, agents.heading)
    if config.enable_waypoints:
        x0, y0, nx, ny, active = _waypoint_box(config, episode)
        waypoint = jnp.stack([x0, y0, active.astype(jnp.int32)])
    else:
        waypoint, nx, ny = jnp.zeros(3, jnp.int32), 1, 1
    templates = _templates(config, background, ego=True)
    map_idx = jnp.int32(0) if templates.shape[0] == 1 else episode.map_idx
    operands: tuple[Any, ...] = (
        templates,
        jnp.asarray(map_idx, jnp.int32),
        agents.alive.astype(bool),
        took_damage.astype(bool),
        _bar_cut(config, agents),
        waypoint,
        px,
        py,
        pz,
        jnp.stack([tx, ty]),
        seen.astype(bool),
    )
    call = jax.ffi.ffi_call(
        "gigastep_rgb_obs",
        jax.ShapeDtypeStruct((n, rx, ry, 3), jnp.uint8),
        # Operands that a vmap does not batch (the templates) get a batch axis of size 1,
        # which the kernel broadcasts, instead of a copy per game.
        vmap_method="expand_dims",
    )
    images = call(
        *operands,
        res_x=np.int64(rx),
        res_y=np.int64(ry),
        waypoint_nx=np.int64(nx),
        waypoint_ny=np.int64(ny),
        waypoints=bool(config.enable_waypoints),
        teams=np.asarray(config.teams, np.int64),
        sprites=np.asarray(config.sprites, np.int64),
    )
    return varying_like((agents, episode, seen, took_damage), images)


def global_view(
    config: EnvConfig, background: jax.Array, agents: AgentState, episode: EpisodeState
) -> jax.Array:
    """The team-coloured top view of one game, (res_x, res_y, 3) uint8 (rules §5.4 with §15).

    All four edges white, the waypoint if active, tails of alive agents (team 1 red, team 0
    blue, saturating add) and alive agents coloured ``(255 [team 1], pz, 255 [team 0])`` with
    max over their sprite pixels. Dead agents are invisible.
    """
    team = jnp.asarray(config.teams, jnp.int32)
    alive = agents.alive.astype(jnp.int32)
    px, py, pz = pixel_coords(config, agents)
    viewers = _Viewers(
        visible=jnp.ones((1,), bool),
        template=jnp.zeros((1,), jnp.int32),
        bar_cut=None,
        tail_channel=jnp.where(alive > 0, 2 - 2 * team, NO_TAIL)[None],
        colour=jnp.stack([255 * team, pz, 255 * (1 - team)], -1)[None] * alive[None, :, None],
        ego=False,
    )
    return _draw(config, background, episode, px, py, agents.heading, viewers)[0]
