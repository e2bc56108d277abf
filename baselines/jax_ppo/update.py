"""One PPO update as a pure function of a `TrainState`: rollout scan -> GAE -> epochs.

`make_update(setup)` returns ``update(state, lr) -> (state, stats)``, which `jit` compiles
into one program (and `vmap` batches over runs for `--seeds`). The phases are those of
`baselines.train` (see its module doc), in the same order and with the same masks:

    1. rollout: `rollout_steps` steps of `lax.scan` over the auto-resetting batched step
       (`gigastep.env.batched_step_autoreset`, the step `TorchVecEnv` compiles, with the
       same keys and the scripted opponents played inside it); observation and reward
       statistics fixed during the rollout and merged at its end;
    2. GAE (`algorithm.compute_gae`) on the values as acted (with `--value-norm`, mapped to
       the return scale by the statistics before this update), then the value
       normalisation's statistics take in the returns (`value_norm_merge`);
    3. `epochs` passes of `minibatches` clipped-PPO steps on whole sequences of a random
       subset of the learner's agents, replayed from the rollout's initial state;
       `target_kl` stops the later epochs (their steps are computed and discarded).

Rows: agent a of game g is row g * n + a of the flattened batch; the learner owns `rows`.
With `--train-both` a second learner owns `Setup.second`'s rows: its part of the state is
under ``learner1`` (`TrainState.learner`), and it acts, records and learns on its own. Frozen
opponents (pool parts, checkpoint files: `baselines.jax_ppo.frozen`) act on their rows in
the same scan, before the step.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property, lru_cache, partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from gigastep.game.types import EnvConfig
from gigastep.game.xla import platform_form

from ..config import PPOConfig
from ..envs import GameSpec
from ..policies import PolicySpec
from . import algorithm, frozen, policy, running
from .state import EnvCarry, Learner, TrainState, ValueNorm

__all__ = [
    "Setup",
    "initial_state",
    "learn",
    "make_optimizer",
    "make_update",
    "normalized_value_terms",
    "rollout",
    "value_moments",
    "value_norm_init",
    "value_norm_merge",
]

_STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "grad_norm")


@dataclass(frozen=True, eq=False)
class Setup:
    """Everything static of a run: the config, the game, the policy and who plays where."""

    config: PPOConfig
    game: GameSpec
    env_config: EnvConfig
    """The `gigastep.game.types.EnvConfig` of the training game."""
    spec: PolicySpec
    scripted: tuple
    """`gigastep.adapters.torch.ScriptedTeam`s played inside the step."""
    rows: np.ndarray
    """[N] int: the learner's rows of the flattened [B * n] batch."""
    row_game: np.ndarray
    """[N] int: each row's game."""
    row_team: np.ndarray
    row_slot: np.ndarray
    row_type: np.ndarray
    game_label: np.ndarray
    """[B] int: the opponent kind of each game (index into `labels`)."""
    game_team: np.ndarray
    """[B] int: the learner's team in each game (whose result counts)."""
    labels: tuple[str, ...]
    frozen: tuple[frozen.Frozen, ...] = ()
    """The frozen players of the plan (pool parts and checkpoint files), in its order."""
    second: tuple[np.ndarray, ...] | None = None
    """With `--train-both`: learner 1's (rows, row_game, row_team, row_slot, row_type)."""
    score: EnvConfig | None = None
    """The training game with the scenario's own reward weights where `--env` shapes the
    reward (`baselines.envs.unshaped_config`): the step then reports the unshaped reward,
    summed per episode in the state's ``env/unshaped``."""

    @property
    def uses_pool(self) -> bool:
        return any(f.kind == "pool" for f in self.frozen)

    @cached_property
    def learners(self) -> tuple[Setup, ...]:
        """One view of the setup per learner: itself, then (with `--train-both`) the same
        setup with learner 1's rows."""
        if self.second is None:
            return (self,)
        rows, game, team, slot, type_id = self.second
        other = dataclasses.replace(
            self,
            rows=rows,
            row_game=game,
            row_team=team,
            row_slot=slot,
            row_type=type_id,
            second=None,
        )
        return (self, other)


# ------------------------------------------------------------------------------------------
# Value normalisation (`--value-norm`, the twin of `baselines.valuenorm.ValueNorm`)
# ------------------------------------------------------------------------------------------

VALUE_NORM_BETA = 0.99
"""`baselines.valuenorm.BETA`: the weight of the old statistics at each update."""
_VALUE_NORM_EPS = 1e-5


