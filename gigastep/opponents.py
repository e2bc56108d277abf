"""Scripted opponents as pure JAX policies, and the cooperative (versus-a-script) mode.

A policy is a pure function `policy(config, state, key) -> actions` that returns the actions of
ALL agents of one game, in the environment's action format (continuous float32 (n, 3) in
[-1, 1], or discrete int32 (n,) in 0..26); the caller keeps the rows of the team it scripts.
Policies read the full `EnvState` (they are scripts, not learners) and can be jitted and
vmapped like the environment.

Built-in policies (`get_policy(name)`):

- `random`: uniform actions (continuous: uniform in [-1, 1]^3; discrete: uniform in 0..26).
- `circle`: the constant action (heading +1, dive 0, throttle 0): every agent turns
  counter-clockwise at full rate; discrete action 16.
- `pursuit`: turn toward the target, climb or dive to its altitude, full throttle. The target
  is the nearest enemy the agent *sees*, and if it sees none, the nearest alive enemy.
  An agent e sees an alive enemy j when j is inside e's own deterministic detection zone:
  distance <= cone_depth * detection_range[e] and |bearing of j from e's heading| <
  cone_angle, or distance < very_close_depth (the detection rule of
  `gigastep.game.interactions.combat` without noise, with e as the observer). Distances are planar.
- `evade`: turn away from the nearest threatening enemy at full throttle, staying inside the
  map. An alive enemy j threatens e when e is inside j's detection zone (the rule above with j
  as the observer). Within `EVADE_WALL_MARGIN` x the world size of a map edge the agent is
  also pushed back toward the inside, growing linearly to twice the flee weight at the edge,
  so close to the edge the wall wins. With no threat and no wall near, it flies straight on.
  Obstacle boxes are ignored.

Heading and altitude use proportional control: the control is the error divided by what one
step at full rate achieves, clipped to [-1, 1]. Discrete actions are the `ACTION_TABLE` entry
whose (heading, dive, throttle) signs match the rounded continuous controls.

`gigastep.versus.VersusEnv` plays one team of a game with such a policy inside the step.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from gigastep.game.dynamics import N_DISCRETE_ACTIONS, wrap_angle
from gigastep.game.interactions import Geometry, geometry, in_cone
from gigastep.game.types import EnvConfig, EnvState, closest

__all__ = [
    "EVADE_WALL_MARGIN",
    "POLICIES",
    "Policy",
    "circle",
    "evade",
    "get_policy",
    "pursuit",
    "random",
    "to_discrete",
]

Policy = Callable[[EnvConfig, EnvState, jax.Array], jax.Array]
"""`policy(config, state, key) -> actions` of all n agents of one game."""

EVADE_WALL_MARGIN = 0.15
"""Fraction of the world size within which `evade` turns back from a map edge."""

# ------------------------------------------------------------------------------------------
# Action helpers
# ------------------------------------------------------------------------------------------


def to_discrete(controls: ArrayLike) -> jax.Array:
    """(n, 3) float controls -> (n,) int32 index of the `ACTION_TABLE` row with the same signs.

    Each control is rounded to -1, 0 or +1 (|c| <= 0.5 -> 0); the table row r has heading
    level (r // 3) % 3, dive level r % 3 and throttle level r // 9 (levels -1, 0, 1).
    """
    level = jnp.round(jnp.clip(controls, -1.0, 1.0)).astype(jnp.int32) + 1  # 0, 1, 2
    return 9 * level[:, 2] + 3 * level[:, 0] + level[:, 1]


def _emit(config: EnvConfig, controls: jax.Array) -> jax.Array:
    """Continuous controls (n, 3) in the config's action format."""
    controls = jnp.clip(controls.astype(jnp.float32), -1.0, 1.0)
    return to_discrete(controls) if config.discrete_actions else controls


def _heading_control(
    config: EnvConfig, heading: jax.Array, dx: jax.Array, dy: jax.Array
) -> jax.Array:
    """Turn toward direction (dx, dy): the heading error over one full-rate step, clipped."""
    error = wrap_angle(jnp.arctan2(dy, dx) - heading)
    return jnp.clip(error / np.float32(config.dt * config.heading_rate), -1.0, 1.0)


def _detection_zone(config: EnvConfig, state: EnvState) -> tuple[jax.Array, Geometry]:
    """zone[i, j]: i is inside j's deterministic detection zone (row target, column observer),
    and the (n, n) planar geometry it was computed from."""
    geo = geometry(state.agents)
    radius = config.cone_depth * np.asarray(config.detection_range, np.float64)
    within = geo.d2 <= jnp.asarray(radius**2, jnp.float32)[None, :]
    very_close = geo.d2 < np.float32(config.very_close_depth**2)
    return (within & in_cone(config.cone_angle, geo, state.agents.heading)) | very_close, geo


def _alive_enemies(config: EnvConfig, state: EnvState) -> jax.Array:
    """enemy[e, j]: j is an alive agent of the other team than e."""
    teams = np.asarray(config.teams)
    return jnp.asarray(teams[:, None] != teams[None, :]) & state.agents.alive[None, :]


# ------------------------------------------------------------------------------------------
# Policies
# ------------------------------------------------------------------------------------------


def random(config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
    """Uniform random actions."""
    n = config.n_agents
    if config.discrete_actions:
        return jax.random.randint(key, (n,), 0, N_DISCRETE_ACTIONS, jnp.int32)
    return jax.random.uniform(key, (n, 3), jnp.float32, -1.0, 1.0)


def circle(config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
    """Constant (heading +1, dive 0, throttle 0): every agent turns counter-clockwise."""
    controls = jnp.broadcast_to(jnp.asarray([1.0, 0.0, 0.0], jnp.float32), (config.n_agents, 3))
    return _emit(config, controls)


def pursuit(config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
    """Chase the nearest seen enemy (else the nearest alive one) at full throttle."""
    agents = state.agents
    zone, geo = _detection_zone(config, state)
    enemy = _alive_enemies(config, state)  # [e, j]
    seen = enemy & zone.T  # zone[j, e]: j inside e's zone
    d2 = geo.d2.T  # symmetric; [e, j]
    any_seen = jnp.any(seen, axis=1, keepdims=True)
    candidates = jnp.where(any_seen, seen, enemy)
    target = jnp.argmin(jnp.where(candidates, d2, jnp.inf), axis=1)  # (n,)
    has_target = jnp.any(candidates, axis=1)
    dx = agents.x[target] - agents.x
    dy = agents.y[target] - agents.y
    turn = _heading_control(config, agents.heading, dx, dy)
    dive = jnp.clip(
        (agents.z[target] - agents.z) / np.float32(config.dt * config.dive_rate), -1.0, 1.0
    )
    controls = jnp.stack(
        [jnp.where(has_target, turn, 0.0), jnp.where(has_target, dive, 0.0), jnp.ones_like(turn)],
        axis=-1,
    )
    return _emit(config, controls)


def evade(config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
    """Flee the nearest enemy whose detection zone holds the agent, staying inside the map."""
    agents = state.agents
    zone, geo = _detection_zone(config, state)
    threat = _alive_enemies(config, state) & zone  # zone[e, j]: e inside j's zone
    d2 = geo.d2
    nearest = jnp.argmin(jnp.where(threat, d2, jnp.inf), axis=1)
    threatened = jnp.any(threat, axis=1)
    away_x = agents.x - agents.x[nearest]
    away_y = agents.y - agents.y[nearest]
    norm = jnp.sqrt(away_x * away_x + away_y * away_y)
    scale = jnp.where(threatened & (norm > 0), 1.0 / jnp.maximum(norm, 1e-6), 0.0)
    margin = EVADE_WALL_MARGIN * min(config.limit_x, config.limit_y)

    def push(pos: jax.Array, limit: float) -> jax.Array:
        low = jnp.clip((margin - pos) / margin, 0.0, 1.0)
        high = jnp.clip((pos - (limit - margin)) / margin, 0.0, 1.0)
        return low - high

    # The wall term weighs 2: at the edge it overrides fleeing straight out of the map.
    want_x = away_x * scale + 2.0 * push(agents.x, config.limit_x)
    want_y = away_y * scale + 2.0 * push(agents.y, config.limit_y)
    steer = (want_x * want_x + want_y * want_y) > 1e-6
    turn = jnp.where(steer, _heading_control(config, agents.heading, want_x, want_y), 0.0)
    controls = jnp.stack([turn, jnp.zeros_like(turn), jnp.ones_like(turn)], axis=-1)
    return _emit(config, controls)


POLICIES: dict[str, Policy] = {
    "random": random,
    "circle": circle,
    "pursuit": pursuit,
    "evade": evade,
}
"""The built-in scripted policies by name."""


def get_policy(name: str | Policy) -> Policy:
    """The scripted policy called `name` (a callable is returned unchanged).

    Raises:
        ValueError: unknown name (the message lists the closest valid names).
    """
    if callable(name):
        return name
    if not isinstance(name, str):
        raise TypeError(
            f"an opponent is a policy name ({sorted(POLICIES)}) or a callable "
            f"policy(config, state, key) -> actions; got {type(name).__name__}"
        )
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown scripted policy {name!r}; closest: {closest(name, POLICIES)} "
            f"(all: {sorted(POLICIES)})"
        ) from None


# Names that moved out of this module, kept here for one release (removed in 0.3): the
# cooperative mode to `gigastep.versus`, the outcome of a step to `gigastep.env`. The two
# imports below point up a layer; tests/architecture/test_imports.py lists them until they go.
_MOVED_TO_VERSUS = ("EnvLike", "VersusEnv", "observe_state", "resolve_env")


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_VERSUS:
        from gigastep import versus

        return _moved(name, versus)
    if name == "team_outcome":
        from gigastep import env

        return _moved(name, env)
    raise AttributeError(f"module 'gigastep.opponents' has no attribute {name!r}")


def _moved(name: str, new: ModuleType) -> Any:
    import warnings

    warnings.warn(
        f"gigastep.opponents.{name} moved to {new.__name__}.{name}; the old name goes in "
        "gigastep 0.3",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(new, name)
