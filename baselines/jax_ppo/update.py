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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from baselines.config import PPOConfig
from baselines.envs import GameSpec
from baselines.jax_ppo import algorithm, frozen, policy
from baselines.policies import PolicySpec
from gigastep.types import EnvConfig

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
    """The `gigastep.types.EnvConfig` of the training game."""
    spec: PolicySpec
    scripted: tuple
    """`gigastep.torch.ScriptedTeam`s played inside the step."""
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

    @property
    def uses_pool(self) -> bool:
        return any(f.kind == "pool" for f in self.frozen)


# ------------------------------------------------------------------------------------------
# Normalisers (float32 running moments, merged once per rollout as in baselines.normalize)
# ------------------------------------------------------------------------------------------


def _moments(size: int) -> dict:
    return {"count": jnp.zeros(()), "mean": jnp.zeros(size), "m2": jnp.zeros(size)}


def _var(m: dict) -> jax.Array:
    return jnp.where(m["count"] > 0, m["m2"] / jnp.maximum(m["count"], 1.0), 1.0)


def _normalize(m: dict, x: jax.Array, enabled: bool) -> jax.Array:
    if not enabled or x.shape[-1] == 0:
        return x
    return jnp.clip((x - m["mean"]) * jax.lax.rsqrt(_var(m) + 1e-8), -10.0, 10.0)


def _sums(x: jax.Array, mask: jax.Array) -> tuple:
    w = mask.astype(x.dtype)
    return (w @ x, w @ (x * x), w.sum())


def _merge(m: dict, sums: tuple) -> dict:
    """Chan et al.'s parallel update of `m` with the (sum, sum of squares, count) `sums`."""
    s, ss, n_b = sums
    mean_b = s / jnp.maximum(n_b, 1.0)
    m2_b = jnp.maximum(ss - n_b * mean_b * mean_b, 0.0)
    n = m["count"] + n_b
    delta = mean_b - m["mean"]
    w = jnp.where(n > 0, n_b / jnp.maximum(n, 1.0), 0.0)
    return {
        "count": n,
        "mean": m["mean"] + delta * w,
        "m2": m["m2"] + m2_b + delta * delta * m["count"] * w,
    }