def value_norm_init() -> ValueNorm:
    """The statistics before any update: weight 0, and moments (0, 1)."""
    return ValueNorm(mean=jnp.zeros(()), var=jnp.ones(()), weight=jnp.zeros(()))


def value_norm_merge(vn: ValueNorm, returns: jax.Array, mask: jax.Array) -> ValueNorm:
    """Fold the returns [T, N] where `mask` into the statistics (as `ValueNorm.update`).

    `ValueNorm` keeps float64 exponential moving sums of the returns' first and second
    moments and of the weights; the JAX side runs in float32, where E[x^2] - E[x]^2 would
    lose the variance of returns whose mean is large against their spread. So it keeps the
    same debiased statistics as (weight, mean, variance), merged like two weighted samples
    (the batch's moments are taken about its own mean): mathematically the statistics of
    `ValueNorm`, and `baselines.jax_ppo.convert.value_norm_to_torch` writes its buffers.
    A rollout without any masked entry leaves them unchanged.
    """
    m = mask.astype(jnp.float32)
    n = m.sum()
    mean_b = (m * jnp.where(mask, returns, 0.0)).sum() / jnp.maximum(n, 1.0)
    dev = jnp.where(mask, returns - mean_b, 0.0)
    var_b = (dev * dev).sum() / jnp.maximum(n, 1.0)
    beta = VALUE_NORM_BETA
    old = beta * vn.weight
    weight = old + (1.0 - beta)
    mean = vn.mean + (1.0 - beta) / weight * (mean_b - vn.mean)
    var = (
        old * (vn.var + (vn.mean - mean) ** 2) + (1.0 - beta) * (var_b + (mean_b - mean) ** 2)
    ) / weight
    new = ValueNorm(mean=mean, var=var, weight=weight)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(n >= 1, a, b), new, vn)


def value_moments(vn: ValueNorm) -> policy.ValueMoments:
    """(mean, std) of the statistics (as `ValueNorm.moments`: (0, 1) before any update)."""
    return vn.mean, jnp.sqrt(jnp.maximum(vn.var, _VALUE_NORM_EPS))


def _state_moments(setup: Setup, part: Learner) -> policy.ValueMoments | None:
    if not setup.spec.value_norm:
        return None
    assert part.value_norm is not None  # initial_state holds it with --value-norm
    return value_moments(part.value_norm)


# ------------------------------------------------------------------------------------------
# State
# ------------------------------------------------------------------------------------------


def make_optimizer(config: PPOConfig) -> optax.GradientTransformation:
    """Adam (eps 1e-5, as the PyTorch trainer's) with an injectable learning rate, after
    global-norm clipping when `max_grad_norm` > 0."""
    adam = optax.inject_hyperparams(optax.adam)(learning_rate=config.lr, eps=1e-5)
    if config.max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), adam)
    return optax.chain(optax.identity(), adam)


@lru_cache(maxsize=16)
def _env_reset(setup: Setup):
    """Compiled `key -> (key, obs, states)`, drawn from `key` as `TorchVecEnv.reset` does."""
    from gigastep import env as genv

    def reset(key):
        key, sub = jax.random.split(key)
        obs, states = jax.vmap(partial(genv.reset, setup.env_config))(
            jax.random.split(sub, setup.config.num_envs)
        )
        return key, obs, states

    return jax.jit(reset)


def _state_vectors(setup: Setup, states) -> jax.Array:
    """[B, 2, S] state vectors (S = 0 without a central critic)."""
    if not setup.spec.central_critic:
        return jnp.zeros((setup.config.num_envs, 2, 0))
    from gigastep.adapters.torch import _both_state_vectors

    return _both_state_vectors(setup.env_config, states)


