"""Motion of the agents: controls -> new position, heading, speed and altitude (rules §3)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from gigastep.game.types import AgentState, EnvConfig
from gigastep.game.xla import stored

__all__ = [
    "ACTION_TABLE",
    "N_DISCRETE_ACTIONS",
    "cos_sin",
    "decode_actions",
    "heading_trig",
    "move",
    "wrap_angle",
]

N_DISCRETE_ACTIONS = 27

_LEVELS = (-1.0, 0.0, 1.0)
ACTION_TABLE = np.array(
    [[_LEVELS[(r // 3) % 3], _LEVELS[r % 3], _LEVELS[r // 9]] for r in range(N_DISCRETE_ACTIONS)],
    dtype=np.float32,
)
"""(27, 3) discrete action r -> (heading, dive, throttle); 13 is the no-op, 10/16 circle."""

_TWO_PI = np.float32(2.0 * math.pi)
_PI = np.float32(math.pi)


def wrap_angle(a: jax.Array) -> jax.Array:
    """Wrap angles into [-pi, pi) with a floor modulo (not C's truncated fmod)."""
    return a - _TWO_PI * jnp.floor((a + _PI) / _TWO_PI)


def decode_actions(config: EnvConfig, actions: ArrayLike) -> jax.Array:
    """Actions -> controls (n, 3) float32 in [-1, 1]: (heading, dive, throttle).

    Discrete actions (n,) int are clipped to 0..26 and looked up in `ACTION_TABLE`;
    continuous actions (n, 3) are clipped to [-1, 1], and NaN acts as 0.
    """
    if config.discrete_actions:
        idx = jnp.clip(actions, 0, N_DISCRETE_ACTIONS - 1)
        return jnp.asarray(ACTION_TABLE)[idx]
    controls = jnp.asarray(actions, jnp.float32)
    return jnp.clip(jnp.where(jnp.isnan(controls), 0.0, controls), -1.0, 1.0)


def move(config: EnvConfig, agents: AgentState, controls: jax.Array) -> AgentState:
    """Integrate one step of every agent's motion; dead agents keep their position.

    heading' = wrap(h + dt u_h c_h), v1 = v + dt u_t c_t thrust, v2 = v1 - dt drag v1^2,
    (x, y)' = (x, y) + dt v2 (cos h', sin h'), z' = clip(z + dt c_d u_d, 0, z_max),
    v' = sqrt(max(v2^2 + k g (z - z'), v_min^2)) (climbing costs speed, diving gains it).
    """
    dt = config.dt
    a = agents.alive.astype(jnp.float32)
    u_h, u_d, u_t = controls[:, 0], controls[:, 1], controls[:, 2]
    thrust = jnp.asarray(config.thrust, jnp.float32)
    heading = wrap_angle(agents.heading + (dt * config.heading_rate) * u_h * a)
    v1 = agents.v + (dt * config.throttle_rate) * u_t * a * thrust
    v2 = v1 - (dt * config.drag) * v1 * v1 * a
    step = dt * v2 * a
    z = jnp.clip(agents.z + (dt * config.dive_rate) * u_d * a, 0.0, config.z_max)
    exchange = config.dive_speed_exchange * config.gravity
    v = jnp.sqrt(jnp.maximum(v2 * v2 + exchange * (agents.z - z), config.min_speed**2))
    # Stored once (see `stored`): every per-pair computation of the step reads these. The
    # new headings first, then their cosine and sine (`heading_trig`, which the step's
    # geometry calls on the same headings: XLA merges the two), then the positions. In one
    # fusion with x and y, XLA computed the trigonometry again for each field that needed it,
    # and the geometry a second time; in this order it is computed once, with the same values
    # bit for bit.
    heading, step, z, v = (stored(a) for a in (heading, step, z, v))
    cos_h, sin_h = heading_trig(heading)
    x, y = stored(agents.x + step * cos_h), stored(agents.y + step * sin_h)
    return agents.replace(x=x, y=y, z=z, v=v, heading=heading)


def heading_trig(heading: jax.Array) -> jax.Array:
    """(2, n) float32: the cosine and sine of `heading` (`cos_sin`), stored once (see `stored`).

    `move`, `interactions.geometry` and the tails of the RGB images all take them from here,
    so within a step these are the same expression of the same headings, which XLA computes
    once (`tests/tools/test_hlo_guard.py` checks that the step rounds the headings to
    quarter turns once)."""
    return stored(cos_sin(heading))


# Cody-Waite reduction: pi/2 split in three float32 parts. The first two have few significant
# bits (8 and 11), so j * part is exact for |j| < 2^13, i.e. |x| up to about 12,800.
_HALF_PI_PARTS = (
    np.float32(1.5703125),
    np.float32(4.837512969970703125e-4),
    np.float32(7.549789948768648e-8),
)
# Minimax polynomials of sin and cos on [-pi/4, pi/4] (Cephes' sinf and cosf coefficients).
_SIN = (np.float32(-1.9515295891e-4), np.float32(8.3321608736e-3), np.float32(-1.6666654611e-1))
_COS = (
    np.float32(2.443315711809948e-5),
    np.float32(-1.388731625493765e-3),
    np.float32(4.166664568298827e-2),
)


def cos_sin(x: jax.Array) -> jax.Array:
    """(2, *x.shape) float32: cos(x) and sin(x) from float32 arithmetic only.

    Why not `jnp.cos`/`jnp.sin`: XLA on the CPU calls libm once per element for them, as
    scalar calls, in a fusion that it does not split across threads. This polynomial is
    plain arithmetic, which XLA vectorises and splits.

    Accuracy against float64: at most 1.5 ulp for |x| <= pi, which covers the wrapped headings
    of the game. The absolute error is at most 8e-8 for |x| <= 8192. Beyond that, where
    float32 spacing alone exceeds 1e-3 rad, the result is finite and within [-1, 1] but no
    longer meaningful. A non-finite x gives NaN, as `jnp.cos` does. cos is even and sin is odd
    bit for bit, because the rounding and the reduction are symmetric: cos_sin(-x) is
    (cos, -sin) of cos_sin(x). The one exception is sin(-0.0), which is +0.0.
    """
    x = jnp.asarray(x, jnp.float32)
    j = jnp.round(x * np.float32(2.0 / math.pi))  # the nearest quarter turn, half to even
    c1, c2, c3 = _HALF_PI_PARTS
    r = ((x - j * c1) - j * c2) - j * c3  # in [-pi/4, pi/4] up to rounding, for |x| <= 8192
    # Larger |x|: j * c2 is no longer exact and r could leave the polynomials' range (and
    # overflow in r * r); the clip keeps the result finite. A no-op below 8192: pi/4 < 0.79.
    r = jnp.clip(r, np.float32(-0.79), np.float32(0.79))
    z = r * r
    s = ((_SIN[0] * z + _SIN[1]) * z + _SIN[2]) * z * r + r
    c = ((_COS[0] * z + _COS[1]) * z + _COS[2]) * z * z - np.float32(0.5) * z + np.float32(1.0)
    # j mod 4 (two's complement: -1 & 3 = 3). A j beyond int32 (|x| > 3e9) converts to some
    # int32, and the mask keeps it a valid case.
    quarter = j.astype(jnp.int32) & 3
    # Rotating by j quarter turns: (cos, sin) of r becomes (c, s), (-s, c), (-c, -s), (s, -c).
    # (`select_n` on the index: `jnp.select` finds the case with a reduction, and XLA then
    # computed the reduction of the angle once for the index and once for the values.)
    cos = jax.lax.select_n(quarter, c, -s, -c, s)
    sin = jax.lax.select_n(quarter, s, c, -s, -c)
    return jnp.stack([cos, sin])