def _add_sums(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------------------------------
# Value normalisation (`--value-norm`, the twin of `baselines.valuenorm.ValueNorm`)
# ------------------------------------------------------------------------------------------

VALUE_NORM_BETA = 0.99
"""`baselines.valuenorm.BETA`: the weight of the old statistics at each update."""
_VALUE_NORM_EPS = 1e-5


def value_norm_init() -> dict:
    """The statistics before any update: weight 0, and moments (0, 1)."""
    return {"weight": jnp.zeros(()), "mean": jnp.zeros(()), "var": jnp.ones(())}


def value_norm_merge(vn: dict, returns: jax.Array, mask: jax.Array) -> dict:
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
    old = beta * vn["weight"]
    weight = old + (1.0 - beta)
    mean = vn["mean"] + (1.0 - beta) / weight * (mean_b - vn["mean"])
    var = (
        old * (vn["var"] + (vn["mean"] - mean) ** 2) + (1.0 - beta) * (var_b + (mean_b - mean) ** 2)
    ) / weight
    new = {"weight": weight, "mean": mean, "var": var}
    return jax.tree_util.tree_map(lambda a, b: jnp.where(n >= 1, a, b), new, vn)


def value_moments(vn: dict) -> policy.ValueMoments:
    """(mean, std) of the statistics (as `ValueNorm.moments`: (0, 1) before any update)."""
    return vn["mean"], jnp.sqrt(jnp.maximum(vn["var"], _VALUE_NORM_EPS))


def _state_moments(setup: Setup, state: dict) -> policy.ValueMoments | None:
    return value_moments(state["value_norm"]) if setup.spec.value_norm else None


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
    from gigastep.torch import _both_state_vectors

    return _both_state_vectors(setup.env_config, states)


def initial_state(setup: Setup, seed: int, params: policy.Params | None = None) -> dict:
    """The `TrainState` of a fresh run with `seed` (params: torch-initialised when None;
    with `--value-norm` it also holds the statistics, ``value_norm``).

    The environment's key is `PRNGKey(seed)`, as `TorchVecEnv(seed=seed)`'s; the trainer's
    own draws (actions, permutations) come from a key folded from it.
    """
    cfg, spec = setup.config, setup.spec
    params = policy.init_params(spec, seed) if params is None else params
    key = jax.random.PRNGKey(seed)
    env_key, obs, states = _env_reset(setup)(key)
    b, n, rows = cfg.num_envs, setup.game.n_agents, len(setup.rows)
    out = {
        "params": params,
        "opt": make_optimizer(cfg).init(params),
        "obs_norm": _moments(spec.vector_size),
        "state_norm": _moments(spec.state_size),
        "rew_norm": _moments(1),
        "returns": jnp.zeros(rows),
        "h": policy.initial_state(spec, rows),
        "env": {
            "states": states,
            "key": env_key,
            "obs": obs,
            "first": jnp.ones(b, bool),
            "dead": jnp.zeros((b, n), bool),
            "sv": _state_vectors(setup, states),
        },
        "key": jax.random.fold_in(key, 1),
        "update": jnp.zeros((), jnp.int32),
    }
    if spec.value_norm:  # only then: the state of older checkpoints keeps its leaves
        out["value_norm"] = value_norm_init()
    if setup.frozen:  # likewise: only with frozen opponents
        first = None
        if setup.uses_pool:
            out["pool"] = frozen.pool_init(params, out["obs_norm"], cfg.pool_size)
            first = {"params": params, "obs_norm": out["obs_norm"]}
        out["frozen"] = [frozen.initial(f, first) for f in setup.frozen]
    return out


# ------------------------------------------------------------------------------------------
# Rollout
# ------------------------------------------------------------------------------------------


def _one_hot(index: np.ndarray, size: int) -> jax.Array:
    return jax.nn.one_hot(jnp.asarray(index), size, dtype=jnp.float32)


def _critic_input(setup: Setup, state: dict, sv: jax.Array) -> jax.Array | None:
    """[N, S + slots + K] central-critic input of state vectors [B, 2, S] (None: IPPO)."""
    spec = setup.spec
    if not spec.central_critic:
        return None
    own = sv[setup.row_game, setup.row_team]
    return jnp.concatenate(
        [
            _normalize(state["state_norm"], own, setup.config.norm_obs),
            _one_hot(setup.row_slot, spec.n_slots),
            _one_hot(setup.row_type, spec.n_types),
        ],
        -1,
    )


def _env_step(setup: Setup, env: dict, actions: jax.Array):
    """`TorchVecEnv.step`'s compiled body: key split, scripted teams, auto-resetting step."""
    from gigastep import env as genv
    from gigastep.torch import _apply_scripted

    key, sub = jax.random.split(env["key"])
    states = env["states"]
    if setup.scripted:
        actions = _apply_scripted(
            setup.env_config, setup.scripted, states, actions, jax.random.fold_in(sub, 1)
        )
    obs, states, rewards, dones, ended, info = genv.batched_step_autoreset(
        setup.env_config,
        states,
        actions,
        jax.random.split(sub, actions.shape[0]),
        final_obs=True,
        final_state=setup.spec.central_critic,
    )
    return key, obs, states, rewards, dones, ended, info


_FROZEN_STREAM = 2**31 - 1
"""`fold_in` of the rollout key that gives the frozen players' draws (the learner's are
`fold_in(key, t)`, t < rollout_steps)."""
_DYNAMIC = ("h", "seat")
"""The parts of a frozen player's state that change during a rollout."""


def _begin_frozen(setup: Setup, state: dict, key: jax.Array) -> list[dict]:
    """The frozen players at the rollout's start: each pool part draws its member."""
    players = list(state.get("frozen", []))
    first = state["env"]["first"]
    for j, f in enumerate(setup.frozen):
        if f.kind == "pool":
            member = frozen.draw(state["pool"], jax.random.fold_in(key, j))
            players[j] = frozen.begin_rollout(players[j], member, first[f.row_game])
    return players


def _outcomes(setup: Setup, ended, info) -> tuple:
    """(counts [4, labels]: wins, draws, losses, games; episode sums [4]) of one step."""
    e = ended.astype(jnp.float32)
    team = jnp.asarray(setup.game_team)
    winner = info.winner
    outcome = jnp.stack([winner == team, winner == -1, winner == 1 - team, jnp.ones_like(ended)])
    counts = (outcome.astype(jnp.float32) * e) @ _one_hot(setup.game_label, len(setup.labels))
    teams = np.asarray(setup.game.teams)
    sizes = np.maximum([np.sum(teams == 0), np.sum(teams == 1)], 1)
    team_mean = jnp.asarray(np.eye(2)[teams] / sizes, jnp.float32)  # [n, 2]
    returns = info.episode_return.astype(jnp.float32) @ team_mean
    episode = jnp.concatenate(
        [e.sum()[None], (info.episode_length * e).sum()[None], (returns * e[:, None]).sum(0)]
    )
    return counts, episode


def rollout(setup: Setup, state: dict, key: jax.Array):
    """One rollout from `state` (see the module doc): (state, buffer, stats)."""
    cfg, spec, game = setup.config, setup.spec, setup.game
    p = state["params"]
    b, n, t_len = cfg.num_envs, game.n_agents, cfg.rollout_steps
    rows, row_game = jnp.asarray(setup.rows), jnp.asarray(setup.row_game)
    types = _one_hot(setup.row_type, spec.n_types)
    rew_scale = jax.lax.rsqrt(_var(state["rew_norm"])[0] + 1e-8)
    moments = _state_moments(setup, state)
    act_shape = () if game.discrete else (3,)
    act_dtype = jnp.int32 if game.discrete else jnp.float32

    def norm(raw):
        return _normalize(state["obs_norm"], raw, cfg.norm_obs)

    draw_key, frozen_key = jax.random.split(jax.random.fold_in(key, _FROZEN_STREAM))
    players = _begin_frozen(setup, state, draw_key)

    def step(carry, t):
        env, h, returns, sums, dynamic = carry
        raw = env["obs"].reshape(b * n, -1)[rows]
        first = env["first"][row_game]
        alive = first | ~env["dead"].reshape(-1)[rows]
        obs = norm(raw)
        critic_in = _critic_input(setup, state, env["sv"])
        actions, logp, value, h = policy.act(
            spec, p, obs, types, first, h, critic_in, jax.random.fold_in(key, t), False, moments
        )
        full = jnp.zeros((b * n, *act_shape), act_dtype).at[rows].set(actions.astype(act_dtype))
        moved = []
        for j, f in enumerate(setup.frozen):
            player = {**players[j], **dynamic[j]}
            kj = jax.random.fold_in(jax.random.fold_in(frozen_key, j), t)
            raw_j = env["obs"].reshape(b * n, -1)[jnp.asarray(f.rows)]
            a, player = frozen.act(f, player, raw_j, env["first"][f.row_game], kj, cfg.norm_obs)
            full = full.at[jnp.asarray(f.rows)].set(a.astype(act_dtype))
            moved.append({k: v for k, v in player.items() if k in _DYNAMIC})
        env_key, obs_next, states, rewards, dones, ended, info = _env_step(
            setup, env, full.reshape(b, n, *act_shape)
        )
        alive_after = ~dones.reshape(-1)[rows]
        cont = alive_after & ~ended[row_game]
        boot = alive_after & info.truncated[row_game]

        def final_values(_):
            final = norm(info.final_obs.reshape(b * n, -1)[rows])
            fin_crit = None
            if spec.central_critic:
                fin_crit = _critic_input(setup, state, _state_vectors(setup, info.final_state))
            return policy.value(spec, p, final, types, jnp.zeros_like(first), h, fin_crit, moments)

        fin = jax.lax.cond(
            info.truncated.any(), final_values, lambda _: jnp.zeros(len(setup.rows)), None
        )
        r = jnp.where(alive, rewards.reshape(-1)[rows], 0.0)
        if cfg.scale_rewards:
            returns = cfg.gamma * returns + r
            rew_sums = _sums(returns[:, None], alive)
            returns = returns * cont
            r = r * rew_scale
        else:
            rew_sums = (jnp.zeros(1), jnp.zeros(1), jnp.zeros(()))
        obs_sums = _sums(raw, alive)
        sv_next = _state_vectors(setup, states)
        state_sums = _sums(env["sv"][setup.row_game, setup.row_team], alive)
        counts, episode = _outcomes(setup, ended, info)
        sums = {
            "obs": _add_sums(sums["obs"], obs_sums),
            "state": _add_sums(sums["state"], state_sums),
            "rew": _add_sums(sums["rew"], rew_sums),
            "counts": sums["counts"] + counts,
            "episode": sums["episode"] + episode,
        }
        env = {
            "states": states,
            "key": env_key,
            "obs": obs_next,
            "first": ended,
            "dead": dones,
            "sv": sv_next,
        }
        record = {
            "obs": obs,
            "critic_in": critic_in if critic_in is not None else jnp.zeros((len(setup.rows), 0)),
            "first": first,
            "alive": alive,
            "actions": actions,
            "logp": logp,
            "values": value,
            "rewards": r,
            "cont": cont,
            "boot": boot,
            "final_values": fin,
        }
        return (env, h, returns, sums, moved), record

    zero: dict[str, Any] = {
        "obs": (jnp.zeros(spec.vector_size), jnp.zeros(spec.vector_size), jnp.zeros(())),
        "state": (jnp.zeros(spec.state_size), jnp.zeros(spec.state_size), jnp.zeros(())),
        "rew": (jnp.zeros(1), jnp.zeros(1), jnp.zeros(())),
        "counts": jnp.zeros((4, len(setup.labels))),
        "episode": jnp.zeros(4),
    }
    h0 = state["h"]
    dynamic = [{k: v for k, v in p.items() if k in _DYNAMIC} for p in players]
    carry = (state["env"], h0, state["returns"], zero, dynamic)
    (env, h, returns, sums, dynamic), buf = jax.lax.scan(step, carry, jnp.arange(t_len))
    last = norm(env["obs"].reshape(b * n, -1)[rows])
    buf["next_values"] = policy.value(
        spec,
        p,
        last,
        types,
        env["first"][row_game],
        h,
        _critic_input(setup, state, env["sv"]),
        moments,
    )
    buf["h0"] = h0
    new = dict(state, env=env, h=h, returns=returns)
    if setup.frozen:
        new["frozen"] = [{**p, **d} for p, d in zip(players, dynamic, strict=True)]
    if cfg.norm_obs:
        new["obs_norm"] = _merge(state["obs_norm"], sums["obs"])
        if spec.central_critic:
            new["state_norm"] = _merge(state["state_norm"], sums["state"])
    if cfg.scale_rewards:
        new["rew_norm"] = _merge(state["rew_norm"], sums["rew"])
    return new, buf, {"counts": sums["counts"], "episode": sums["episode"]}


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
    )