def initial_state(setup: Setup, seed: int, params: policy.Params | None = None) -> TrainState:
    """The `TrainState` of a fresh run with `seed` (params: torch-initialised when None;
    the optional members are those of the setup's options, `baselines.jax_ppo.state`).

    The environment's key is `PRNGKey(seed)`, as `TorchVecEnv(seed=seed)`'s; the trainer's
    own draws (actions, permutations) come from a key folded from it.
    """
    cfg, spec = setup.config, setup.spec
    params = policy.init_params(spec, seed) if params is None else params
    # learner 1 (--train-both): the next network the PyTorch trainer draws
    second = None if setup.second is None else policy.init_params(spec, seed, skip=1)
    key = jax.random.PRNGKey(seed)
    env_key, obs, states = _env_reset(setup)(key)
    b, n, rows = cfg.num_envs, setup.game.n_agents, len(setup.rows)
    obs_norm = running.moments(spec.vector_size)
    value_norm = value_norm_init() if spec.value_norm else None
    learner0 = Learner(
        h=policy.initial_state(spec, rows),
        obs_norm=obs_norm,
        opt=make_optimizer(cfg).init(params),
        params=params,
        returns=jnp.zeros(rows),
        rew_norm=running.moments(1),
        state_norm=running.moments(spec.state_size),
        value_norm=value_norm,
    )
    learner1 = None
    if setup.second is not None and second is not None:
        rows1 = len(setup.second[0])
        learner1 = jax.tree_util.tree_map(jnp.copy, learner0)._replace(  # own buffers (donated)
            h=policy.initial_state(spec, rows1),
            opt=make_optimizer(cfg).init(second),
            params=second,
            returns=jnp.zeros(rows1),
        )
    pool, players = None, None
    if setup.frozen:
        first = None
        if setup.uses_pool:
            pool = frozen.pool_init(params, obs_norm, cfg.pool_size)
            first = {"params": params, "obs_norm": obs_norm}
        players = [frozen.initial(f, first) for f in setup.frozen]
    env = EnvCarry(
        dead=jnp.zeros((b, n), bool),
        first=jnp.ones(b, bool),
        key=env_key,
        obs=obs,
        states=states,
        sv=_state_vectors(setup, states),
        unshaped=None if setup.score is None else jnp.zeros((b, n), jnp.float32),
    )
    return TrainState(
        env=env,
        frozen=players,
        key=jax.random.fold_in(key, 1),
        learner1=learner1,
        pool=pool,
        update=jnp.zeros((), jnp.int32),
        **learner0._asdict(),
    )


# ------------------------------------------------------------------------------------------
# Rollout
# ------------------------------------------------------------------------------------------


def _one_hot(index: np.ndarray, size: int) -> jax.Array:
    return jax.nn.one_hot(jnp.asarray(index), size, dtype=jnp.float32)


def _critic_input(setup: Setup, part: Learner, sv: jax.Array) -> jax.Array | None:
    """[N, S + slots + K] central-critic input of state vectors [B, 2, S] (None: IPPO)."""
    spec = setup.spec
    if not spec.central_critic:
        return None
    own = sv[setup.row_game, setup.row_team]
    return jnp.concatenate(
        [
            running.normalize(part.state_norm, own, setup.config.norm_obs),
            _one_hot(setup.row_slot, spec.n_slots),
            _one_hot(setup.row_type, spec.n_types),
        ],
        -1,
    )


@lru_cache(maxsize=16)
def _game_step(setup: Setup):
    """`gigastep.env.batched_step_autoreset(states, actions, keys)` of the setup's game, for
    a leading game axis, that stays one batched step under `vmap` (`--seeds`).

    A plain `vmap` over runs would turn the step's branches (resetting only the finished
    games, observing only their last state) into selects that reset and observe every game
    at every step. Its batching rule instead lays the K runs' B games side by side as one
    batch of K * B games (each game is computed on its own, so the results are the same) and
    splits the outputs back into runs.
    """
    from gigastep import env as genv

    config, central, score = setup.env_config, setup.spec.central_critic, setup.score

    @jax.custom_batching.custom_vmap
    def step(states, actions, keys):
        return genv.batched_step_autoreset(
            config, states, actions, keys, final_obs=True, final_state=central, score=score
        )

    @step.def_vmap
    def _runs_as_games(k, in_batched, states, actions, keys):
        def widen(tree, batched):
            return jax.tree_util.tree_map(
                lambda x, b: (x if b else jnp.broadcast_to(x, (k, *x.shape))).reshape(
                    (k * x.shape[int(b)], *x.shape[1 + int(b) :])
                ),
                tree,
                batched,
            )

        args = [widen(a, b) for a, b in zip((states, actions, keys), in_batched, strict=True)]
        out = step(*args)
        split = jax.tree_util.tree_map(lambda x: x.reshape((k, -1, *x.shape[1:])), out)
        return split, jax.tree_util.tree_map(lambda _: True, out)

    return step


def _env_step(setup: Setup, env: EnvCarry, actions: jax.Array):
    """`TorchVecEnv.step`'s compiled body: key split, scripted teams, auto-resetting step."""
    from gigastep.adapters.torch import _apply_scripted

    key, sub = jax.random.split(env.key)
    states = env.states
    if setup.scripted:
        actions = _apply_scripted(
            setup.env_config, setup.scripted, states, actions, jax.random.fold_in(sub, 1)
        )
    keys = jax.random.split(sub, actions.shape[0])
    obs, states, rewards, dones, ended, info = _game_step(setup)(states, actions, keys)
    return key, obs, states, rewards, dones, ended, info


