"""One game's reset and step: the phases of `gigastep.game` composed into pure functions.

The phases are movement (`dynamics`), the waypoint (`waypoints`), hazards and combat
(`interactions`), `rewards`, the `observations` and the placement of a fresh game (`reset`).
Every function takes the static `EnvConfig` first and is pure: same inputs, same outputs, under
jit or not, vmapped or not. `gigastep.game.batched` holds their batched forms and
`gigastep.env.GigastepEnv` their compiled ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import chex
import jax
import jax.numpy as jnp
import numpy as np

from gigastep._util import checks as _checks
from gigastep._util.checks import check_actions
from gigastep._util.pytree import PytreeData, pytree_dataclass
from gigastep.game import dynamics, interactions, rewards, waypoints
from gigastep.game.arena import episode_boxes
from gigastep.game.batching import select_games
from gigastep.game.observations import first_observation, observe
from gigastep.game.random import seed_words, split, stream_from_seed, uniforms_from_seed
from gigastep.game.reset import reset_state_streamed
from gigastep.game.rewards import check_score
from gigastep.game.state_checks import check_single_state
from gigastep.game.types import EnvConfig, EnvState, Observation, StepInfo, StepNoise
from gigastep.game.xla import count_sum

if TYPE_CHECKING:
    from jax.typing import ArrayLike

StepResult: TypeAlias = "tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array]"
"""What `step` returns: (obs, state, rewards, dones, episode_done)."""

AutoresetResult: TypeAlias = (
    "tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array, StepInfo]"
)
"""What `step_autoreset` returns: (obs, state, rewards, dones, episode_done, info)."""

__all__ = [
    "Advanced",
    "AutoresetResult",
    "StepResult",
    "advance",
    "episode_winner",
    "finish_autoreset",
    "last_observation",
    "noise_and_stream",
    "reset",
    "sample_noise",
    "score_rewards",
    "step",
    "step_autoreset",
    "team_outcome",
    "transition",
]


# ------------------------------------------------------------------------------------------
# Reset (the placement itself: `gigastep.game.reset`)
# ------------------------------------------------------------------------------------------


def reset(config: EnvConfig, key: jax.Array) -> tuple[Observation, EnvState]:
    """Start a game: returns (obs, state)."""
    _checks.check_key(key)
    state, comm, stream = reset_state_streamed(config, key)
    return first_observation(config, state, comm, stream), state


# ------------------------------------------------------------------------------------------
# Step
# ------------------------------------------------------------------------------------------


def sample_noise(config: EnvConfig, key: jax.Array) -> StepNoise:
    """Every random number of one step, from one key. Each draw has a fixed place in the
    stream whatever the flags, so switching a feature off leaves the others' draws unchanged."""
    return noise_and_stream(config, key)[0]


def noise_and_stream(config: EnvConfig, key: jax.Array) -> tuple[StepNoise, jax.Array | None]:
    """(`sample_noise(config, key)`, the counter stream of its comm noise or None), with the
    key's seed words drawn once."""
    n = config.n_agents
    skip = [
        i
        for i, on in enumerate(
            (config.stochastic_obs, config.stochastic_comm, config.enable_waypoints)
        )
        if not on
    ]
    seed = seed_words(key)
    detection, comm, waypoint = uniforms_from_seed(seed, _noise_shapes(n), skip=skip)
    noise = StepNoise(detection=detection, comm=comm, waypoint=waypoint)
    if not config.stochastic_comm:
        return noise, None
    return noise, stream_from_seed(seed, _noise_shapes(n), 1)


def _noise_shapes(n: int) -> list[tuple[int, ...]]:
    return [(n, n), (n, n), (4,)]  # detection, comm, waypoint


@pytree_dataclass
class Advanced(PytreeData):
    """A step's outcome before its observation (what `advance` returns): the next state, the
    geometry and combat it was computed with, rewards (n,), terminated () and truncated (),
    and what the rewards were computed from (`score_rewards` weighs it again)."""

    state: EnvState
    geo: interactions.Geometry
    combat: interactions.Combat
    rewards: chex.Array
    terminated: chex.Array
    truncated: chex.Array
    reward_inputs: rewards.RewardInputs


