"""The batched forms of a game's reset and step: a leading axis B of games on every argument.

Each is the `jax.vmap` of its one-game form in `gigastep.game.step`, bit for bit; the
auto-resetting step resets only the games that finished (the masked computation of
`gigastep.game.batching`). They are pure, so they trace inside a caller's jit or scan;
`gigastep.env.GigastepEnv` offers them compiled (`v_reset`, `v_step`, `v_step_autoreset`).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import jax

from gigastep._util import checks as _checks
from gigastep.game.batching import reset_where, select_games, where_masked
from gigastep.game.random import split
from gigastep.game.reset import reset_state_streamed
from gigastep.game.rewards import check_score
from gigastep.game.state_checks import check_batch
from gigastep.game.step import (
    Advanced,
    AutoresetResult,
    StepResult,
    advance,
    finish_autoreset,
    last_observation,
    noise_and_stream,
    reset,
    step,
)
from gigastep.game.types import EnvConfig, EnvState, Observation, StepNoise

if TYPE_CHECKING:
    from jax.typing import ArrayLike

__all__ = ["batched_reset", "batched_step", "batched_step_autoreset"]


def batched_reset(config: EnvConfig, keys: jax.Array) -> tuple[Observation, EnvState]:
    """`reset` of every game of a batch: keys (B,) -> (obs, states) with leading axis B."""
    return jax.vmap(partial(reset, config))(keys)


def batched_step(
    config: EnvConfig, states: EnvState, actions: ArrayLike, keys: jax.Array
) -> StepResult:
    """`step` of every game of a batch (pure; `GigastepEnv.v_step` is its compiled form)."""
    check_batch(config, states, actions, keys, "step")
    return jax.vmap(partial(step, config))(states, actions, keys)


def _reset_finished(
    config: EnvConfig, done: jax.Array, keys: jax.Array
) -> tuple[EnvState, jax.Array, jax.Array | None]:
    """(fresh states, their comm noise (B, n, n), its streams (B, 3) or None):
    `reset_state_streamed(config, keys[b])` for every game b where `done` (see
    `reset_where`)."""
    return reset_where(partial(reset_state_streamed, config), done, keys)


def batched_step_autoreset(
    config: EnvConfig,
    states: EnvState,
    actions: ArrayLike,
    keys: jax.Array,
    final_obs: bool = True,
    final_state: bool = False,
    score: EnvConfig | None = None,
) -> AutoresetResult:
    """`jax.vmap(partial(step_autoreset, config, final_obs=final_obs, final_state=final_state,
    score=score))(states, actions, keys)`, bit for bit, without resetting the games that go
    on.

    The batch is advanced as in `step_autoreset` (each game's key split into its step and reset
    keys), the finished games are reset by `_reset_finished`, and the observation is computed
    once on the resulting state (plus the finished games' last one when `final_obs`).
    Called on a batch (leading axis B on every argument); pure, so it traces inside a caller's
    jit or scan (under a further vmap its branches become selects, costing a full reset).
    """
    check_batch(config, states, actions, keys, "step_autoreset")
    if score is not None:
        check_score(config, score)

    def advance_one(
        state: EnvState, acts: ArrayLike, key: jax.Array
    ) -> tuple[Advanced, StepNoise, jax.Array, jax.Array | None]:
        _checks.check_key(key)
        k_step, k_reset = split(key)
        noise, stream = noise_and_stream(config, k_step)
        return advance(config, state, acts, noise), noise, k_reset, stream

    adv, noise, k_reset, step_stream = jax.vmap(advance_one)(states, actions, keys)
    done = adv.terminated | adv.truncated
    fresh, fresh_comm, fresh_stream = _reset_finished(config, done, k_reset)

    # The finished games' last observations are computed for those games only (a step in
    # which few games end observes a few games twice, not the whole batch).
    finish = partial(
        finish_autoreset, config, final_obs=False, final_state=final_state, score=score
    )
    obs, nxt, rewards, dones, done, info = jax.vmap(finish)(
        adv, noise, fresh, fresh_comm, done, streams=(step_stream, fresh_stream)
    )
    if final_obs:
        last = where_masked(partial(last_observation, config), done, adv, noise, step_stream)
        info = info.replace(final_obs=select_games(done, last, obs))
    return obs, nxt, rewards, dones, done, info