_FROZEN_STREAM = 2**31 - 1
"""`fold_in` of the rollout key that gives the frozen players' draws (the learner's are
`fold_in(key, t)`, t < rollout_steps)."""
_DYNAMIC = ("h", "seat")
"""The parts of a frozen player's state that change during a rollout."""


def _begin_frozen(setup: Setup, state: TrainState, key: jax.Array) -> list[dict]:
    """The frozen players at the rollout's start: each pool part draws its member."""
    players = list(state.frozen or [])
    first = state.env.first
    for j, f in enumerate(setup.frozen):
        if f.kind == "pool":
            assert state.pool is not None  # initial_state holds it with a pool part
            member = frozen.draw(state.pool, jax.random.fold_in(key, j))
            players[j] = frozen.begin_rollout(players[j], member, first[f.row_game])
    return players


N_OUTCOMES = 7
"""Rows of the outcome counts: `baselines.collect.OUTCOME_COLUMNS`."""


def _outcomes(setup: Setup, ended, info, running) -> tuple:
    """(counts [7, labels]: wins, draws, losses, games, summed lengths, summed learner-team
    returns and unshaped returns of the games that ended, per opponent kind; episode sums [4]:
    games, lengths, team 0's and team 1's returns; the running unshaped returns [B, n] or
    None) of one step (as the PyTorch trainer's outcome counts).

    `running` holds every game's unshaped return so far where the step reports one
    (`Setup.score`), else None (the unshaped return is then the episode return)."""
    e = ended.astype(jnp.float32)
    team = jnp.asarray(setup.game_team)
    winner = info.winner
    teams = np.asarray(setup.game.teams)
    sizes = np.maximum([np.sum(teams == 0), np.sum(teams == 1)], 1)
    team_mean = jnp.asarray(np.eye(2)[teams] / sizes, jnp.float32)  # [n, 2]
    returns = info.episode_return.astype(jnp.float32) @ team_mean  # [B, 2]
    mine = jnp.take_along_axis(returns, team[:, None], axis=1)[:, 0]
    if info.score is None:
        mine_unshaped = mine
    else:  # summed as the game sums its own return
        running = running + info.score
        unshaped = running.astype(jnp.float32) @ team_mean
        mine_unshaped = jnp.take_along_axis(unshaped, team[:, None], axis=1)[:, 0]
        running = jnp.where(ended[:, None], 0.0, running)
    length = info.episode_length.astype(jnp.float32)
    per_game = jnp.stack(
        [
            winner == team,
            winner == -1,
            winner == 1 - team,
            jnp.ones_like(ended),
            length,
            mine,
            mine_unshaped,
        ]
    )
    counts = (per_game.astype(jnp.float32) * e) @ _one_hot(setup.game_label, len(setup.labels))
    episode = jnp.concatenate(
        [e.sum()[None], (length * e).sum()[None], (returns * e[:, None]).sum(0)]
    )
    return counts, episode, running


_LEARNER1_STREAM = 2**31 - 2
"""`fold_in` of the rollout key that gives learner 1's draws."""


class _Sums(NamedTuple):
    """One learner's (sum, sum of squares, count) of a rollout (`running.sums`), for the
    statistics merged at its end."""

    obs: tuple
    """Of the alive rows' raw observations ([L] features)."""
    rew: tuple
    """Of the discounted returns ([1] feature; zeros without `--scale-rewards`)."""
    state: tuple
    """Of the alive rows' state vectors ([S] features)."""


def _zero_sums(spec: PolicySpec) -> _Sums:
    return _Sums(
        obs=(jnp.zeros(spec.vector_size), jnp.zeros(spec.vector_size), jnp.zeros(())),
        state=(jnp.zeros(spec.state_size), jnp.zeros(spec.state_size), jnp.zeros(())),
        rew=(jnp.zeros(1), jnp.zeros(1), jnp.zeros(())),
    )


class Totals(NamedTuple):
    """The outcomes counted over a rollout (`_outcomes`)."""

    counts: jax.Array
    """[7, labels] float32: `N_OUTCOMES` rows per opponent kind."""
    episode: jax.Array
    """[4] float32: games ended, their summed lengths, team 0's and team 1's returns."""


