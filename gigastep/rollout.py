"""Rollouts as library functions: many games played for many steps in one compiled call.

`gigastep.rollout.rollout(env, num_envs, num_steps, key, policy=None)` (or
`from gigastep.rollout import rollout`) plays `num_envs` games for
`num_steps` steps of the library's auto-resetting batched step inside one `lax.scan` on one
device, and returns per-game totals (rewards, completed episodes, their lengths, returns,
wins and draws), the final states and observations, and optionally the whole trajectory
(`RolloutResult`). `gigastep.parallel.sharded_rollout` is the same over every device of a
mesh, also across processes, and gives the same per-game results.

A policy is any pure JAX function `policy(config, state, key) -> actions` of all agents of
one game (`gigastep.opponents` holds scripted ones; a name such as `"pursuit"` selects one);
`rollout` vmaps it over the games. `joint_policy(policy_team0, policy_team1)` plays each
team with its own policy (e.g. a scripted match).

Randomness (the same on any number of devices): the games' keys are split from `key` up
front, `game_keys = jax.random.split(key, num_envs)`; game b resets from
`k_reset, k_run = jax.random.split(game_keys[b])`, and at step t draws
`k_policy, k_env = jax.random.split(jax.random.fold_in(k_run, t))`: the policy acts with
`k_policy`, `env.step_autoreset` steps with `k_env`. Game b's numbers therefore depend only on
`key`, `num_envs` and b, never on how the batch is split over devices.

Compiled once per (config, policy, num_envs, num_steps, trajectory): calls with new keys
reuse the compiled function (policies are compared by identity, so pass the same function
object, not a fresh lambda, to reuse it). On CPU the rollouts compile with XLA's legacy
fusion emitters (`compiler_options`), so that a game's numbers do not depend on the size of
the batch or the number of devices it is played with.

Calling the module itself, `gigastep.rollout(...)`, is deprecated (a `DeprecationWarning`;
it stops working in gigastep 0.3): call the function `gigastep.rollout.rollout(...)`.

Example:
    >>> import jax
    >>> from gigastep.rollout import rollout
    >>> out = rollout("identical_2_vs_2_fobs_vec_void_disc", 64, 100, jax.random.key(0))
    >>> out.total_reward.shape, out.episodes.shape, out.wins.shape
    ((64, 4), (64,), (64, 2))
"""

from __future__ import annotations

import sys
import types
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from typing import Any, TypeAlias

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from gigastep import env as _env
from gigastep import opponents, versus
from gigastep._util.checks import check_actions, check_key, check_positive_int
from gigastep._util.pytree import PytreeData, pytree_dataclass
from gigastep.game.types import EnvConfig, EnvState, Observation, StepInfo

PolicyLike: TypeAlias = "opponents.Policy | str | None"
"""A policy argument: a callable `policy(config, state, key) -> actions`, a scripted policy's
name, or None (uniform random actions)."""

__all__ = [
    "JointPolicy",
    "RolloutResult",
    "Trajectory",
    "joint_policy",
    "rollout",
]

# How often each kind of rollout was traced (read by the tests: one trace per compile key).
_TRACES: Counter[str] = Counter()


# ------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------


@pytree_dataclass
class Trajectory(PytreeData):
    """Per-step records of a rollout (T = num_steps, B = num_envs, n = agents per game).

    obs: the observation each step's actions were chosen at, (T, B, n, L) float32 (vector),
        (T, B, n, res_x, res_y, 3) uint8 (rgb) or a tuple of both: `obs[0]` is the reset
        observation, and after a finished episode the fresh game's first observation.
    actions: (T, B, n, 3) float32 (continuous) or (T, B, n) int32 (discrete).
    rewards: (T, B, n) float32, the step's rewards.
    dones: (T, B, n) bool, the agents dead after the step.
    episode_done: (T, B) bool, the step ended the game's episode (the game restarted).
    """

    obs: Observation
    actions: chex.Array
    rewards: chex.Array
    dones: chex.Array
    episode_done: chex.Array


