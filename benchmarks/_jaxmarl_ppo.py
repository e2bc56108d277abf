"""JaxMARL-style IPPO and MAPPO on `gigastep.jaxmarl` for a wall-clock budget, their parameters
on disk, and a player that plays them in `gigastep.eval.matches.evaluate`.

Adapted from JaxMARL's `baselines/IPPO/ippo_ff_mpe.py` and `baselines/MAPPO/mappo_rnn_smax.py`
(FLAIROx/JaxMARL, Apache-2.0): the same actor-critic networks (orthogonal initialisation, a
0.01-scaled policy head), per-agent batching (agent-major rows), GAE with per-agent dones,
clipped policy and value losses, normalised advantages and minibatch epochs. The PyPI
package `jaxmarl` ships the environments and wrappers but not these baseline scripts, so they
are rewritten here; what differs from the upstream files:

- the training runs for a wall-clock budget instead of `TOTAL_TIMESTEPS` (one compiled
  rollout and one compiled update, called from Python until the budget is spent), so the
  learning rate is constant (`ANNEAL_LR` anneals over a number of updates known in advance);
- the learning team plays against scripted opponents inside the step
  (`gigastep.jaxmarl.make(..., opponent=...)`), several at once as a mix: each opponent plays
  its share of the games of every rollout (the project's PPO trains against the same mix);
- MAPPO is feed-forward: mappo_rnn_smax's GRU is replaced by a dense layer of the same width,
  so the player needs no recurrent state (the scenario here has full observations); its
  centralised critic reads the adapter's `world_state` with a one-hot agent id appended, as
  `SMAXWorldStateWrapper(obs_with_agent_id=True)` gives it, and actor and critic are
  optimised apart (each its own gradient clipping), as in the upstream file;
- categorical sampling, log-probabilities and entropies are computed from the logits with
  `jax.random.categorical` / `log_softmax` (distrax's `Categorical` does the same).

Hyperparameters (`IPPO` and `MAPPO` below): IPPO those of `baselines/IPPO/config/
ippo_ff_mpe.yaml` (lr 2.5e-4, 16 games x 128 steps, 4 epochs of 4 minibatches, clip 0.2,
entropy 0.01, value 0.5, gradient norm 0.5, tanh, width 64); MAPPO those of
`baselines/MAPPO/config/mappo_homogenous_rnn_smax.yaml` (lr 4e-3, 128 games x 128 steps,
4 epochs of 4 minibatches, clip 0.05, entropy 0.01, value 0.5, gradient norm 0.25, relu,
width 128); gamma 0.99 and GAE lambda 0.95 in both.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._common import check_vector_player
from gigastep._util.files import atomic_path
from gigastep.game.dynamics import N_DISCRETE_ACTIONS

__all__ = [
    "IPPO",
    "MAPPO",
    "JaxPPOConfig",
    "JaxPolicyPlayer",
    "Networks",
    "TrainResult",
    "load_params",
    "make_networks",
    "opponent_counts",
    "save_params",
    "train",
]

SCENARIO = "identical_5_vs_5_fobs_vec_void_disc"
FORMAT = "gigastep-jaxmarl-params/1"
"""The `format` entry of a saved parameter file."""


@dataclass(frozen=True)
class JaxPPOConfig:
    """One JaxMARL-style PPO run (see the module docstring for where the defaults come from)."""

    algorithm: str = "ippo"
    """ippo (independent critics on each agent's observation) or mappo (a centralised critic
    on the world state)."""
    scenario: str = SCENARIO
    opponents: tuple[tuple[str, float], ...] = (("pursuit", 0.7), ("random", 0.3))
    """Scripted opponents and their shares of the games (normalised)."""
    num_envs: int = 16
    """Games per rollout."""
    num_steps: int = 128
    """Steps per rollout."""
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    activation: str = "tanh"
    """tanh or relu."""
    hidden: int = 64
    """Width of the two hidden layers of actor and critic."""


IPPO = JaxPPOConfig()
"""ippo_ff_mpe.yaml's hyperparameters."""
MAPPO = JaxPPOConfig(
    algorithm="mappo",
    num_envs=128,
    lr=4e-3,
    clip_eps=0.05,
    max_grad_norm=0.25,
    activation="relu",
    hidden=128,
)
"""mappo_homogenous_rnn_smax.yaml's hyperparameters (feed-forward)."""