class _StepCarry(NamedTuple):
    """What the rollout's scan carries from one step to the next (per learner: lists)."""

    env: EnvCarry
    h: list
    """Each learner's recurrent state."""
    returns: list
    """Each learner's [N] discounted returns."""
    sums: list[_Sums]
    totals: Totals
    frozen: list[dict]
    """Each frozen player's parts that change during the rollout (`_DYNAMIC`)."""


class _Acting:
    """One learner's constants during a rollout: its rows, statistics and parameters."""

    def __init__(self, view: Setup, part: Learner, key: jax.Array):
        cfg, spec = view.config, view.spec
        self.view, self.part, self.key = view, part, key
        self.rows, self.row_game = jnp.asarray(view.rows), jnp.asarray(view.row_game)
        self.types = _one_hot(view.row_type, spec.n_types)
        self.rew_scale = running.reward_scale(part.rew_norm)
        self.moments = _state_moments(view, part)
        self.norm_obs = cfg.norm_obs and spec.obs_norm_size > 0  # none for entity rows

    def norm(self, raw):
        return running.normalize(self.part.obs_norm, raw, self.norm_obs)

    def critic_input(self, sv):
        return _critic_input(self.view, self.part, sv)


def rollout(
    setup: Setup, state: TrainState, key: jax.Array, runs: str | None = None
) -> tuple[TrainState, list[dict], Totals]:
    """One rollout from `state` (see the module doc): (state, buffers, totals), one buffer
    per learner (`runs`: the vmap axis name over runs, see `make_update`)."""
    cfg, spec, game = setup.config, setup.spec, setup.game
    b, n, t_len = cfg.num_envs, game.n_agents, cfg.rollout_steps
    act_shape = () if game.discrete else (3,)
    act_dtype = jnp.int32 if game.discrete else jnp.float32
    learners = [
        _Acting(
            view,
            state.learner(i),
            key if i == 0 else jax.random.fold_in(key, _LEARNER1_STREAM),
        )
        for i, view in enumerate(setup.learners)
    ]
    draw_key, frozen_key = jax.random.split(jax.random.fold_in(key, _FROZEN_STREAM))
    players = _begin_frozen(setup, state, draw_key)

    def learner_step(a: _Acting, env, h, t):
        raw = env.obs.reshape(b * n, -1)[a.rows]
        first = env.first[a.row_game]
        alive = first | ~env.dead.reshape(-1)[a.rows]
        obs = a.norm(raw)
        critic_in = a.critic_input(env.sv)
        actions, logp, value, h = policy.act(
            spec,
            a.part.params,
            obs,
            a.types,
            first,
            h,
            critic_in,
            jax.random.fold_in(a.key, t),
            False,
            a.moments,
        )
        record = {
            "obs": obs,
            "critic_in": critic_in if critic_in is not None else jnp.zeros((len(a.rows), 0)),
            "first": first,
            "alive": alive,
            "actions": actions,
            "logp": logp,
            "values": value,
        }
        return raw, actions, h, record

    def learner_outcome(a: _Acting, env, raw, record, h, returns, sums, after):
        """The step's rewards, continuation flags and final values of learner a's rows, and
        its statistics' sums."""
        states, rewards, dones, ended, info = after
        alive = record["alive"]
        alive_after = ~dones.reshape(-1)[a.rows]
        cont, boot = algorithm.trajectory_flags(
            cfg.signal, alive_after, ended[a.row_game], info.truncated[a.row_game]
        )
        team = cfg.signal == "team"
        valued = jnp.ones_like(alive) if team else alive  # (`baselines.buffer`)
        if team:
            rewards = algorithm.signal_rewards("team", rewards, info.score, setup.game.teams)

        def final_values(_):
            final = a.norm(info.final_obs.reshape(b * n, -1)[a.rows])
            fin_crit = None
            if spec.central_critic:
                fin_crit = a.critic_input(_state_vectors(setup, info.final_state))
            starts = jnp.zeros_like(record["first"])
            return policy.value(spec, a.part.params, final, a.types, starts, h, fin_crit, a.moments)

        truncated = info.truncated.any()
        if runs is not None:  # one branch for every run (under vmap, not a select of both)
            truncated = jax.lax.psum(truncated.astype(jnp.int32), runs) > 0
        fin = platform_form(  # a branch on the CPU, a select elsewhere (same values)
            truncated,
            cpu=lambda t: jax.lax.cond(t, final_values, lambda _: jnp.zeros(len(a.rows)), None),
            gpu=lambda t: jnp.where(t, final_values(None), jnp.zeros(len(a.rows))),
        )
        r = jnp.where(valued, rewards.reshape(-1)[a.rows], 0.0)
        if cfg.scale_rewards:
            returns = cfg.gamma * returns + r
            rew_sums = running.sums(returns[:, None], valued)
            returns = returns * cont
            r = r * a.rew_scale
        else:
            rew_sums = (jnp.zeros(1), jnp.zeros(1), jnp.zeros(()))
        sums = _Sums(  # (keywords in the order the sums are computed)
            obs=running.add_sums(sums.obs, running.sums(raw, alive)),
            state=running.add_sums(
                sums.state, running.sums(env.sv[a.view.row_game, a.view.row_team], alive)
            ),
            rew=running.add_sums(sums.rew, rew_sums),
        )
        record = dict(record, rewards=r, cont=cont, boot=boot, final_values=fin)
        if team:
            record["valued"] = valued
        return record, returns, sums

    def step(carry: _StepCarry, t):
        env, totals = carry.env, carry.totals
        full = jnp.zeros((b * n, *act_shape), act_dtype)
        acted = []
        for a, h in zip(learners, carry.h, strict=True):
            raw, actions, h, record = learner_step(a, env, h, t)
            full = full.at[a.rows].set(actions.astype(act_dtype))
            acted.append((raw, record, h))
        moved = []
        for j, f in enumerate(setup.frozen):
            player = {**players[j], **carry.frozen[j]}
            kj = jax.random.fold_in(jax.random.fold_in(frozen_key, j), t)
            raw_j = env.obs.reshape(b * n, -1)[jnp.asarray(f.rows)]
            first_j = env.first[f.row_game]
            norm_obs = cfg.norm_obs and spec.obs_norm_size > 0
            a_j, player = frozen.act(f, player, raw_j, first_j, kj, norm_obs, runs)
            full = full.at[jnp.asarray(f.rows)].set(a_j.astype(act_dtype))
            moved.append({k: v for k, v in player.items() if k in _DYNAMIC})
        env_key, obs_next, states, rewards, dones, ended, info = _env_step(
            setup, env, full.reshape(b, n, *act_shape)
        )
        after = (states, rewards, dones, ended, info)
        records, new_h, new_returns, new_sums = [], [], [], []
        per_learner = zip(learners, acted, carry.returns, carry.sums, strict=True)
        for a, (raw, record, h), ret, sm in per_learner:
            record, ret, sm = learner_outcome(a, env, raw, record, h, ret, sm, after)
            records.append(record)
            new_h.append(h)
            new_returns.append(ret)
            new_sums.append(sm)
        counts, episode, unshaped = _outcomes(setup, ended, info, env.unshaped)
        totals = Totals(counts=totals.counts + counts, episode=totals.episode + episode)
        env = EnvCarry(
            dead=dones,
            first=ended,
            key=env_key,
            obs=obs_next,
            states=states,
            sv=_state_vectors(setup, states),
            unshaped=unshaped,
        )
        return _StepCarry(env, new_h, new_returns, new_sums, totals, moved), records

    totals = Totals(counts=jnp.zeros((N_OUTCOMES, len(setup.labels))), episode=jnp.zeros(4))
    h0 = [a.part.h for a in learners]
    carry = _StepCarry(
        env=state.env,
        h=h0,
        returns=[a.part.returns for a in learners],
        sums=[_zero_sums(spec) for _ in learners],
        totals=totals,
        frozen=[{k: v for k, v in p.items() if k in _DYNAMIC} for p in players],
    )
    carry, bufs = jax.lax.scan(step, carry, jnp.arange(t_len))
    env, hs, sums = carry.env, carry.h, carry.sums
    new = state._replace(env=env)
    if setup.frozen:
        new = new._replace(frozen=[{**p, **d} for p, d in zip(players, carry.frozen, strict=True)])
    for i, a in enumerate(learners):
        buf = bufs[i]
        buf["next_values"] = policy.value(
            spec,
            a.part.params,
            a.norm(env.obs.reshape(b * n, -1)[a.rows]),
            a.types,
            env.first[a.row_game],
            hs[i],
            a.critic_input(env.sv),
            a.moments,
        )
        buf["h0"] = h0[i]
        part = a.part._replace(h=hs[i], returns=carry.returns[i])
        if cfg.norm_obs:
            if spec.obs_norm_size:  # entity rows are not normalised
                part = part._replace(obs_norm=running.merge(a.part.obs_norm, sums[i].obs))
            if spec.central_critic:
                part = part._replace(state_norm=running.merge(a.part.state_norm, sums[i].state))
        if cfg.scale_rewards:
            part = part._replace(rew_norm=running.merge(a.part.rew_norm, sums[i].rew))
        new = new.with_learner(i, part)
    return new, bufs, carry.totals