@pytree_dataclass
class RolloutResult(PytreeData):
    """What a rollout returns, per game (leading axis B = num_envs; n = agents per game).

    total_reward: (B, n) float32, each agent's rewards summed over all steps (finished and
        unfinished episodes alike).
    episodes: (B,) int32, episodes completed during the rollout (terminated or truncated).
    episode_steps: (B,) int32, the lengths of the completed episodes, summed (steps of the
        unfinished last episode are not counted).
    episode_return_sum: (B, n) float32, the returns of the completed episodes, summed.
    wins: (B, 2) int32, completed episodes won by team 0 / by team 1 (`StepInfo.winner`:
        the team left alone when the episode ended).
    draws: (B,) int32, completed episodes without a winner (time limit with both teams
        alive, or both eliminated in the same step): `episodes == wins.sum(-1) + draws`.
    final_state: the batched `EnvState` after the last step (leading axis B).
    final_obs: the observation after the last step, (B, n, ...) (a fresh game's first
        observation where the last step ended an episode).
    trajectory: a `Trajectory` of (T, B, ...) arrays with `trajectory=True`, else None.
    """

    total_reward: chex.Array
    episodes: chex.Array
    episode_steps: chex.Array
    episode_return_sum: chex.Array
    wins: chex.Array
    draws: chex.Array
    final_state: EnvState
    final_obs: Observation
    trajectory: Trajectory | None = None

    def summary(self) -> dict[str, Any]:
        """Aggregates over all games as Python numbers (NaN where no episode completed).

        Keys: games, episodes, mean_episode_length, win_rate_team0, win_rate_team1,
        draw_rate, mean_episode_return (a list, per agent), total_reward (a list, per agent,
        summed over games). Reads every array to the host: on several processes, call it on
        `gigastep.parallel.gather(result)`.
        """
        episodes = int(np.sum(self.episodes))
        per = np.float64(episodes) if episodes else np.float64(np.nan)
        wins = np.sum(np.asarray(self.wins, np.int64), axis=0)
        return {
            "games": int(np.shape(self.episodes)[0]),
            "episodes": episodes,
            "mean_episode_length": float(np.sum(self.episode_steps) / per),
            "win_rate_team0": float(wins[0] / per),
            "win_rate_team1": float(wins[1] / per),
            "draw_rate": float(np.sum(self.draws) / per),
            "mean_episode_return": (np.sum(self.episode_return_sum, axis=0) / per).tolist(),
            "total_reward": np.sum(np.asarray(self.total_reward, np.float64), axis=0).tolist(),
        }


# ------------------------------------------------------------------------------------------
# Policies
# ------------------------------------------------------------------------------------------


def _as_policy(policy: PolicyLike, what: str = "policy") -> opponents.Policy:
    """None -> uniform random actions; a name -> that scripted policy; a callable as is."""
    if policy is None:
        return opponents.random
    if isinstance(policy, str):
        return opponents.get_policy(policy)
    if not callable(policy):
        raise TypeError(
            f"{what} must be None (uniform random actions), a scripted policy name "
            f"({sorted(opponents.POLICIES)}) or a callable policy(config, state, key) -> "
            f"actions; got {type(policy).__name__}"
        )
    return policy


