"""`baselines.policies.ActorCritic` as pure JAX functions of a parameter pytree.

Parameters are a flat dict ``{state_dict name: array}``: the same names, shapes and layouts
as the PyTorch module's ``state_dict()`` (``Linear`` weights ``[out, in]``), so a PyTorch
policy converts to JAX and back name for name (`params_from_torch`, `params_to_torch`).
Fresh parameters are drawn by the PyTorch module's own initialisers (`init_params`): both
frameworks start from the same distributions (orthogonal weights, HiPPO eigenvalues).

Shapes: N agents, T steps, L vector size, K types, H hidden width. Recurrent states: S5
complex64 ``[layers, N, P / 2]``, GRU float32 ``[N, H]``, MLP float32 ``[N, 0]`` (the agent
axis is `state_axis`). Vector observations (the MLP encoder) and entity observations (the
entity encoder, `baselines.policies.EntityEncoder`); the CNN encoder is PyTorch-only.

A separate critic (`PolicySpec.separate_critic`) has the PyTorch module's layout: its own
``critic_encoder.*``, ``critic_core.*`` and ``critic_head.*`` parameters, ``heads`` holds the
action outputs only, and the recurrent state is the actor's and the critic's concatenated on
the last axis. With `PolicySpec.value_norm` the value outputs are standardised returns, and
every value returned here is mapped back to the return scale with the `ValueMoments`
passed in (the running statistics are training state, not parameters: see
`baselines.jax_ppo.update`; the PyTorch buffers ``value_norm.*`` are not in `Params`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import s5_jax
from ..policies import ENTITY_FEATURES, FACTOR_INDEX, PolicySpec

__all__ = [
    "BUFFERS",
    "ValueMoments",
    "act",
    "check_spec",
    "evaluate",
    "init_params",
    "joint_log_probs",
    "initial_state",
    "params_from_torch",
    "params_to_torch",
    "sample",
    "state_axis",
    "state_rows",
    "value",
]

Params = dict[str, jax.Array]
ValueMoments = tuple[jax.Array, jax.Array]
"""(mean, std) float32 scalars of the returns: value = mean + std * value output."""
BUFFERS = ("value_norm.mean", "value_norm.mean_sq", "value_norm.weight")
"""The `ActorCritic.state_dict()` entries that are statistics, not parameters."""
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def check_spec(spec: PolicySpec) -> None:
    """Raise a clear error for architectures the JAX side does not build.

    Raises:
        ValueError: image observations (the CNN encoder is PyTorch-only).
    """
    if spec.obs_type not in ("vector", "entity"):
        raise ValueError(
            f"--framework jax supports vector observations and entity observations, got "
            f"{spec.obs_type!r} "
            "(use a scenario with the _vec or _ent suffix, or --framework torch)"
        )


def init_params(spec: PolicySpec, seed: int, skip: int = 0) -> Params:
    """Fresh parameters drawn by `baselines.policies.ActorCritic` after torch.manual_seed
    (`skip`: networks drawn first and dropped; 1 gives a second learner's)."""
    import torch

    from ..policies import ActorCritic

    check_spec(spec)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for _ in range(skip):
            ActorCritic(spec)
        net = ActorCritic(spec)
    return params_from_torch(net.state_dict())


def params_from_torch(state_dict) -> Params:
    """The parameters of a PyTorch `ActorCritic.state_dict()` as JAX arrays (copies; the
    `BUFFERS` are left out)."""
    return {
        k: jnp.asarray(np.array(v.detach().cpu().numpy()))
        for k, v in state_dict.items()
        if k not in BUFFERS
    }


def params_to_torch(params: Params) -> dict:
    """JAX parameters as a PyTorch `state_dict` (float32 CPU tensors; a policy with
    `value_norm` also needs its `BUFFERS`: `baselines.jax_ppo.convert.value_norm_to_torch`)."""
    import torch

    return {k: torch.from_numpy(np.array(v)) for k, v in params.items()}


def _linear(p: Params, name: str, x: jax.Array) -> jax.Array:
    return x @ p[name + ".weight"].T + p[name + ".bias"]


_S5_LAYER_KEYS = ("lambda_re", "lambda_im", "b_tilde", "c_tilde", "d", "log_step")


def _s5_params(spec: PolicySpec, p: Params, prefix: str = "") -> dict:
    """The nested parameters of `baselines.s5_jax.s5_block` (traceable: no numpy)."""
    pre = prefix + "core.block."
    layers = range(spec.s5_layers)
    return {
        "norms": [{k: p[f"{pre}norms.{i}.{k}"] for k in ("weight", "bias")} for i in layers],
        "layers": [{k: p[f"{pre}layers.{i}.{k}"] for k in _S5_LAYER_KEYS} for i in layers],
        "gates": [{k: p[f"{pre}gates.{i}.{k}"] for k in ("weight", "bias")} for i in layers],
    }


def initial_state(spec: PolicySpec, n: int) -> jax.Array:
    """The zero recurrent state of n agents (the actor's and the critic's, concatenated on
    the last axis, with a separate critic)."""
    cores = 2 if spec.separate_critic else 1
    if spec.core == "s5":
        return jnp.zeros((spec.s5_layers, n, cores * spec.s5_state_dim // 2), jnp.complex64)
    return jnp.zeros((n, cores * spec.hidden if spec.core == "gru" else 0), jnp.float32)


def _split(h: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(actor state, critic state) of a separate critic's concatenated state."""
    k = h.shape[-1] // 2
    return h[..., :k], h[..., k:]


def state_axis(spec: PolicySpec) -> int:
    """The agent axis of the recurrent state."""
    return 1 if spec.core == "s5" else 0


def state_rows(spec: PolicySpec, h: jax.Array, index: jax.Array) -> jax.Array:
    """The recurrent states of agents `index`."""
    return jnp.take(h, index, axis=state_axis(spec))


def _encode(p: Params, obs: jax.Array, types: jax.Array, prefix: str = "") -> jax.Array:
    """[..., L] obs and [..., K] one-hot -> [..., H] features (prefix "critic_": the
    separate critic's encoder)."""
    if prefix + "encoder.embed.0.weight" in p:
        return _encode_entities(p, obs, types, prefix + "encoder.")
    x = jnp.concatenate([obs, types], -1)
    return jax.nn.relu(_linear(p, prefix + "encoder.vector.0", x))


def _encode_entities(p: Params, obs: jax.Array, types: jax.Array, name: str) -> jax.Array:
    """`baselines.policies.EntityEncoder`: [..., G * F] entity rows -> [..., H] features."""
    rows = obs.reshape(*obs.shape[:-1], -1, ENTITY_FEATURES)
    e = jax.nn.relu(_linear(p, name + "embed.0", rows))  # [..., G, H]
    ego, others = e[..., 0, :], e[..., 1:, :]
    present = rows[..., 1:, 0] > 0.5
    weight = present.astype(e.dtype)
    count = weight.sum(-1, keepdims=True)
    pooled = (others * weight[..., None]).sum(-2) / jnp.maximum(count, 1.0)
    q = _linear(p, name + "query", jnp.concatenate([ego, types], -1))
    # the key and value layers folded into the one query, as the PyTorch encoder does
    qk = q @ p[name + "key.weight"]
    bias = (q * p[name + "key.bias"]).sum(-1, keepdims=True)
    scores = (jnp.einsum("...h,...gh->...g", qk, others) + bias) * (1.0 / math.sqrt(q.shape[-1]))
    scores = jnp.where(present, scores, jnp.finfo(scores.dtype).min)
    mixed = jnp.einsum("...g,...gh->...h", jax.nn.softmax(scores, axis=-1), others)
    attn = _linear(p, name + "value", mixed) * (count > 0).astype(e.dtype)
    fused = jnp.concatenate([ego, attn, pooled, types], -1)
    return jax.nn.relu(_linear(p, name + "fuse.0", fused))


def _gru_step(p: Params, x: jax.Array, first: jax.Array, h: jax.Array, prefix: str = ""):
    """`torch.nn.GRUCell` (gates r, z, n) on the state restarted where `first`."""
    h = jnp.where(first[:, None], 0.0, h)
    cell = prefix + "core.cell."
    gi = x @ p[cell + "weight_ih"].T + p[cell + "bias_ih"]
    gh = h @ p[cell + "weight_hh"].T + p[cell + "bias_hh"]
    i_r, i_z, i_n = jnp.split(gi, 3, axis=-1)
    h_r, h_z, h_n = jnp.split(gh, 3, axis=-1)
    r = jax.nn.sigmoid(i_r + h_r)
    z = jax.nn.sigmoid(i_z + h_z)
    n = jnp.tanh(i_n + r * h_n)
    return (1.0 - z) * n + z * h


def _core_sequence(spec: PolicySpec, p: Params, x, first, h0, prefix: str = ""):
    """x [T, N, H], first [T, N] bool, h0 -> (y [T, N, H], h after the last step) of one
    core (prefix "critic_": the separate critic's)."""
    if spec.core == "s5":
        return s5_jax.s5_block(_s5_params(spec, p, prefix), x, first, h0)
    if spec.core == "gru":

        def body(h, xs):
            h = _gru_step(p, xs[0], xs[1], h, prefix)
            return h, h

        h, ys = jax.lax.scan(body, h0, (x, first))
        return ys, h
    return jax.nn.relu(_linear(p, prefix + "core.layer.0", x)), h0


def _core_step(spec: PolicySpec, p: Params, x, first, h, prefix: str = ""):
    """x [N, H], first [N] bool, h -> (y [N, H], h) of one core."""
    y, h = _core_sequence(spec, p, x[None], first[None], h, prefix)
    return y[0], h


def _step(spec: PolicySpec, p: Params, obs, types, first, h):
    """(actor core output [N, H], the separate critic's core output or None, new state) of
    one step (as `ActorCritic._step`)."""
    x = _encode(p, obs, types)
    if not spec.separate_critic:
        y, h = _core_step(spec, p, x, first, h)
        return y, None, h
    ha, hc = _split(h)
    y, ha = _core_step(spec, p, x, first, ha)
    yc, hc = _core_step(spec, p, _encode(p, obs, types, "critic_"), first, hc, "critic_")
    return y, yc, jnp.concatenate([ha, hc], -1)


def _denormalize(spec: PolicySpec, v: jax.Array, moments: ValueMoments | None) -> jax.Array:
    """Value outputs on the return scale (`value_norm`; unchanged without it)."""
    if not spec.value_norm:
        return v
    if moments is None:
        raise ValueError("a policy with value_norm needs the value moments (mean, std)")
    mean, std = moments
    return v * std + mean


def _outputs(spec: PolicySpec, p: Params, y, critic_in, yc=None, moments=None):
    """(action outputs [..., A], values [...] on the return scale) of core outputs y
    [..., H] (and the separate critic's core outputs yc)."""
    out = _linear(p, "heads", y)
    a = spec.n_action_outputs
    if spec.central_critic:
        return _joint(spec, out), _denormalize(spec, _critic(p, critic_in), moments)
    if spec.separate_critic:
        v = _denormalize(spec, _linear(p, "critic_head", yc)[..., 0], moments)
        return _joint(spec, out), v
    return _joint(spec, out[..., :a]), _denormalize(spec, out[..., a], moments)


def joint_log_probs(out: jax.Array) -> jax.Array:
    """A factored head's outputs [..., 9] -> log-probabilities [..., 27] of the joint actions
    (`baselines.policies.joint_log_probs`)."""
    lp = jnp.concatenate(
        [jax.nn.log_softmax(out[..., 3 * k : 3 * k + 3], axis=-1) for k in range(3)], -1
    )
    idx = FACTOR_INDEX
    return lp[..., idx[:, 0]] + lp[..., idx[:, 1]] + lp[..., idx[:, 2]]


def _joint(spec: PolicySpec, out: jax.Array) -> jax.Array:
    """Action outputs as the actions' logits (a factored head's as joint log-probs)."""
    return joint_log_probs(out) if spec.action_head == "factored" else out


def _critic(p: Params, critic_in: jax.Array) -> jax.Array:
    x = jax.nn.relu(_linear(p, "critic.0", critic_in))
    x = jax.nn.relu(_linear(p, "critic.2", x))
    return _linear(p, "critic.4", x)[..., 0]


def _log_prob(spec: PolicySpec, p: Params, out, actions):
    """(log-prob of `actions` [...], all log-probs [..., 27] or None)."""
    if spec.discrete:
        logp = jax.nn.log_softmax(out, axis=-1)
        return jnp.take_along_axis(logp, actions[..., None].astype(jnp.int32), -1)[..., 0], logp
    log_std = p["log_std"]
    z = (actions - out) * jnp.exp(-log_std)
    return (-0.5 * z * z - log_std - _LOG_SQRT_2PI).sum(-1), None


def act(
    spec: PolicySpec,
    p: Params,
    obs,
    types,
    first,
    h,
    critic_in,
    key,
    deterministic=False,
    moments: ValueMoments | None = None,
):
    """One step of N agents (as `ActorCritic.act`).

    Args:
        obs: float32 [N, L] (normalised). types: float32 [N, K]. first: bool [N].
        h: the recurrent state of the N agents. critic_in: [N, S + slots + K] or None.
        key: PRNG key of the sample (categorical; or the Gaussian's normals).
        deterministic: the mode (argmax, mean) instead of a sample.
        moments: the returns' (mean, std) with `spec.value_norm` (required), else None.

    Returns:
        (actions int32 [N] or float32 [N, 3], log-prob [N], value [N], new state).
    """
    y, yc, h = _step(spec, p, obs, types, first, h)
    out, v = _outputs(spec, p, y, critic_in, yc, moments)
    if spec.discrete:
        actions = out.argmax(-1) if deterministic else jax.random.categorical(key, out)
        actions = actions.astype(jnp.int32)
    elif deterministic:
        actions = out
    else:
        actions = out + jnp.exp(p["log_std"]) * jax.random.normal(key, out.shape)
    return actions, _log_prob(spec, p, out, actions)[0], v, h


def sample(spec: PolicySpec, p: Params, obs, types, first, h, key):
    """(actions, new state) of one step of N agents that only play (a frozen opponent):
    `act` without the values or log-probs, so no critic input or value moments are needed.
    The same draws as `act` with the same key."""
    y, _, h = _step(spec, p, obs, types, first, h)
    out = _joint(spec, _linear(p, "heads", y)[..., : spec.n_action_outputs])
    if spec.discrete:
        return jax.random.categorical(key, out).astype(jnp.int32), h
    return out + jnp.exp(p["log_std"]) * jax.random.normal(key, out.shape), h


def value(
    spec: PolicySpec,
    p: Params,
    obs,
    types,
    first,
    h,
    critic_in=None,
    moments: ValueMoments | None = None,
) -> jax.Array:
    """[N] values of one step (as `act`, without sampling; a separate critic runs its own
    trunk only)."""
    if spec.central_critic:
        return _denormalize(spec, _critic(p, critic_in), moments)
    if spec.separate_critic:
        x = _encode(p, obs, types, "critic_")
        yc, _ = _core_step(spec, p, x, first, _split(h)[1], "critic_")
        return _denormalize(spec, _linear(p, "critic_head", yc)[..., 0], moments)
    y, _ = _core_step(spec, p, _encode(p, obs, types), first, h)
    return _outputs(spec, p, y, None, None, moments)[1]


def evaluate(
    spec: PolicySpec,
    p: Params,
    obs,
    types,
    first,
    h0,
    actions,
    critic_in=None,
    moments: ValueMoments | None = None,
):
    """A whole rollout of N agents at once (as `ActorCritic.evaluate`).

    Args:
        obs: float32 [T, N, L]. types: [N, K]. first: bool [T, N]. h0: state before step 0.
        actions: [T, N] or [T, N, 3]. critic_in: [T, N, S + slots + K] or None.
        moments: the returns' (mean, std) with `spec.value_norm` (required), else None.

    Returns:
        (log-prob [T, N], entropy [T, N], value [T, N]; values on the return scale).
    """
    types = jnp.broadcast_to(types, obs.shape[:2] + types.shape[-1:])
    yc = None
    if spec.separate_critic:
        h0, hc = _split(h0)
        yc, _ = _core_sequence(spec, p, _encode(p, obs, types, "critic_"), first, hc, "critic_")
    y, _ = _core_sequence(spec, p, _encode(p, obs, types), first, h0)
    out, v = _outputs(spec, p, y, critic_in, yc, moments)
    logp, logp_all = _log_prob(spec, p, out, actions)
    if spec.discrete:
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1)
    else:
        entropy = jnp.broadcast_to((0.5 + _LOG_SQRT_2PI + p["log_std"]).sum(), logp.shape)
    return logp, entropy, v