# ------------------------------------------------------------------------------------------
# Learning
# ------------------------------------------------------------------------------------------


def _minibatch_loss(setup: Setup, params, buf, adv, ret, idx, valid, moments=None):
    """The PPO loss of the rows `idx` (`valid`: not padding); with `--value-norm` the value
    terms are compared standardised by `moments` (as `normalized_value_terms`)."""
    cfg, spec = setup.config, setup.spec
    types = _one_hot(setup.row_type, spec.n_types)[idx]
    mask = buf["alive"][:, idx] & valid[None]
    critic_in = buf["critic_in"][:, idx] if spec.central_critic else None
    logp, entropy, values = policy.evaluate(
        spec,
        params,
        buf["obs"][:, idx],
        types,
        buf["first"][:, idx],
        policy.state_rows(spec, buf["h0"], idx),
        buf["actions"][:, idx],
        critic_in,
        moments,
    )
    old, target = buf["values"][:, idx], ret[:, idx]
    value_mask = buf["valued"][:, idx] & valid[None] if "valued" in buf else None
    if spec.value_norm:
        values, old, target = normalized_value_terms(moments, values, old, target)
    return algorithm.ppo_loss(
        logp,
        buf["logp"][:, idx],
        adv[:, idx],
        values,
        old,
        target,
        entropy,
        mask,
        clip=cfg.clip,
        vf_coef=cfg.vf_coef,
        ent_coef=cfg.ent_coef,
        clip_value=cfg.clip_value,
        norm_adv=cfg.norm_adv,
        value_mask=value_mask,
    )