@dataclass(frozen=True, repr=False)
class JointPolicy:
    """Team 0's rows from `team0`, team 1's rows from `team1` (both `policy(config, state,
    key) -> actions` of all agents); itself such a policy. Equal components compare equal,
    so rollouts of `joint_policy(a, b)` built twice share one compile.

    Each team's policy gets its own key: `k0, k1 = jax.random.split(key)`.
    """

    team0: opponents.Policy
    team1: opponents.Policy

    def __call__(self, config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
        k0, k1 = jax.random.split(key)
        dtype = jnp.int32 if config.discrete_actions else jnp.float32
        a0 = jnp.asarray(self.team0(config, state, k0)).astype(dtype)
        a1 = jnp.asarray(self.team1(config, state, k1)).astype(dtype)
        for who, a in (("team 0 ", a0), ("team 1 ", a1)):
            check_actions(a, config.n_agents, config.discrete_actions, f"{who}policy: ")
        team1 = np.asarray(config.teams) == 1
        mask = team1 if config.discrete_actions else team1[:, None]
        return jnp.where(jnp.asarray(mask), a1, a0)

    def __repr__(self) -> str:
        return f"joint_policy({_name(self.team0)}, {_name(self.team1)})"


def _name(policy: object) -> str:
    return getattr(policy, "__name__", repr(policy))


def joint_policy(policy_team0: PolicyLike, policy_team1: PolicyLike) -> JointPolicy:
    """A policy of all agents that plays team 0 with `policy_team0` and team 1 with
    `policy_team1` (each None, a scripted policy name or a callable `policy(config, state,
    key) -> actions` of ALL agents; only its own team's rows are used).

    Example:
        >>> match = joint_policy("pursuit", "random")        # pursuit (team 0) vs random
        >>> out = rollout(env, 256, 500, key, policy=match)
        >>> out.wins.sum(0) / out.episodes.sum()             # win rates of team 0 and team 1
    """
    return JointPolicy(
        _as_policy(policy_team0, "policy_team0"), _as_policy(policy_team1, "policy_team1")
    )


# ------------------------------------------------------------------------------------------
# Argument checks (before any compute)
# ------------------------------------------------------------------------------------------


def _resolve_env(env: versus.EnvLike) -> _env.GigastepEnv:
    if isinstance(env, versus.VersusEnv):
        raise TypeError(
            "rollout plays every agent of a GigastepEnv; instead of a VersusEnv pass its env "
            "and policy=joint_policy(...) (e.g. joint_policy(None, 'pursuit') scripts team 1)"
        )
    return versus.resolve_env(env)


def _key_data(key: jax.Array) -> tuple[jax.Array, str]:
    """(uint32 key data, the key's implementation name): one PRNG key, checked."""
    if not hasattr(key, "dtype"):
        raise TypeError(
            f"key must be a PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)); got "
            f"{type(key).__name__} {key!r}"
        )
    check_key(key)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key), str(jax.random.key_impl(key))
    # the flag attributes of jax.config are set at run time; its stub does not declare them
    return key, str(jax.config.jax_default_prng_impl)  # type: ignore[attr-defined]


def check_arguments(
    env: versus.EnvLike,
    num_envs: int,
    num_steps: int,
    key: jax.Array,
    policy: PolicyLike,
    trajectory: bool,
) -> tuple[_env.GigastepEnv, int, int, jax.Array, str, opponents.Policy, bool]:
    """(GigastepEnv, num_envs, num_steps, key data, key impl, policy, trajectory), each
    checked: the shared argument checks of `rollout` and `sharded_rollout`."""
    genv = _resolve_env(env)
    num_envs = check_positive_int(num_envs, "num_envs")
    num_steps = check_positive_int(num_steps, "num_steps")
    data, impl = _key_data(key)
    policy = _as_policy(policy)
    if not isinstance(trajectory, (bool, np.bool_)):
        raise TypeError(f"trajectory must be True or False, got {trajectory!r}")
    return genv, num_envs, num_steps, data, impl, policy, bool(trajectory)


def check_policy(config: EnvConfig, policy: opponents.Policy) -> None:
    """Trace `policy` on one game (shapes only, no compute) and check its actions' format."""
    state = jax.eval_shape(lambda k: _env.reset(config, k)[1], jax.random.key(0))
    try:
        out = jax.eval_shape(partial(policy, config), state, jax.random.key(0))
    except Exception as e:
        e.add_note(f"(raised by policy {_name(policy)} on one game's state)")
        raise
    check_actions(out, config.n_agents, config.discrete_actions, f"policy {_name(policy)}: ")


# ------------------------------------------------------------------------------------------
# The rollout of a batch of games (pure; one device, or one shard of a sharded rollout)
# ------------------------------------------------------------------------------------------


def game_keys(key_data: jax.Array, impl: str, num_envs: int) -> jax.Array:
    """The games' key data (num_envs, ...) uint32: `jax.random.split(key, num_envs)`."""
    key = jax.random.wrap_key_data(key_data, impl=impl)
    return jax.random.key_data(jax.random.split(key, num_envs))


