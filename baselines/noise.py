"""Counter-based sampling noise: the random numbers of agent row r at step s are a hash of
(seed, stream, s, r), not a draw from a generator.

So an agent's actions do not depend on how the batch is cut: one process holding 1024 games
and two processes holding 512 each draw the same numbers for the same agent, which makes a
multi-process run reproduce a one-process run, and a resumed run needs no generator state
for its actions. The hash is SplitMix64's finaliser (Steele, Lea and Flood 2014) on int64
tensors, the same on CPU and GPU; uniforms take its top 24 bits, offset by half a step, so
they lie in (0, 1) and their logarithms are finite.
"""

from __future__ import annotations

import torch

__all__ = ["categorical", "normal", "rollout_uniforms", "uniforms"]

_GOLDEN = -0x61C8864680B583EB  # 0x9E3779B97F4A7C15 as a signed int64
_M1 = -0x40A7B892E31B1A47  # 0xBF58476D1CE4E5B9
_M2 = -0x6B2FB644ECCEEE15  # 0x94D049BB133111EB
_MASK = (1 << 64) - 1


def _shift_right(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic for negative values)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    z = x + _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _M1
    z = (z ^ _shift_right(z, 27)) * _M2
    return z ^ _shift_right(z, 31)


def _mix_int(x: int) -> int:
    """`_mix` of one int64 on the host (Python ints wrapped to 64 bits)."""
    z = (x + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def _keys(seed: int, stream: int, steps: torch.Tensor) -> torch.Tensor:
    """int64 [S] keys of (seed, stream, step) for every step of `steps` (int64 [S]): the
    seed and stream are mixed on the host, the steps on their device (no host sync)."""
    h = _mix_int(_mix_int(seed & _MASK) ^ (stream & _MASK))
    h = h - (1 << 64) if h >= 1 << 63 else h  # as a signed int64
    return _mix(steps.to(torch.int64) ^ h)


def uniforms(seed: int, stream: int, step: int, rows: torch.Tensor, width: int) -> torch.Tensor:
    """float32 [len(rows), width] uniforms in (0, 1), a pure function of the arguments.

    Args:
        seed: the run's seed.
        stream: which player draws (each player its own stream).
        step: a counter that never repeats within a stream (e.g. update * T + t).
        rows: int64 [N] global ids of the agent rows drawing.
        width: numbers per row.
    """
    return rollout_uniforms(seed, stream, step, 1, rows, width)[0]


def rollout_uniforms(
    seed: int, stream: int, first_step: int, steps: int, rows: torch.Tensor, width: int
) -> torch.Tensor:
    """float32 [steps, len(rows), width]: `uniforms` of steps first_step .. first_step +
    steps - 1 in one call (a rollout's noise; row t equals `uniforms(..., first_step + t, ...)`).
    """
    if rows.dim() != 1:
        raise ValueError(f"rows must be int64 [N], got shape {tuple(rows.shape)}")
    if steps < 1 or width < 1:
        raise ValueError(f"steps and width must be >= 1, got steps={steps}, width={width}")
    device = rows.device
    base = _keys(seed, stream, torch.arange(first_step, first_step + steps, device=device))
    counter = rows.to(torch.int64).unsqueeze(-1) * width + torch.arange(width, device=device)
    bits = _shift_right(_mix(counter ^ base[:, None, None]), 40)  # the top 24 bits
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def categorical(log_probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """A sample per row of the categorical distribution with log-probabilities [N, K]
    (normalised, e.g. log_softmax), by inverting its CDF at u [N]: int64 [N]."""
    cdf = log_probs.exp().cumsum_(-1)
    return (cdf < u.unsqueeze(-1)).sum(-1).clamp_(max=log_probs.shape[-1] - 1)


def normal(u: torch.Tensor) -> torch.Tensor:
    """Standard normals [N, W // 2] from uniforms [N, W] (Box-Muller, first half as radii)."""
    half = u.shape[-1] // 2
    radius = torch.sqrt(-2.0 * torch.log(u[..., :half]))
    return radius * torch.cos((2 * torch.pi) * u[..., half : 2 * half])