def normalized_value_terms(moments: policy.ValueMoments, values, old_values, returns):
    """(values, old values, returns) standardised by the value moments (mean, std), in
    `ValueNorm.normalize`'s operations."""
    mean, std = moments
    return tuple((x - mean) / std for x in (values, old_values, returns))


class _MinibatchCarry(NamedTuple):
    """What `learn`'s minibatch scan carries from one minibatch step to the next."""

    params: policy.Params
    opt: Any
    stopped: jax.Array
    """() bool: `target_kl` stopped the epochs (the steps are computed and discarded)."""
    sums: jax.Array
    """[6] float32: the kept steps' `_STAT_NAMES` summed."""
    steps: jax.Array
    """() int32: the minibatch steps kept."""
    finite: jax.Array
    """() bool: every kept step's gradient norm was finite."""


class _EpochCarry(NamedTuple):
    """What `learn`'s epoch scan carries from one epoch to the next."""

    fit: _MinibatchCarry
    epochs: jax.Array
    """() int32: the epochs run (not stopped by `target_kl`)."""


def learn(
    setup: Setup, state: Learner, buf: dict, lr, key: jax.Array
) -> tuple[Learner, dict[str, jax.Array]]:
    """GAE and `epochs` passes of minibatch steps on one learner's part `state` and its
    rollout buffer: (its part, stats) (see the module doc)."""
    cfg = setup.config
    adv, ret = algorithm.compute_gae(
        buf["rewards"],
        buf["values"],
        buf["cont"],
        buf["boot"],
        buf["final_values"],
        buf["next_values"],
        cfg.gamma,
        cfg.gae_lambda,
    )
    moments = None
    valued = buf.get("valued", buf["alive"])  # the team signal's value rows (`rollout`)
    if setup.spec.value_norm:
        assert state.value_norm is not None  # initial_state holds it with --value-norm
        value_norm = value_norm_merge(state.value_norm, ret, valued)
        state = state._replace(value_norm=value_norm)
        moments = value_moments(value_norm)
    total = len(setup.rows)
    size = math.ceil(total / cfg.minibatches)
    chunks = math.ceil(total / size)
    optimizer = make_optimizer(cfg)
    grad_fn = jax.value_and_grad(partial(_minibatch_loss, setup), has_aux=True)
    clip_state, adam_state = state.opt
    hyper = {**adam_state.hyperparams, "learning_rate": jnp.asarray(lr, jnp.float32)}
    opt = (clip_state, adam_state._replace(hyperparams=hyper))

    def minibatch(carry: _MinibatchCarry, xs):
        params, opt, stopped = carry.params, carry.opt, carry.stopped
        idx, valid = xs
        (_, parts), grads = grad_fn(params, buf, adv, ret, idx, valid, moments)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        updates, new_opt = optimizer.update(grads, opt, params)
        new_params = optax.apply_updates(params, updates)
        go = ~stopped
        keep = partial(jax.tree_util.tree_map, lambda new, old: jnp.where(go, new, old))
        stats = jnp.stack([parts[k] for k in _STAT_NAMES[:-1]] + [norm])
        carry = _MinibatchCarry(
            params=keep(new_params, params),
            opt=keep(new_opt, opt),
            stopped=stopped,
            sums=carry.sums + jnp.where(go, stats, 0.0),
            steps=carry.steps + go.astype(jnp.int32),
            finite=carry.finite & (jnp.isfinite(norm) | stopped),
        )
        return carry, jnp.where(go, stats[3], 0.0)

    def epoch(carry: _EpochCarry, k):
        stopped = carry.fit.stopped
        perm = jax.random.permutation(k, total)
        padded = jnp.concatenate([perm, jnp.full(chunks * size - total, total)])
        idx = padded.reshape(chunks, size)
        valid = idx < total
        fit, kls = jax.lax.scan(minibatch, carry.fit, (jnp.minimum(idx, total - 1), valid))
        epochs = carry.epochs + (~stopped).astype(jnp.int32)
        if cfg.target_kl is not None:
            stopped = stopped | (kls.sum() / jnp.maximum(fit.steps, 1) > cfg.target_kl)
        return _EpochCarry(fit._replace(stopped=stopped), epochs), None

    start = _MinibatchCarry(
        params=state.params,
        opt=opt,
        stopped=jnp.zeros((), bool),
        sums=jnp.zeros(len(_STAT_NAMES)),
        steps=jnp.zeros((), jnp.int32),
        finite=jnp.ones((), bool),
    )
    carry = _EpochCarry(start, jnp.zeros((), jnp.int32))
    carry, _ = jax.lax.scan(epoch, carry, jax.random.split(key, cfg.epochs))
    params, opt, sums, steps = carry.fit.params, carry.fit.opt, carry.fit.sums, carry.fit.steps
    finite = carry.fit.finite & jnp.all(
        jnp.stack([jnp.isfinite(x).all() for x in jax.tree_util.tree_leaves(params)])
    )
    stats = dict(zip(_STAT_NAMES, sums / jnp.maximum(steps, 1), strict=True))
    stats["explained_variance"] = _explained_variance(ret, buf["values"], valued)
    stats["epochs"] = carry.epochs
    stats["finite"] = finite
    return state._replace(params=params, opt=opt), stats