def _zero_totals(b: int, n: int) -> dict[str, jax.Array]:
    return {
        "total_reward": jnp.zeros((b, n), jnp.float32),
        "episodes": jnp.zeros(b, jnp.int32),
        "episode_steps": jnp.zeros(b, jnp.int32),
        "episode_return_sum": jnp.zeros((b, n), jnp.float32),
        "wins": jnp.zeros((b, 2), jnp.int32),
        "draws": jnp.zeros(b, jnp.int32),
    }


def _add_step(
    totals: dict[str, jax.Array], rewards: jax.Array, done: jax.Array, info: StepInfo
) -> dict[str, jax.Array]:
    """The running totals after one step (rewards (B, n), done (B,), info batched)."""
    finished = done.astype(jnp.int32)
    won = jnp.stack([info.winner == 0, info.winner == 1], axis=-1) & done[:, None]
    return {
        "total_reward": totals["total_reward"] + rewards,
        "episodes": totals["episodes"] + finished,
        "episode_steps": totals["episode_steps"] + finished * info.episode_length,
        "episode_return_sum": totals["episode_return_sum"]
        + jnp.where(done[:, None], info.episode_return, 0.0),
        "wins": totals["wins"] + won.astype(jnp.int32),
        "draws": totals["draws"] + (done & (info.winner < 0)).astype(jnp.int32),
    }


def _batched_step(
    config: EnvConfig, reset_finished_only: bool
) -> Callable[..., _env.AutoresetResult]:
    """The library's auto-resetting batched step (states, actions, keys) -> 6-tuple.

    On CPU `batched_step_autoreset` resets only the games that ended; its conditional needs
    its branch index on the host where XLA runs conditionals from the host (GPU), so there
    the vmapped `step_autoreset` (every game draws a fresh start, the finished ones keep it)
    is used. Both give the same numbers (see `gigastep.adapters.torch._compiled_step`).
    """
    if reset_finished_only:
        return partial(_env.batched_step_autoreset, config, final_obs=False)
    return jax.vmap(partial(_env.step_autoreset, config, final_obs=False))


def play_games(
    config: EnvConfig,
    policy: opponents.Policy,
    num_steps: int,
    trajectory: bool,
    reset_finished_only: bool,
    impl: str,
    keys: jax.Array,
) -> RolloutResult:
    """Reset the games of `keys` ((B, ...) uint32 key data, one per game) and play them for
    `num_steps` steps in one `lax.scan` (see the module docstring for the key derivation)."""
    keys = jax.random.wrap_key_data(keys, impl=impl)
    b = keys.shape[0]
    split = jax.vmap(jax.random.split)(keys)  # (B, 2): reset and run keys
    obs, states = jax.vmap(partial(_env.reset, config))(split[:, 0])
    run_keys = split[:, 1]
    act = jax.vmap(partial(policy, config))
    step = _batched_step(config, reset_finished_only)

    def body(
        carry: tuple[EnvState, Observation, dict[str, jax.Array]], t: jax.Array
    ) -> tuple[tuple[EnvState, Observation, dict[str, jax.Array]], Trajectory | None]:
        states, obs, totals = carry
        k = jax.vmap(lambda r: jax.random.split(jax.random.fold_in(r, t)))(run_keys)
        actions = act(states, k[:, 0])
        nxt_obs, states, rewards, dones, done, info = step(states, actions, k[:, 1])
        totals = _add_step(totals, rewards, done, info)
        record = (
            Trajectory(obs=obs, actions=actions, rewards=rewards, dones=dones, episode_done=done)
            if trajectory
            else None
        )
        return (states, nxt_obs, totals), record

    init = (states, obs, _zero_totals(b, config.n_agents))
    (states, obs, totals), records = jax.lax.scan(body, init, jnp.arange(num_steps))
    return RolloutResult(**totals, final_state=states, final_obs=obs, trajectory=records)


# ------------------------------------------------------------------------------------------
# One device
# ------------------------------------------------------------------------------------------

