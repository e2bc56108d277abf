"""Checkpoints between the frameworks: one file format (`baselines.checkpoint`) for both.

A JAX run writes the PyTorch trainer's checkpoint layout (format ``gigastep-ppo/1``): the
policy as an `ActorCritic` state dict, the optimiser as a `torch.optim.Adam` state dict,
the normalisers' float64 moments. So `baselines.checkpoint.load_policy`, the ``ppo``
player of `gigastep eval` / `gigastep league`, and a PyTorch `--opponent path.pt` read it
like any other. What only a JAX resumption needs (environment states and keys, recurrent
states, the optax state bit for bit) is in its ``jax_state`` entry: the leaves of the
`TrainState` pytree as tensors (PRNG keys as int64), in `jax.tree_util` order.

The other way, `load_jax_policy` reads any PPO checkpoint (PyTorch- or JAX-trained) into
JAX parameters and normalisers, and `JaxActor` plays it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..envs import GameSpec
from ..policies import PolicySpec
from . import policy
from .state import ValueNorm

__all__ = [
    "JaxActor",
    "JaxPolicy",
    "adam_to_torch",
    "leaves_from_torch",
    "leaves_to_torch",
    "load_jax_policy",
    "moments_from_torch",
    "moments_to_torch",
    "value_norm_from_torch",
    "value_norm_to_torch",
]


def moments_to_torch(m: dict) -> dict:
    """Running moments as `baselines.normalize.RunningMeanStd.state_dict()` (float64)."""
    keys = ("count", "mean", "m2")
    return {k: torch.from_numpy(np.asarray(m[k], np.float64).copy()) for k in keys}


def moments_from_torch(state: dict) -> dict:
    """`RunningMeanStd.state_dict()` as float32 JAX moments."""
    return {k: jnp.asarray(state[k].cpu().numpy(), jnp.float32) for k in ("count", "mean", "m2")}


def value_norm_to_torch(vn: ValueNorm) -> dict:
    """The JAX value-normalisation statistics (`update.value_norm_merge`: weight, mean,
    variance) as the float64 buffers of `baselines.valuenorm.ValueNorm` in a state dict:
    ``value_norm.mean`` = w * mean, ``value_norm.mean_sq`` = w * (var + mean^2),
    ``value_norm.weight`` = w (computed in float64)."""
    w, mean, var = (float(np.asarray(x, np.float64)) for x in (vn.weight, vn.mean, vn.var))
    values = {"mean": w * mean, "mean_sq": w * (var + mean * mean), "weight": w}
    return {f"value_norm.{k}": torch.tensor(v, dtype=torch.float64) for k, v in values.items()}


def value_norm_from_torch(model: dict) -> ValueNorm:
    """`ValueNorm`'s buffers in a state dict as the JAX statistics (float32; weight 0 and
    moments (0, 1) before its first update, as `ValueNorm.moments`)."""
    w = float(model["value_norm.weight"])
    mean, var = 0.0, 1.0
    if w > 0:
        mean = float(model["value_norm.mean"]) / w
        var = float(model["value_norm.mean_sq"]) / w - mean * mean
    return ValueNorm(*(jnp.asarray(x, jnp.float32) for x in (mean, var, w)))


def adam_to_torch(spec: PolicySpec, params: policy.Params, opt_state, lr: float) -> dict:
    """The optax Adam state as the state dict of `torch.optim.Adam` on `ActorCritic(spec)`."""
    from ..policies import ActorCritic

    net = ActorCritic(spec)
    net.load_state_dict(policy.params_to_torch(params), strict=False)  # value_norm: buffers
    adam = torch.optim.Adam(net.parameters(), lr=lr, eps=1e-5)
    out = adam.state_dict()
    adam_state = opt_state[1].inner_state[0]
    step = float(np.asarray(adam_state.count))
    names = [name for name, _ in net.named_parameters()]
    out["state"] = {
        i: {
            "step": torch.tensor(step),
            "exp_avg": torch.from_numpy(np.array(adam_state.mu[name])),
            "exp_avg_sq": torch.from_numpy(np.array(adam_state.nu[name])),
        }
        for i, name in enumerate(names)
    }
    return out


def leaves_to_torch(tree) -> list[torch.Tensor]:
    """A pytree's leaves as CPU tensors (uint32 keys as int64: torch.save's safe dtypes)."""
    out = []
    for leaf in jax.tree_util.tree_leaves(tree):
        x = np.array(leaf)
        out.append(torch.from_numpy(x.astype(np.int64) if x.dtype == np.uint32 else x))
    return out


def leaves_from_torch(template, leaves: list[torch.Tensor]):
    """The pytree of `template`'s structure and dtypes holding `leaves` (`leaves_to_torch`).

    Raises:
        ValueError: the leaves do not fit the template (another config or code version).
    """
    want = jax.tree_util.tree_leaves(template)
    if len(want) != len(leaves):
        raise ValueError(
            f"the checkpoint's jax_state has {len(leaves)} arrays, this run's state "
            f"{len(want)}: it was written by another config or version"
        )
    arrays = []
    for i, (w, t) in enumerate(zip(want, leaves, strict=True)):
        if tuple(w.shape) != tuple(t.shape):
            raise ValueError(
                f"the checkpoint's jax_state array {i} has shape {tuple(t.shape)}, this "
                f"run's {tuple(w.shape)}: it was written by another config"
            )
        arrays.append(jnp.asarray(t.cpu().numpy().astype(w.dtype)))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), arrays)


@dataclass
class JaxPolicy:
    """A checkpoint's trained policies as JAX parameters (see `load_jax_policy`)."""

    spec: PolicySpec
    params: dict
    """team -> parameters."""
    obs_norm: dict
    """team -> float32 moments."""
    norm_obs: bool
    game: GameSpec
    """The game it was trained on."""
    value_norm: dict[int, ValueNorm] | None = None
    """team -> the value normalisation's statistics (`update.value_moments` reads them), with
    `spec.value_norm`; else None."""


