"""JAX reference of :mod:`baselines.s5` (S5 layer and block), as pure functions.

Written independently of the PyTorch code so the two can check each other: the scan is
``jax.lax.associative_scan`` over explicit ``(A, b, reset)`` triples, and the complex
projections are pairs of real matmuls instead of one interleaved matmul. Parameters are
nested dicts of arrays, loaded from a PyTorch ``state_dict()`` converted to numpy with
:func:`layer_params_from_state_dict` / :func:`block_params_from_state_dict`.

Time is the leading axis: ``[T, B, ...]``. Example::

    sd = {k: v.detach().numpy() for k, v in torch_block.state_dict().items()}
    params = block_params_from_state_dict(sd)
    y, h_last = s5_block(params, u, reset)
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "block_params_from_state_dict",
    "discretize",
    "layer_params_from_state_dict",
    "reset_combine",
    "resettable_scan",
    "s5_block",
    "s5_layer",
]

_LAYER_KEYS = ("lambda_re", "lambda_im", "b_tilde", "c_tilde", "d", "log_step")
Params = dict


def reset_combine(e1: tuple, e2: tuple) -> tuple:
    """Associative operator on ``(A, b, r)``, ``e1`` earlier than ``e2``.

    ``(A2, b2, True)`` if ``r2`` (the later segment restarted from zero), otherwise
    ``(A2 A1, A2 b1 + b2, r1)``; the flag of the result is ``r1 or r2``.
    """
    a1, b1, r1 = e1
    a2, b2, r2 = e2
    a = jnp.where(r2, a2, a2 * a1)
    b = jnp.where(r2, b2, a2 * b1 + b2)
    return a, b, r1 | r2


def resettable_scan(
    a: jax.Array, b: jax.Array, reset: jax.Array, h0: jax.Array | None = None
) -> jax.Array:
    """States of ``x_t = b_t if reset_t else a_t x_{t-1} + b_t`` with ``x_{-1} = h0`` (or 0).

    Args:
        a: Multipliers, shape [T, B, N] or broadcastable to it (e.g. [N]).
        b: Inputs, shape [T, B, N].
        reset: bool [T, B]; True where an episode starts at step t.
        h0: Optional initial state [B, N], folded into step 0 unless ``reset[0]``.

    Returns:
        All states, shape [T, B, N].
    """
    b = jnp.asarray(b)
    a = jnp.broadcast_to(a, b.shape)
    r = jnp.asarray(reset)[..., None]
    if h0 is not None:
        b = b.at[0].add(jnp.where(r[0], 0, a[0] * h0))
    _, x, _ = jax.lax.associative_scan(reset_combine, (a, b, r), axis=0)
    return x


def _complex(x: jax.Array) -> jax.Array:
    """[..., 2] real (re, im) -> [...] complex."""
    return jax.lax.complex(x[..., 0], x[..., 1])


def discretize(params: Params) -> tuple[jax.Array, jax.Array]:
    """Zero-order hold: ``Ā = exp(ΛΔ)`` [N], ``B̄ = (Ā - 1) / Λ · B̃`` [N, H] (complex)."""
    lam = jax.lax.complex(jnp.minimum(params["lambda_re"], -1e-4), params["lambda_im"])
    a_bar = jnp.exp(lam * jnp.exp(params["log_step"]))
    b_bar = ((a_bar - 1) / lam)[:, None] * _complex(params["b_tilde"])
    return a_bar, b_bar


def s5_layer(
    params: Params, u: jax.Array, reset: jax.Array, h0: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """One S5 layer in parallel mode.

    Args:
        params: ``lambda_re``, ``lambda_im``, ``log_step`` [N]; ``b_tilde`` [N, H, 2];
            ``c_tilde`` [H, N, 2]; ``d`` [H] (N = state_dim / 2 complex states).
        u: float32 [T, B, H].
        reset: bool [T, B].
        h0: Optional complex64 state [B, N].

    Returns:
        ``(y, h_last)``: ``y = 2 Re(C̃ x) + D u`` of shape [T, B, H] and the last state [B, N].
    """
    a_bar, b_bar = discretize(params)
    bu = jax.lax.complex(u @ b_bar.real.T, u @ b_bar.imag.T)
    x = resettable_scan(a_bar, bu, reset, h0)
    c = _complex(params["c_tilde"])
    y = 2 * (x.real @ c.real.T - x.imag @ c.imag.T) + params["d"] * u
    return y, x[-1]


def _layer_norm(params: Params, x: jax.Array, eps: float = 1e-5) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * params["weight"] + params["bias"]


def s5_block(
    params: Params, u: jax.Array, reset: jax.Array, h0: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """The S5 block: per layer ``x <- x + g ⊙ σ(W g + c)``, ``g = GELU(S5(LayerNorm(x)))``.

    Args:
        params: ``{"norms": [...], "layers": [...], "gates": [...]}``, one entry per layer.
        u: float32 [T, B, H].
        reset: bool [T, B].
        h0: Optional complex64 state [n_layers, B, N].

    Returns:
        ``(y, h_last)``: [T, B, H] and [n_layers, B, N].
    """
    x, states = u, []
    for i, (norm, layer, gate) in enumerate(
        zip(params["norms"], params["layers"], params["gates"], strict=True)
    ):
        z, h = s5_layer(layer, _layer_norm(norm, x), reset, None if h0 is None else h0[i])
        g = jax.nn.gelu(z, approximate=False)
        x = x + g * jax.nn.sigmoid(g @ gate["weight"].T + gate["bias"])
        states.append(h)
    return x, jnp.stack(states)


def layer_params_from_state_dict(state_dict: Mapping[str, np.ndarray], prefix: str = "") -> Params:
    """Parameters of one ``baselines.s5.S5Layer`` from its ``state_dict`` (numpy arrays)."""
    return {key: jnp.asarray(np.asarray(state_dict[prefix + key])) for key in _LAYER_KEYS}


def block_params_from_state_dict(state_dict: Mapping[str, np.ndarray]) -> Params:
    """Parameters of a ``baselines.s5.S5Block`` from its ``state_dict`` (numpy arrays)."""
    indices = {int(m.group(1)) for k in state_dict if (m := re.match(r"layers\.(\d+)\.", k))}
    if not indices or indices != set(range(len(indices))):
        raise ValueError(f"not an S5Block state_dict: layer indices {sorted(indices)}")

    def linear(prefix: str) -> Params:
        return {k: jnp.asarray(np.asarray(state_dict[prefix + k])) for k in ("weight", "bias")}

    layers = range(len(indices))
    return {
        "norms": [linear(f"norms.{i}.") for i in layers],
        "layers": [layer_params_from_state_dict(state_dict, f"layers.{i}.") for i in layers],
        "gates": [linear(f"gates.{i}.") for i in layers],
    }
