"""Every reward term of a step, each named (rules §4.10 with the decisions of §15).

A term applies whenever its weight is non-zero and keeps its documented sign: bonuses are
added, penalties subtracted, so a negative weight turns a penalty into a bonus.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np

from gigastep._util.pytree import PytreeData, pytree_dataclass
from gigastep.game.types import EnvConfig
from gigastep.game.xla import count_sum

__all__ = ["WEIGHT_FIELDS", "RewardInputs", "check_score", "reward_terms", "total_reward"]


@pytree_dataclass
class RewardInputs(PytreeData):
    alive_pre: chex.Array  # (n,) bool, alive before the step
    alive: chex.Array  # (n,) bool, alive after the step
    hit_waypoint: chex.Array  # (n,) bool, collected the waypoint this step
    collided: chex.Array  # (n,) bool, agent-agent collision this step
    hazard_death: chex.Array  # (n,) bool, died by leaving the map or entering a box this step
    detected: chex.Array  # (n, n) bool, HD[i, j]
    damage: chex.Array  # (n, n) float32, damage units j deals to i
    present: chex.Array | None = None  # (n,) bool, the episode's present agents (team draws)


TERMS = (
    "game_won",
    "defeat_one_opponent",
    "detection",
    "damage",
    "idle",
    "agent_disabled",
    "collision_agent",
    "collision_obstacle",
    "hit_waypoint",
)
WEIGHT_FIELDS = ("idle_reward", "divide_reward_by_team_size", *(f"reward_{t}" for t in TERMS))
"""The `EnvConfig` fields that weigh the reward terms and nothing else: two configs that differ
only in these play the same games and differ only in their rewards."""


def check_score(config: EnvConfig, score: EnvConfig) -> None:
    """ValueError unless `score` differs from `config` only in `WEIGHT_FIELDS` (so the reward of
    `config`'s step under `score`'s weights is well defined), naming the first other field."""
    import dataclasses

    if not isinstance(score, EnvConfig):
        raise ValueError(f"score must be an EnvConfig, got {type(score).__name__}")
    for f in dataclasses.fields(EnvConfig):
        if f.name not in WEIGHT_FIELDS and getattr(score, f.name) != getattr(config, f.name):
            raise ValueError(
                f"score may differ from the game's config only in its reward weights "
                f"({', '.join(WEIGHT_FIELDS)}); its {f.name} is {getattr(score, f.name)!r}, "
                f"the game's {getattr(config, f.name)!r}"
            )


def _team_counts(config: EnvConfig, alive: jax.Array) -> tuple[jax.Array, jax.Array]:
    team1 = jnp.asarray(np.asarray(config.teams) == 1)
    a1 = jnp.sum(alive & team1)
    return jnp.sum(alive) - a1, a1


def _own_team_size(config: EnvConfig, present: jax.Array | None) -> jax.Array:
    """(n,) float32: the size of each agent's team, counting present agents only."""
    if present is None:
        return jnp.asarray(np.array(config.team_sizes, np.float32)[np.asarray(config.teams)])
    team1 = jnp.asarray(np.asarray(config.teams) == 1)
    n1 = jnp.sum(present & team1)
    n0 = jnp.sum(present) - n1
    return jnp.where(team1, n1, n0).astype(jnp.float32)


def reward_terms(config: EnvConfig, r: RewardInputs) -> dict[str, chex.Array]:
    """Unweighted per-agent reward terms, (n,) float32 each (positive = good for the agent)."""
    dt = config.dt
    team1 = jnp.asarray(np.asarray(config.teams) == 1)
    alive = r.alive.astype(jnp.float32)
    alive_pre = r.alive_pre.astype(jnp.float32)
    a0_pre, a1_pre = _team_counts(config, r.alive_pre)
    a0, a1 = _team_counts(config, r.alive)
    d0, d1 = (a0 - a0_pre).astype(jnp.float32), (a1 - a1_pre).astype(jnp.float32)
    own_survivors = jnp.where(team1, a1, a0).astype(jnp.float32)
    # Survivors gain from enemy deaths and lose from teammate deaths (deltas are <= 0).
    defeat = jnp.where(team1, d1 - d0, d0 - d1) * alive / (own_survivors + 1.0)
    det_other = count_sum(r.detected, axis=0)  # enemies agent j detects
    det_by = count_sum(r.detected, axis=1)  # enemies detecting agent i
    dealt = count_sum(r.damage, axis=0)
    taken = count_sum(r.damage, axis=1)
    eliminated_now = jnp.where(team1, (a0 == 0) & (a0_pre > 0), (a1 == 0) & (a1_pre > 0))
    return {
        "game_won": eliminated_now.astype(jnp.float32) * alive,
        "defeat_one_opponent": defeat,
        "detection": (0.5 * det_other - 0.2 * det_by) * dt * alive,
        "damage": (dealt - 0.5 * taken) * dt * alive,
        "idle": -0.01 * dt * alive,
        "agent_disabled": -(1.0 - alive) * alive_pre,
        "collision_agent": -r.collided.astype(jnp.float32),
        "collision_obstacle": -r.hazard_death.astype(jnp.float32),
        "hit_waypoint": r.hit_waypoint.astype(jnp.float32),
    }


def total_reward(config: EnvConfig, r: RewardInputs, aux_factor: jax.Array) -> chex.Array:
    """The step reward (n,) float32.

    r_i = (aux * (sum_k w_k term_k + idle_reward_i) + w_won game_won_i) / team_size_i,
    times [alive before the step] (agents dead before the step earn nothing). With a team
    draw, team_size_i counts the present agents of i's team.
    """
    terms = reward_terms(config, r)
    base = jnp.asarray(config.idle_reward, jnp.float32)
    for name, value in terms.items():
        weight = getattr(config, f"reward_{name}")
        if name != "game_won" and weight != 0:
            base = base + np.float32(weight) * value
    total = aux_factor * base
    if config.reward_game_won != 0:
        total = total + np.float32(config.reward_game_won) * terms["game_won"]
    if config.divide_reward_by_team_size:
        total = total / _own_team_size(config, r.present)
    return total * r.alive_pre.astype(jnp.float32)