def advance(config: EnvConfig, state: EnvState, actions: ArrayLike, noise: StepNoise) -> Advanced:
    """Everything of a step but the observation: move, waypoints, hazards, combat, health,
    termination and rewards."""
    check_actions(actions, config.n_agents, config.discrete_actions)
    agents, episode = state.agents, state.episode
    alive_pre = agents.alive
    moved = dynamics.move(config, agents, dynamics.decode_actions(config, actions))
    hit, waypoint, waypoint_time = waypoints.update_waypoint(
        config, moved, episode, alive_pre, noise.waypoint
    )
    geo = interactions.geometry(moved)
    boxes, box_valid = episode_boxes(config, episode)
    hz = interactions.hazards(config, moved, geo, boxes, box_valid)
    fight = interactions.combat(config, moved, geo, hz.alive, noise.detection)
    max_health = jnp.asarray(config.max_health, jnp.float32)
    health = (
        moved.health
        - count_sum(fight.damage, axis=1) * np.float32(config.damage_per_second * config.dt)
        + np.float32(config.healing_per_second * config.dt)
        + max_health * hit
    )
    health = jnp.clip(jnp.where(hz.alive, health, 0.0), 0.0, max_health)
    alive = hz.alive & (health > 0)
    reward_inputs = rewards.RewardInputs(
        alive_pre=alive_pre,
        alive=alive,
        hit_waypoint=hit,
        collided=hz.collided,
        hazard_death=alive_pre & (hz.oob | hz.in_box),
        detected=fight.detected,
        damage=fight.damage,
        present=episode.present,
    )
    reward = rewards.total_reward(config, reward_inputs, episode.aux_rewards_factor)
    team1 = jnp.asarray(np.asarray(config.teams) == 1)
    a1 = jnp.sum(alive & team1)
    a0 = jnp.sum(alive) - a1
    if config.episode_ends_one_team_dead:
        terminated = (a0 == 0) | (a1 == 0)
    else:
        terminated = (a0 == 0) & (a1 == 0)
    length = episode.step + 1
    truncated = jnp.zeros((), bool)
    if config.max_episode_length is not None:
        truncated = (length >= config.max_episode_length) & ~terminated
    new = EnvState(
        agents=moved.replace(health=health, alive=alive, tracked=fight.tracked),
        episode=episode.replace(
            waypoint=waypoint,
            waypoint_time=waypoint_time,
            step=length,
            returns=episode.returns + reward,
        ),
    )
    return Advanced(
        state=new,
        geo=geo,
        combat=fight,
        rewards=reward,
        terminated=terminated,
        truncated=truncated,
        reward_inputs=reward_inputs,
    )


def score_rewards(score: EnvConfig, adv: Advanced) -> jax.Array:
    """(n,) float32: the reward of the step `adv` under `score`'s reward weights
    (`rewards.check_score`); with the game's own config, exactly `adv.rewards`."""
    return rewards.total_reward(score, adv.reward_inputs, adv.state.episode.aux_rewards_factor)


def transition(
    config: EnvConfig, state: EnvState, actions: ArrayLike, noise: StepNoise
) -> StepResult:
    """One step with its randomness given: (obs, state, rewards, dones, episode_done)."""
    check_single_state(config, state, "jax.vmap(transition)")
    return _transition_streamed(config, state, actions, noise)


def _transition_streamed(
    config: EnvConfig,
    state: EnvState,
    actions: ArrayLike,
    noise: StepNoise,
    comm_stream: jax.Array | None = None,
) -> StepResult:
    adv = advance(config, state, actions, noise)
    obs = observe(
        config,
        adv.state,
        adv.geo,
        adv.combat.detected,
        adv.combat.took_damage,
        noise.comm,
        comm_stream,
    )
    done = adv.terminated | adv.truncated
    return obs, adv.state, adv.rewards, ~adv.state.agents.alive, done


def episode_winner(config: EnvConfig, alive: ArrayLike, episode_done: ArrayLike) -> jax.Array:
    """The winning team of episodes that end: int32 of `episode_done`'s shape.

    At the end of an episode the winner is the only team that still has an agent alive
    (0 or 1); -1 means no winner: a draw (both teams, or neither, have survivors: the time
    limit, or both eliminated in one step) or an episode that goes on.

    Args:
        alive: bool (..., n), the agents alive after the step.
        episode_done: bool (...), the episode ended at this step.
    """
    team1 = jnp.asarray(np.asarray(config.teams) == 1)
    left1 = jnp.any(alive & team1, axis=-1)
    left0 = jnp.any(alive & ~team1, axis=-1)
    winner = jnp.where(left0 & ~left1, 0, jnp.where(left1 & ~left0, 1, -1))
    return jnp.where(episode_done, winner, -1).astype(jnp.int32)


def step(config: EnvConfig, state: EnvState, actions: ArrayLike, key: jax.Array) -> StepResult:
    """One step: (obs, state, rewards (n,), dones (n,), episode_done ()).

    `dones[i]` is True for every dead agent; the step never resets a finished game (see
    `step_autoreset` for that).
    """
    check_single_state(config, state, "v_step")
    _checks.check_key(key)
    return _transition_streamed(config, state, actions, *noise_and_stream(config, key))