def normalized_value_terms(moments: policy.ValueMoments, values, old_values, returns):
    """(values, old values, returns) standardised by the value moments (mean, std), in
    `ValueNorm.normalize`'s operations."""
    mean, std = moments
    return tuple((x - mean) / std for x in (values, old_values, returns))


def learn(setup: Setup, state: dict, buf: dict, lr, key: jax.Array):
    """GAE and `epochs` passes of minibatch steps: (state, stats) (see the module doc)."""
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
    if setup.spec.value_norm:
        state = dict(state, value_norm=value_norm_merge(state["value_norm"], ret, buf["alive"]))
        moments = value_moments(state["value_norm"])
    total = len(setup.rows)
    size = math.ceil(total / cfg.minibatches)
    chunks = math.ceil(total / size)
    optimizer = make_optimizer(cfg)
    grad_fn = jax.value_and_grad(partial(_minibatch_loss, setup), has_aux=True)
    clip_state, adam_state = state["opt"]
    hyper = {**adam_state.hyperparams, "learning_rate": jnp.asarray(lr, jnp.float32)}
    opt = (clip_state, adam_state._replace(hyperparams=hyper))

    def minibatch(carry, xs):
        params, opt, stopped, sums, steps, finite = carry
        idx, valid = xs
        (_, parts), grads = grad_fn(params, buf, adv, ret, idx, valid, moments)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
        updates, new_opt = optimizer.update(grads, opt, params)
        new_params = optax.apply_updates(params, updates)
        go = ~stopped
        keep = partial(jax.tree_util.tree_map, lambda new, old: jnp.where(go, new, old))
        stats = jnp.stack([parts[k] for k in _STAT_NAMES[:-1]] + [norm])
        carry = (
            keep(new_params, params),
            keep(new_opt, opt),
            stopped,
            sums + jnp.where(go, stats, 0.0),
            steps + go.astype(jnp.int32),
            finite & (jnp.isfinite(norm) | stopped),
        )
        return carry, jnp.where(go, stats[3], 0.0)

    def epoch(carry, k):
        params, opt, stopped, sums, steps, finite, done = carry
        perm = jax.random.permutation(k, total)
        padded = jnp.concatenate([perm, jnp.full(chunks * size - total, total)])
        idx = padded.reshape(chunks, size)
        valid = idx < total
        inner = (params, opt, stopped, sums, steps, finite)
        inner, kls = jax.lax.scan(minibatch, inner, (jnp.minimum(idx, total - 1), valid))
        params, opt, _, sums, steps, finite = inner
        done = done + (~stopped).astype(jnp.int32)
        if cfg.target_kl is not None:
            stopped = stopped | (kls.sum() / jnp.maximum(steps, 1) > cfg.target_kl)
        return (params, opt, stopped, sums, steps, finite, done), None

    carry = (
        state["params"],
        opt,
        jnp.zeros((), bool),
        jnp.zeros(len(_STAT_NAMES)),
        jnp.zeros((), jnp.int32),
        jnp.ones((), bool),
        jnp.zeros((), jnp.int32),
    )
    carry, _ = jax.lax.scan(epoch, carry, jax.random.split(key, cfg.epochs))
    params, opt, _, sums, steps, finite, done = carry
    finite = finite & jnp.all(
        jnp.stack([jnp.isfinite(x).all() for x in jax.tree_util.tree_leaves(params)])
    )
    stats = dict(zip(_STAT_NAMES, sums / jnp.maximum(steps, 1), strict=True))
    stats["explained_variance"] = _explained_variance(ret, buf["values"], buf["alive"])
    stats["epochs"] = done
    stats["finite"] = finite
    return dict(state, params=params, opt=opt), stats


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


def make_update(setup: Setup):
    """``update(state, lr) -> (state, stats)``: one rollout and its learning (pure)."""

    def update(state: dict, lr):
        key, k_roll, k_learn = jax.random.split(state["key"], 3)
        state, buf, stats = rollout(setup, dict(state, key=key), k_roll)
        state, learned = learn(setup, state, buf, lr, k_learn)
        done = state["update"] + 1
        if setup.uses_pool:  # the learner after every pool_every-th update joins the pool
            add = done % setup.config.pool_every == 0
            pool = frozen.pool_add(state["pool"], state["params"], state["obs_norm"], done, add)
            state = dict(state, pool=pool)
        return dict(state, update=done), {**stats, **learned}

    return update