# XLA's newer CPU fusion emitters choose their code by the shapes of the whole program and may
# contract a multiply and an add into one FMA in one program but not in another (a batch of
# B games on one device, B/2 per device under shard_map), so the same game drifts by a last
# bit and then diverges. The legacy emitters generate the same code per element whatever the
# shapes; the rollouts use them on CPU (no measured difference in speed: equal CPU time).
_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@cache
def compiler_options(platform: str) -> dict[str, Any] | None:
    """The XLA options the rollouts compile with on `platform` (None: XLA's defaults).

    On CPU, the legacy fusion emitters where this jaxlib still has the option (a trial
    compile of a scalar function checks it once)."""
    if platform != "cpu":
        return None
    try:
        jax.jit(lambda x: x + 1, compiler_options=_CPU_OPTIONS).lower(np.float32(0)).compile()
    except Exception:  # the option was removed: XLA's defaults (equal up to FMA rounding)
        return None
    return dict(_CPU_OPTIONS)


@lru_cache(maxsize=32)
def _compiled(
    config: EnvConfig,
    policy: opponents.Policy,
    num_envs: int,
    num_steps: int,
    trajectory: bool,
    impl: str,
    platform: str,
) -> Callable[[ArrayLike], RolloutResult]:
    """The jitted rollout `key data -> RolloutResult` (one per argument tuple)."""
    check_policy(config, policy)

    def run(key_data: jax.Array) -> RolloutResult:
        _TRACES["rollout"] += 1
        keys = game_keys(key_data, impl, num_envs)
        return play_games(config, policy, num_steps, trajectory, platform == "cpu", impl, keys)

    return jax.jit(run, compiler_options=compiler_options(platform))


def rollout(
    env: versus.EnvLike,
    num_envs: int,
    num_steps: int,
    key: jax.Array,
    policy: PolicyLike = None,
    trajectory: bool = False,
) -> RolloutResult:
    """Play `num_envs` games for `num_steps` steps on one device, in one compiled scan.

    Finished games restart inside the step (the library's auto-resetting batched step), so
    a game may complete several episodes; per-game totals count them.

    Args:
        env: a `GigastepEnv`, an `EnvConfig` or a scenario name (`gigastep.make`).
        num_envs: games played at once, B (a positive int).
        num_steps: steps per game, T (a positive int).
        key: one PRNG key (`jax.random.key(seed)` or `jax.random.PRNGKey(seed)`); see the
            module docstring for how each game's keys derive from it.
        policy: None (uniform random actions), a scripted policy name (`"pursuit"`,
            `"evade"`, `"circle"`, `"random"`) or a pure JAX function
            `policy(config, state, key) -> actions` of all agents of ONE game (vmapped here),
            e.g. `joint_policy(a, b)`.
        trajectory: also return every step's obs, actions, rewards, dones and episode_done
            as (T, B, ...) arrays (memory grows with T x B).

    Returns:
        A `RolloutResult` (a pytree): per-game totals, final states and observations (see
        its docstring for every field's shape and dtype).

    Raises:
        TypeError / ValueError: bad arguments (before any compute), or a policy whose
            actions do not fit the environment.
    """
    genv, num_envs, num_steps, data, impl, policy, trajectory = check_arguments(
        env, num_envs, num_steps, key, policy, trajectory
    )
    run = _compiled(
        genv.config, policy, num_envs, num_steps, trajectory, impl, jax.default_backend()
    )
    return run(data)


# ------------------------------------------------------------------------------------------
# Deprecated: calling the module (removed in 0.3)
# ------------------------------------------------------------------------------------------


class _DeprecatedCallableModule(types.ModuleType):
    """This module, still callable until gigastep 0.3 so that `gigastep.rollout(...)` of
    0.1.0 keeps playing, with a DeprecationWarning. In 0.3 this class and the assignment
    below go, and `gigastep.rollout` is a plain module."""

    def __call__(self, *args: Any, **kwargs: Any) -> RolloutResult:
        warnings.warn(
            "calling the module, gigastep.rollout(...), is deprecated and stops working in "
            "gigastep 0.3: call the function gigastep.rollout.rollout(...) "
            "(from gigastep.rollout import rollout)",
            DeprecationWarning,
            stacklevel=2,
        )
        return rollout(*args, **kwargs)


sys.modules[__name__].__class__ = _DeprecatedCallableModule