def step_autoreset(
    config: EnvConfig,
    state: EnvState,
    actions: ArrayLike,
    key: jax.Array,
    final_obs: bool = True,
    final_state: bool = False,
    score: EnvConfig | None = None,
) -> AutoresetResult:
    """A step that replaces a finished game by a fresh one inside the same call.

    Returns (obs, state, rewards, dones, episode_done, info): obs and state are the fresh
    game's where `episode_done`; rewards, dones and episode_done are the finished step's.
    `info.final_obs` holds the last observation of the finished game (computed only when
    `final_obs` is True, else it repeats `obs`); with `final_state`, `info.final_state` is
    the state the step ended in before any reset (else None). With `score`, a config that
    differs from `config` only in its reward weights (`rewards.WEIGHT_FIELDS`), `info.score`
    holds the step's rewards (n,) under `score`'s weights: e.g. the unshaped reward of a game
    trained with an extra shaping term (else None).

    This is the one-game form: it computes a fresh game on every call and keeps it only when
    the game ended. Under `jax.vmap` that is a full reset per game per step; for a batch use
    `GigastepEnv.v_step_autoreset`, which resets only the games that finished
    (`gigastep.game.batching`).
    """
    check_single_state(config, state, "v_step_autoreset")
    if score is not None:
        check_score(config, score)
    _checks.check_key(key)
    k_step, k_reset = split(key)
    noise, step_stream = noise_and_stream(config, k_step)
    adv = advance(config, state, actions, noise)
    done = adv.terminated | adv.truncated
    fresh, fresh_comm, fresh_stream = reset_state_streamed(config, k_reset)
    return finish_autoreset(
        config,
        adv,
        noise,
        fresh,
        fresh_comm,
        done,
        final_obs,
        (step_stream, fresh_stream),
        final_state,
        score,
    )


def finish_autoreset(
    config: EnvConfig,
    adv: Advanced,
    noise: StepNoise,
    fresh: EnvState,
    fresh_comm: jax.Array,
    done: jax.Array,
    final_obs: bool,
    streams: tuple[jax.Array | None, jax.Array | None] = (None, None),
    final_state: bool = False,
    score: EnvConfig | None = None,
) -> AutoresetResult:
    """Take the fresh game where `done`, observe the result once (and the finished game's
    last observation when `final_obs`), and assemble the auto-reset step's outputs.
    `streams`: the counter streams of (noise.comm, fresh_comm), or Nones."""
    nxt = select_games(done, fresh, adv.state)
    geo = interactions.geometry(nxt.agents)
    step_stream, fresh_stream = streams
    stream: jax.Array | None = None
    if step_stream is not None:
        assert fresh_stream is not None  # both streams, or neither (without stochastic_comm)
        stream = jnp.where(done, fresh_stream, step_stream)
    obs = observe(
        config,
        nxt,
        geo,
        adv.combat.detected & ~done,
        adv.combat.took_damage & ~done,
        jnp.where(done, fresh_comm, noise.comm),
        stream,
    )
    last = last_observation(config, adv, noise, step_stream) if final_obs else obs
    info = StepInfo(
        terminated=adv.terminated,
        truncated=adv.truncated,
        final_obs=last,
        episode_return=adv.state.episode.returns,
        episode_length=adv.state.episode.step,
        winner=episode_winner(config, adv.state.agents.alive, done),
        final_state=adv.state if final_state else None,
        score=None if score is None else score_rewards(score, adv),
    )
    return obs, nxt, adv.rewards, ~adv.state.agents.alive, done, info


def last_observation(
    config: EnvConfig, adv: Advanced, noise: StepNoise, stream: jax.Array | None
) -> Observation:
    """The observation of the state a step ended in (before any reset)."""
    return observe(
        config, adv.state, adv.geo, adv.combat.detected, adv.combat.took_damage, noise.comm, stream
    )


# ------------------------------------------------------------------------------------------
# The outcome of a step
# ------------------------------------------------------------------------------------------


def team_outcome(
    config: EnvConfig, alive: jax.Array, episode_done: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(terminated, truncated) of a step from the alive mask after it and its episode_done.

    terminated = the episode ended by elimination (either team, or both when
    `episode_ends_one_team_dead` is False); truncated = it ended otherwise (time limit).
    """
    teams = np.asarray(config.teams)
    left = [jnp.any(alive[..., teams == t], axis=-1) for t in (0, 1)]
    if config.episode_ends_one_team_dead:
        eliminated = ~left[0] | ~left[1]
    else:
        eliminated = ~left[0] & ~left[1]
    return episode_done & eliminated, episode_done & ~eliminated