def check_config(config: JaxPPOConfig) -> None:
    """Refuse a config that cannot run, before any compute.

    Raises:
        ValueError: naming the field, the value given and what is expected.
    """
    if config.algorithm not in ("ippo", "mappo"):
        raise ValueError(f"algorithm must be 'ippo' or 'mappo', got {config.algorithm!r}")
    if config.activation not in ("tanh", "relu"):
        raise ValueError(f"activation must be 'tanh' or 'relu', got {config.activation!r}")
    for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if (config.num_envs * config.num_steps) % config.num_minibatches:
        raise ValueError(
            f"num_minibatches={config.num_minibatches} must divide num_envs x num_steps = "
            f"{config.num_envs * config.num_steps}"
        )
    opponent_counts(config.opponents, config.num_envs)


def opponent_counts(opponents, num_envs: int) -> list[tuple[str, int]]:
    """Games per scripted opponent: each its share of `num_envs` (largest remainders), at
    least one each.

    Raises:
        ValueError: an unknown policy name (closest names), a share that is not positive, or
            fewer games than opponents.
    """
    from gigastep.game.types import closest
    from gigastep.opponents import POLICIES

    if not opponents:
        raise ValueError("opponents is empty; expected (name, share) pairs, e.g. (('pursuit', 1),)")
    names = [n for n, _ in opponents]
    for name, share in opponents:
        if name not in POLICIES:
            raise ValueError(
                f"unknown scripted opponent {name!r} (closest: "
                f"{', '.join(closest(name, POLICIES))}; all: {sorted(POLICIES)})"
            )
        if not float(share) > 0:
            raise ValueError(f"the share of {name!r} must be positive, got {share!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"opponents names a policy twice: {names}")
    if num_envs < len(opponents):
        raise ValueError(
            f"num_envs={num_envs} games cannot hold {len(opponents)} opponents (one game each "
            "at least)"
        )
    total = sum(float(s) for _, s in opponents)
    exact = [float(s) / total * num_envs for _, s in opponents]
    counts = [max(1, int(x)) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    i = 0
    while sum(counts) < num_envs:
        counts[order[i % len(order)]] += 1
        i += 1
    while sum(counts) > num_envs:  # a share rounded up to one game
        j = max(range(len(counts)), key=lambda k: counts[k])
        counts[j] -= 1
    return list(zip(names, counts, strict=True))


# ------------------------------------------------------------------------------------------
# Networks (ippo_ff_mpe.py's ActorCritic; mappo_rnn_smax.py's actor and critic, feed-forward)
# ------------------------------------------------------------------------------------------


class Networks(NamedTuple):
    """The pure functions of one algorithm's networks.

    logits(params, obs): float32 (..., L) -> (..., 27) action logits.
    value(params, obs, world): the critic, float32 (...) from the agent's observation (IPPO)
        or its world-state row (MAPPO; `world` float32 (..., S + num_agents)).
    init(key, obs_size, world_size): fresh parameters.
    """

    logits: Callable[..., Any]
    value: Callable[..., Any]
    init: Callable[..., Any]


def make_networks(algorithm: str, hidden: int, activation: str, action_dim: int) -> Networks:
    """The networks of `algorithm` ("ippo" or "mappo")."""
    import flax.linen as nn
    from flax.linen.initializers import constant, orthogonal

    act = nn.tanh if activation == "tanh" else nn.relu

    def dense(width: int, scale: float) -> nn.Dense:
        return nn.Dense(width, kernel_init=orthogonal(scale), bias_init=constant(0.0))

    class Trunk(nn.Module):
        out: int
        scale: float

        @nn.compact
        def __call__(self, x):
            x = act(dense(hidden, np.sqrt(2))(x))
            x = act(dense(hidden, np.sqrt(2))(x))
            return dense(self.out, self.scale)(x)

    class ActorCritic(nn.Module):
        @nn.compact
        def __call__(self, x):
            logits = Trunk(action_dim, 0.01, name="actor")(x)
            value = Trunk(1, 1.0, name="critic")(x)
            return logits, jnp.squeeze(value, axis=-1)

    if algorithm == "ippo":
        net = ActorCritic()
        return Networks(
            logits=lambda p, obs: net.apply(p, obs)[0],
            value=lambda p, obs, world: net.apply(p, obs)[1],
            init=lambda key, obs_size, world_size: net.init(key, jnp.zeros((obs_size,))),
        )
    actor, critic = Trunk(action_dim, 0.01), Trunk(1, 1.0)

    def init(key, obs_size, world_size):
        k_a, k_c = jax.random.split(key)
        return {
            "actor": actor.init(k_a, jnp.zeros((obs_size,))),
            "critic": critic.init(k_c, jnp.zeros((world_size,))),
        }

    return Networks(
        logits=lambda p, obs: actor.apply(p["actor"], obs),
        value=lambda p, obs, world: _last_axis_out(critic.apply(p["critic"], world)),
        init=init,
    )


def _last_axis_out(x: Any) -> Any:
    """(..., 1) -> (...)."""
    return jnp.squeeze(x, axis=-1)


def sample_actions(logits: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Sampled actions int32 (...) and their log-probabilities float32 (...)."""
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    return action, _log_prob(logits, action)


def _log_prob(logits: jax.Array, action: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(logp, action[..., None], axis=-1)[..., 0]


def _entropy(logits: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


# ------------------------------------------------------------------------------------------
# Rollout and update
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setup:
    config: JaxPPOConfig
    envs: tuple  # one GigastepJaxMARLEnv per opponent
    counts: tuple[int, ...]  # games per opponent
    agents: tuple[str, ...]
    nets: Networks
    tx: Any
    obs_size: int
    world_size: int

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def num_actors(self) -> int:
        return self.num_agents * self.config.num_envs


class Carry(NamedTuple):
    """What the training loop carries from one update to the next."""

    params: Any
    opt_state: Any
    env_states: tuple  # per opponent: EnvState batched (n_g,)
    obs: tuple  # per opponent: the adapter's obs dict, leaves (n_g, ...)
    key: jax.Array


class Transition(NamedTuple):
    done: jax.Array  # (A*N,) bool: the agent is done after this step
    action: jax.Array  # (A*N,) int32
    value: jax.Array  # (A*N,) float32
    reward: jax.Array  # (A*N,) float32
    log_prob: jax.Array  # (A*N,) float32
    obs: jax.Array  # (A*N, L) float32
    world: jax.Array  # (A*N, S + A) float32 (MAPPO), (A*N, 0) (IPPO)


def _make_setup(config: JaxPPOConfig) -> _Setup:
    import optax

    from gigastep.jaxmarl import make

    check_config(config)
    counts = opponent_counts(config.opponents, config.num_envs)
    mappo = config.algorithm == "mappo"
    envs = tuple(make(config.scenario, opponent=name, world_state=mappo) for name, _ in counts)
    env = envs[0]
    if not env.config.discrete_actions or env.config.obs_type != "vector":
        raise ValueError(
            f"the JaxMARL-style trainers play vector observations and discrete actions; "
            f"{config.scenario!r} has obs_type={env.config.obs_type!r}, discrete_actions="
            f"{env.config.discrete_actions}"
        )
    action_dim = N_DISCRETE_ACTIONS
    nets = make_networks(config.algorithm, config.hidden, config.activation, action_dim)

    def opt():
        return optax.chain(
            optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.lr, eps=1e-5)
        )

    if mappo:  # actor and critic each their own optimizer (mappo_rnn_smax.py's two states)
        tx = optax.multi_transform(
            {"actor": opt(), "critic": opt()}, {"actor": "actor", "critic": "critic"}
        )
    else:
        tx = opt()
    return _Setup(
        config=config,
        envs=envs,
        counts=tuple(n for _, n in counts),
        agents=tuple(env.agents),
        nets=nets,
        tx=tx,
        obs_size=env.config.vector_size,
        world_size=(env.state_size + env.num_agents) if mappo else 0,
    )


def _init(setup: _Setup, seed: int) -> Carry:
    key = jax.random.PRNGKey(seed)
    key, k_net, k_reset = jax.random.split(key, 3)
    params = setup.nets.init(k_net, setup.obs_size, setup.world_size)
    states, obs = [], []
    keys = jax.random.split(k_reset, len(setup.envs))
    for env, n, k in zip(setup.envs, setup.counts, keys, strict=True):
        o, s = jax.vmap(env.reset)(jax.random.split(k, n))
        states.append(s)
        obs.append(o)
    return Carry(params, setup.tx.init(params), tuple(states), tuple(obs), key)


def _agent_rows(setup: _Setup, obs: tuple) -> jax.Array:
    """(A*N, ...) agent-major rows (JaxMARL's batchify) of per-opponent obs dicts."""
    stacked = jnp.concatenate([jnp.stack([o[a] for a in setup.agents]) for o in obs], axis=1)
    return stacked.reshape((setup.num_actors, *stacked.shape[2:]))


def _world_rows(setup: _Setup, obs: tuple) -> jax.Array:
    """(A*N, S + A): the world state of each agent's game with its one-hot id appended
    (SMAXWorldStateWrapper(obs_with_agent_id=True)), agent-major."""
    if not setup.world_size:
        return jnp.zeros((setup.num_actors, 0), jnp.float32)
    world = jnp.concatenate([o["world_state"] for o in obs], axis=0)  # (N, S)
    a, n = setup.num_agents, setup.config.num_envs
    ws = jnp.broadcast_to(world[None], (a, n, world.shape[-1]))
    ids = jnp.broadcast_to(jnp.eye(a, dtype=world.dtype)[:, None, :], (a, n, a))
    return jnp.concatenate([ws, ids], axis=-1).reshape((a * n, -1))


def _split_games(setup: _Setup, x: jax.Array) -> list[jax.Array]:
    """(A, N) -> per opponent (A, n_g)."""
    return jnp.split(x, np.cumsum(setup.counts)[:-1], axis=1)


def rollout(setup: _Setup, carry: Carry) -> tuple[Carry, Transition, dict[str, jax.Array]]:
    """`num_steps` steps of every game; stats: per opponent, episodes ended and won."""
    a = setup.num_agents

    def one(carry: Carry, _):
        key, k_act, k_step = jax.random.split(carry.key, 3)
        obs_rows = _agent_rows(setup, carry.obs)
        world = _world_rows(setup, carry.obs)
        logits = setup.nets.logits(carry.params, obs_rows)
        value = setup.nets.value(carry.params, obs_rows, world)
        action, log_prob = sample_actions(logits, k_act)
        per_game = _split_games(setup, action.reshape((a, setup.config.num_envs)))
        states, obs, rewards, dones, ended, won = [], [], [], [], [], []
        step_keys = jax.random.split(k_step, setup.config.num_envs)
        for g, (env, acts) in enumerate(zip(setup.envs, per_game, strict=True)):
            lo = int(np.sum(setup.counts[:g]))
            keys = step_keys[lo : lo + setup.counts[g]]
            act_dict = {name: acts[i] for i, name in enumerate(setup.agents)}
            o, s, r, d, info = jax.vmap(env.step)(keys, carry.env_states[g], act_dict)
            states.append(s)
            obs.append(o)
            rewards.append(jnp.stack([r[n] for n in setup.agents]))
            dones.append(jnp.stack([d[n] for n in setup.agents]))
            ended.append(d["__all__"].sum())
            won.append((d["__all__"] & (info["won"][:, 0] > 0)).sum())
        transition = Transition(
            done=jnp.concatenate(dones, axis=1).reshape(-1),
            action=action,
            value=value,
            reward=jnp.concatenate(rewards, axis=1).reshape(-1),
            log_prob=log_prob,
            obs=obs_rows,
            world=world,
        )
        stats = {"ended": jnp.stack(ended), "won": jnp.stack(won)}
        return carry._replace(env_states=tuple(states), obs=tuple(obs), key=key), (
            transition,
            stats,
        )

    carry, (traj, stats) = jax.lax.scan(one, carry, None, setup.config.num_steps)
    return carry, traj, jax.tree.map(lambda x: x.sum(axis=0), stats)


def gae(
    traj: Transition, last_value: jax.Array, gamma: float, lam: float
) -> tuple[jax.Array, jax.Array]:
    """Advantages and value targets, float32 (T, A*N) each, with per-agent dones (an agent's
    done cuts its bootstrap; ippo_ff_mpe.py's `_calculate_gae`)."""

    def back(carry, t):
        next_gae, next_value = carry
        done, value, reward = t
        not_done = 1.0 - done.astype(jnp.float32)
        delta = reward + gamma * next_value * not_done - value
        adv = delta + gamma * lam * not_done * next_gae
        return (adv, value), adv

    _, adv = jax.lax.scan(
        back,
        (jnp.zeros_like(last_value), last_value),
        (traj.done, traj.value, traj.reward),
        reverse=True,
    )
    return adv, adv + traj.value


def learn(setup: _Setup, carry: Carry, traj: Transition) -> tuple[Carry, dict[str, jax.Array]]:
    """GAE, then `update_epochs` epochs of `num_minibatches` shuffled minibatches."""
    import optax

    c = setup.config
    last_value = setup.nets.value(
        carry.params, _agent_rows(setup, carry.obs), _world_rows(setup, carry.obs)
    )
    advantages, targets = gae(traj, last_value, c.gamma, c.gae_lambda)

    def loss_fn(params, batch):
        tr, adv, target = batch
        logits = setup.nets.logits(params, tr.obs)
        value = setup.nets.value(params, tr.obs, tr.world)
        clipped = tr.value + (value - tr.value).clip(-c.clip_eps, c.clip_eps)
        value_loss = (
            0.5 * jnp.maximum(jnp.square(value - target), jnp.square(clipped - target)).mean()
        )
        ratio = jnp.exp(_log_prob(logits, tr.action) - tr.log_prob)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        actor_loss = -jnp.minimum(
            ratio * adv, jnp.clip(ratio, 1.0 - c.clip_eps, 1.0 + c.clip_eps) * adv
        ).mean()
        entropy = _entropy(logits).mean()
        total = actor_loss + c.vf_coef * value_loss - c.ent_coef * entropy
        return total, (actor_loss, value_loss, entropy)

    def minibatch(state, batch):
        params, opt_state = state
        (total, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
        updates, opt_state = setup.tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), (total, *aux)

    def epoch(state, key):
        params, opt_state = state
        size = c.num_steps * setup.num_actors
        perm = jax.random.permutation(key, size)
        flat = jax.tree.map(lambda x: x.reshape((size, *x.shape[2:])), (traj, advantages, targets))
        batches = jax.tree.map(
            lambda x: jnp.take(x, perm, axis=0).reshape(
                (c.num_minibatches, size // c.num_minibatches, *x.shape[1:])
            ),
            flat,
        )
        return jax.lax.scan(minibatch, (params, opt_state), batches)

    key, k_epochs = jax.random.split(carry.key)
    (params, opt_state), losses = jax.lax.scan(
        epoch, (carry.params, carry.opt_state), jax.random.split(k_epochs, c.update_epochs)
    )
    names = ("total_loss", "actor_loss", "value_loss", "entropy")
    info = {n: v.mean() for n, v in zip(names, losses, strict=True)}
    return carry._replace(params=params, opt_state=opt_state, key=key), info


# ------------------------------------------------------------------------------------------
# Training for a wall-clock budget
# ------------------------------------------------------------------------------------------


@dataclass
class TrainResult:
    """What `train` returns (all times in seconds)."""

    params: Any
    updates: int
    env_steps: int
    """Game steps (games x steps per rollout x updates)."""
    agent_steps: int
    """env_steps x agents per game (both teams, as benchmarks.frameworks counts)."""
    wall_s: float
    """From the start of training (environments, networks, compilation included) to the end
    of the last update."""
    compile_s: float
    """Lowering and compiling the rollout and the update (inside wall_s)."""
    rollout_s: float
    """Seconds in the rollouts after the first (which runs right after compiling)."""
    learn_s: float
    """Seconds in the updates after the first."""
    timed_env_steps: int
    """Game steps of the rollouts that rollout_s counts."""
    curve: list[dict[str, Any]]
    opponents: list[tuple[str, int]]


def _block(x):
    return jax.block_until_ready(x)


def train(
    config: JaxPPOConfig, budget_s: float, seed: int, log: Callable[[str], None] | None = None
) -> TrainResult:
    """Train until `budget_s` seconds have passed since the start (compilation included; at
    least two updates run, and the last one may end past the budget)."""
    if not budget_s > 0:
        raise ValueError(f"budget_s must be positive seconds, got {budget_s!r}")
    t_start = time.perf_counter()
    setup = _make_setup(config)
    carry = _init(setup, seed)
    t0 = time.perf_counter()
    roll = jax.jit(partial(rollout, setup)).lower(carry).compile()
    carry, traj, stats = _block(roll(carry))
    fit = jax.jit(partial(learn, setup)).lower(carry, traj).compile()
    compile_s = time.perf_counter() - t0  # the first rollout's run is inside: it is small
    carry, info = _block(fit(carry, traj))
    updates = 1
    per_update = config.num_envs * config.num_steps
    n = setup.envs[0].config.n_agents
    names = [name for name, _ in opponent_counts(config.opponents, config.num_envs)]
    curve: list[dict[str, Any]] = []
    rollout_s = learn_s = 0.0

    def record(stats, info):
        wall = time.perf_counter() - t_start
        ended, won = np.asarray(stats["ended"]), np.asarray(stats["won"])
        curve.append(
            {
                "update": updates,
                "wall_s": wall,
                "env_steps": updates * per_update,
                "win_rate": {
                    name: float(w / e) if e else None
                    for name, e, w in zip(names, ended, won, strict=True)
                },
                "episodes": int(ended.sum()),
                **{k: float(v) for k, v in info.items()},
            }
        )
        if log is not None:
            rates = ", ".join(
                f"{k} {v:.2f}" for k, v in curve[-1]["win_rate"].items() if v is not None
            )
            log(f"update {updates} at {wall:.0f} s: training win rate {rates or '-'}")

    record(stats, info)
    # two updates at least: the second is the first whose speed says something
    while updates < 2 or time.perf_counter() - t_start < budget_s:
        t1 = time.perf_counter()
        carry, traj, stats = _block(roll(carry))
        t2 = time.perf_counter()
        carry, info = _block(fit(carry, traj))
        t3 = time.perf_counter()
        rollout_s += t2 - t1
        learn_s += t3 - t2
        updates += 1
        record(stats, info)
    wall_s = time.perf_counter() - t_start
    return TrainResult(
        params=jax.device_get(carry.params),
        updates=updates,
        env_steps=updates * per_update,
        agent_steps=updates * per_update * n,
        wall_s=wall_s,
        compile_s=compile_s,
        rollout_s=rollout_s,
        learn_s=learn_s,
        timed_env_steps=(updates - 1) * per_update,
        curve=curve,
        opponents=opponent_counts(config.opponents, config.num_envs),
    )


# ------------------------------------------------------------------------------------------
# Parameters on disk: one .npz of the flattened parameters (no pickle) with a JSON header
# ------------------------------------------------------------------------------------------


def _flatten(params) -> dict[str, np.ndarray]:
    from flax.traverse_util import flatten_dict

    flat = flatten_dict(params, sep="/")
    return {k: np.asarray(v) for k, v in flat.items()}


def save_params(path: str | os.PathLike, params: Any, meta: dict[str, Any]) -> None:
    """Write `params` (nested dicts of arrays) and `meta` (JSON-able: the run's config and
    counters) to one `.npz` atomically: a temporary file in the same folder, then a rename.
    Each leaf is stored under its '/'-joined path; `__meta__` holds the JSON header."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flat = _flatten(params)
    if "__meta__" in flat:
        raise ValueError("a parameter is named '__meta__', which the file format reserves")
    header = json.dumps({"format": FORMAT, **meta}, sort_keys=True)
    arrays: dict[str, Any] = {"__meta__": np.array(header), **flat}
    # a file object: np.savez adds ".npz" to a file name that does not end in it
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def load_params(path: str | os.PathLike) -> tuple[Any, dict[str, Any]]:
    """(params, meta) from a file of `save_params` (read without unpickling anything).

    Raises:
        ValueError: not such a file (the format it has, if any).
    """
    from flax.traverse_util import unflatten_dict

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no parameter file {path!r}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError) as err:
        raise ValueError(f"{path!r} is not a .npz parameter file ({err})") from None
    if "__meta__" not in arrays:
        raise ValueError(f"{path!r} has no '__meta__' header: not written by save_params")
    meta = json.loads(str(arrays.pop("__meta__")))
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path!r} has format {meta.get('format')!r}, expected {FORMAT!r}")
    return unflatten_dict(arrays, sep="/"), meta


# ------------------------------------------------------------------------------------------
# The player (a gigastep.eval TorchPlayer)
# ------------------------------------------------------------------------------------------


class JaxPolicyPlayer:
    """A trained JaxMARL-style policy as a `gigastep.eval.players.TorchPlayer`: each agent of
    its team samples its action from the actor's logits on its own observation row, as in
    training.

    Args:
        params: the network parameters (`load_params`).
        meta: their header: `config` (a `JaxPPOConfig` as a dict) and `obs_size`.
        name: the label in tables.
    """

    def __init__(self, params: Any, meta: dict[str, Any], name: str | None = None) -> None:
        config = meta["config"]
        self.params = jax.tree.map(jnp.asarray, params)
        self.meta = meta
        self.algorithm = config["algorithm"]
        self.scenario = config["scenario"]
        self.obs_size = int(meta["obs_size"])
        self.name = name or f"jaxmarl-{self.algorithm}"
        nets = make_networks(
            self.algorithm, config["hidden"], config["activation"], N_DISCRETE_ACTIONS
        )
        self._act = jax.jit(_act_fn(nets.logits))

    @classmethod
    def load(cls, path: str | os.PathLike, name: str | None = None) -> JaxPolicyPlayer:
        params, meta = load_params(path)
        return cls(params, meta, name)

    def check(self, config, team: int) -> None:
        check_vector_player(self.name, self.obs_size, config)

    def actor(self, config, team: int, num_envs: int, device=None, seed: int = 0) -> _Actor:
        return _Actor(self, seed)


def _act_fn(logits_fn):
    def act(params, obs, key):
        return sample_actions(logits_fn(params, obs), key)[0]

    return act


class _Actor:
    """Samples with the key `fold_in(PRNGKey(seed), t)` at its t-th call."""

    def __init__(self, player: JaxPolicyPlayer, seed: int) -> None:
        self.player = player
        self.key = jax.random.PRNGKey(seed)
        self.t = 0

    def __call__(self, obs, first):
        import torch

        x = jnp.asarray(obs.detach().cpu().numpy(), jnp.float32)
        key = jax.random.fold_in(self.key, self.t)
        self.t += 1
        actions = np.array(self.player._act(self.player.params, x, key), dtype=np.int64)
        return torch.from_numpy(actions).to(obs.device)


def config_dict(config: JaxPPOConfig) -> dict[str, Any]:
    """The config as JSON-able data (opponents as [name, share] lists)."""
    out = dataclasses.asdict(config)
    out["opponents"] = [list(o) for o in config.opponents]
    return out