def load_jax_policy(path: str | os.PathLike) -> JaxPolicy:
    """The policies of any PPO checkpoint (PyTorch- or JAX-trained) as JAX parameters.

    Raises:
        ValueError: not a PPO checkpoint, or an architecture the JAX side does not build.
    """
    from ..checkpoint import load_checkpoint

    ckpt = load_checkpoint(path)
    spec = PolicySpec.from_dict(ckpt["policy_spec"])
    policy.check_spec(spec)
    params, norms, values = {}, {}, {}
    for learner in ckpt["learners"]:
        team = int(learner["team"])
        try:
            params[team] = policy.params_from_torch(learner["model"])
            norms[team] = moments_from_torch(learner["obs_norm"])
            if spec.value_norm:
                values[team] = value_norm_from_torch(learner["model"])
        except (KeyError, IndexError, TypeError) as err:
            raise ValueError(
                f"{path}: learner {learner['name']!r}'s weights do not fit its architecture "
                f"(missing or misshapen {err})"
            ) from None
    norm_obs = bool(ckpt["config"]["norm_obs"]) and spec.obs_norm_size > 0
    game = GameSpec(**ckpt["game"])
    return JaxPolicy(spec, params, norms, norm_obs, game, values if spec.value_norm else None)


class JaxActor:
    """Plays one team of `num_envs` games with a `JaxPolicy` (the JAX `PolicyActor`).

    Call it with that team's observations [B, m, L] and `first` [B] bool; returns actions
    [B, m] int32 or [B, m, 3] float32 (jax arrays). The agent types are those of `team` in
    the policy's training game.
    """

    def __init__(self, loaded: JaxPolicy, team: int, num_envs: int, deterministic=True, seed=0):
        from .running import normalize
        from .update import value_moments

        if team not in loaded.params:
            team = next(iter(loaded.params))
        spec, game = loaded.spec, loaded.game
        agents = game.team_agents(team)
        vocab = game.type_vocab
        ids = np.array([vocab.index(game.type_keys[a]) for a in agents])
        self.m, self.num_envs = len(agents), num_envs
        types = jax.nn.one_hot(np.tile(ids, num_envs), spec.n_types, dtype=jnp.float32)
        self.h = policy.initial_state(spec, num_envs * self.m)
        self.key = jax.random.PRNGKey(seed)
        params, moments, norm_obs = loaded.params[team], loaded.obs_norm[team], loaded.norm_obs
        values = None if loaded.value_norm is None else value_moments(loaded.value_norm[team])

        def step(h, key, obs, first):
            flat = obs.reshape(num_envs * self.m, -1)
            first_rows = jnp.repeat(first, self.m)
            x = normalize(moments, flat, norm_obs)
            actions, _, _, h = policy.act(
                spec, params, x, types, first_rows, h, None, key, deterministic, values
            )
            return actions.reshape(num_envs, self.m, *actions.shape[1:]), h

        self._step = jax.jit(step)

    def __call__(self, obs, first) -> jax.Array:
        if first.shape[0] != self.num_envs:
            raise ValueError(f"this actor plays {self.num_envs} games, got {first.shape[0]}")
        self.key, sub = jax.random.split(self.key)
        actions, self.h = self._step(self.h, sub, jnp.asarray(obs), jnp.asarray(first, bool))
        return actions