def _explained_variance(returns, values, mask):
    """1 - Var(R - V) / Var(R) over the masked entries (NaN when undefined)."""
    m = mask.astype(jnp.float32)
    n = m.sum()
    d = returns - values

    def var(x):
        mean = (m * x).sum() / jnp.maximum(n, 1)
        return (m * x * x).sum() / jnp.maximum(n, 1) - mean * mean

    var_r = var(returns)
    return jnp.where((n >= 2) & (var_r > 0), 1.0 - var(d) / var_r, jnp.nan)


def make_update(setup: Setup, runs: str | None = None):
    """``update(state, lr) -> (state, stats)``: one rollout and its learning (pure).

    `runs`: when the update is vmapped over runs (`--seeds`), that vmap's `axis_name` (the
    frozen opponents use it to run a pool seat only when some run needs it)."""

    def update(state: TrainState, lr) -> tuple[TrainState, dict[str, jax.Array]]:
        key, k_roll, k_learn = jax.random.split(state.key, 3)
        state, bufs, totals = rollout(setup, state._replace(key=key), k_roll, runs)
        learned: dict[str, Any] = {}
        for i, view in enumerate(setup.learners):
            k_i = k_learn if i == 0 else jax.random.fold_in(k_learn, _LEARNER1_STREAM)
            part, out = learn(view, state.learner(i), bufs[i], lr, k_i)
            state = state.with_learner(i, part)
            learned.update(out if i == 0 else {f"{k}_team1": v for k, v in out.items()})
        done = state.update + 1
        if setup.uses_pool:  # the learner after every pool_every-th update joins the pool
            assert state.pool is not None  # initial_state holds it with a pool part
            add = done % setup.config.pool_every == 0
            pool = frozen.pool_add(state.pool, state.params, state.obs_norm, done, add)
            state = state._replace(pool=pool)
        return state._replace(update=done), {**totals._asdict(), **learned}

    return update
