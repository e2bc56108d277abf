r"""S5 state-space recurrence in PyTorch, with a reset-aware parallel scan.

The S5 layer (Smith, Warrington and Linderman, "Simplified State Space Layers for Sequence
Modeling", ICLR 2023) is a linear recurrence with a diagonal complex state matrix,

.. math::

    x_t = \bar A \odot x_{t-1} + \bar B u_t, \qquad y_t = 2\,\mathrm{Re}(\tilde C x_t) + D u_t,

run over whole rollouts at once with a parallel (associative) scan and one step at a time when
acting. Rollouts contain several episodes, so the scan takes a per-step ``reset`` flag:
``reset[t]`` means "an episode started at step ``t``", and the state restarts from zero before
step ``t`` takes its input, ``x_t = b_t``.

Time is the leading axis everywhere: ``[T, B, ...]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "S5Block",
    "S5Layer",
    "StepWeights",
    "hippo_legs",
    "hippo_normal_eig",
    "resettable_scan",
    "sequential_scan",
]

_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}

ScanFn = Callable[..., torch.Tensor]


class StepWeights(NamedTuple):
    """A layer's parameters as :meth:`S5Layer.step` uses them (fixed while acting)."""

    a_bar: torch.Tensor
    """complex [P / 2], the discretised state matrix."""
    w_in: torch.Tensor
    """real [P, H], ``B̄`` on the interleaved (re, im) state."""
    w_out: torch.Tensor
    """real [H, P], ``2 Re(C̃ ·)`` on the interleaved (re, im) state."""


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


def _check_scan_inputs(
    a: torch.Tensor, b: torch.Tensor, reset: torch.Tensor, h0: torch.Tensor | None
) -> None:
    """Raises ValueError unless (a, b, reset, h0) describe one batched recurrence."""
    if b.dim() != 3 or b.shape[0] == 0:
        raise ValueError(f"b must have shape [T, B, N] with T >= 1, got {tuple(b.shape)}")
    t, batch, n = b.shape
    if reset.shape != (t, batch):
        raise ValueError(f"reset must have shape [T, B] = {(t, batch)}, got {tuple(reset.shape)}")
    if reset.dtype != torch.bool:
        raise ValueError(f"reset must be a bool tensor, got dtype {reset.dtype}")
    try:
        broadcast = torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError:
        broadcast = None
    if broadcast != b.shape:
        raise ValueError(
            f"a must have shape [T, B, N] = {(t, batch, n)} or broadcast to it, "
            f"got {tuple(a.shape)}"
        )
    if h0 is not None and h0.shape != (batch, n):
        raise ValueError(f"h0 must have shape [B, N] = {(batch, n)}, got {tuple(h0.shape)}")
    tensors = {"a": a, "b": b} | ({} if h0 is None else {"h0": h0})
    dtypes = {name: x.dtype for name, x in tensors.items()}
    if len(set(dtypes.values())) != 1:
        raise ValueError(f"a, b and h0 must share one dtype, got {dtypes}")
    if not (b.is_floating_point() or b.is_complex()):
        raise ValueError(f"a and b must be real floating point or complex, got {b.dtype}")
    devices = {x.device for x in (*tensors.values(), reset)}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")


# --------------------------------------------------------------------------------------------
# In-place log-depth scan kernels (no autograd; used by _LinearRecurrence)
# --------------------------------------------------------------------------------------------


def _times(x: torch.Tensor, p: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """``x * p`` written into ``out`` (a reused workspace), or ``x`` itself when ``p`` is None."""
    return x if p is None else torch.mul(x, p, out=out[: x.shape[0]])


def _scan_forward_(
    p: torch.Tensor | None, c: torch.Tensor, x: torch.Tensor, work: torch.Tensor
) -> None:
    """In place, turns ``x`` into the inclusive scan ``x_t <- x_t + (p c_{t-1}) x_{t-1}``.

    Recursive odd/even parallel prefix (by pairs): combine neighbouring pairs, scan the
    half-length sequence of pair results, then finish the remaining elements. O(T) work,
    O(log T) depth, a constant number of whole-tensor ops per level, no per-step Python loop.
    The coefficient of step ``t`` is ``p c_{t-1}``: ``p`` is time-invariant (or None, meaning
    1) and ``c`` varies in time, so a constant ``Ā`` with reset masks needs no [T, B, N] copy
    of the coefficients; a pair's coefficient is then ``(p^2, c c')``.

    Args:
        p: Time-invariant coefficient broadcasting against ``x[0]`` ([N] or [B, N]), or None.
        c: Time-varying coefficients, shape [T - 1, ...] broadcasting against ``x[1:]``
            (e.g. a reset mask [T - 1, B, 1]); ``c[t - 1]`` belongs to step ``t``.
        x: Values, shape [T, ...]; may be a strided view along time; overwritten.
        work: Scratch space of at least [T // 2, ...] shaped like ``x`` (used when ``p``).
    """
    t = x.shape[0]
    if t < 2:
        return
    n, m = t // 2, (t - 1) // 2
    x[1 : 2 * n : 2].addcmul_(c[0 : 2 * n - 1 : 2], _times(x[0 : 2 * n : 2], p, work))
    # Pair i = steps (2i, 2i+1) links to pair i-1 through the product for steps 2i+1 and 2i.
    p2 = None if p is None else p * p
    _scan_forward_(p2, c[2 : 2 * n - 1 : 2] * c[1 : 2 * n - 2 : 2], x[1 : 2 * n : 2], work)
    x[2::2].addcmul_(c[1::2][:m], _times(x[1 : 2 * m : 2], p, work))


def _scan_reverse_(
    p: torch.Tensor | None, c: torch.Tensor, x: torch.Tensor, work: torch.Tensor
) -> None:
    """In place, turns ``x`` into the reverse scan ``x_t <- x_t + (p c_t) x_{t+1}``.

    Mirror image of :func:`_scan_forward_` that pairs steps from the end, so no flip (copy)
    is needed. ``c[t]`` (shape [T - 1, ...]) belongs to the link from step ``t + 1`` to ``t``.
    """
    t = x.shape[0]
    if t < 2:
        return
    n = t // 2
    s = t - 2 * n  # 1 when T is odd: step 0 is left unpaired
    x[s : t - 1 : 2].addcmul_(c[s : t - 1 : 2], _times(x[s + 1 : t : 2], p, work))
    # Pair j = steps (s+2j, s+2j+1) links to pair j+1 through c[s+2j] c[s+2j+1].
    p2 = None if p is None else p * p
    _scan_reverse_(p2, c[s : t - 3 : 2] * c[s + 1 : t - 2 : 2], x[s : t - 1 : 2], work)
    x[s + 1 : t - 2 : 2].addcmul_(c[s + 1 : t - 2 : 2], _times(x[s + 2 : t - 1 : 2], p, work))
    if s:
        x[:1].addcmul_(c[:1], _times(x[1:2], p, work))


def _contiguous_copy(x: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous copy with any lazy conjugation resolved."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)


def _workspace(x: torch.Tensor, rows: int) -> torch.Tensor:
    """Uninitialised scratch rows shaped like ``x[0]``: [rows, ...]."""
    return x.new_empty((rows, *x.shape[1:]))


class _LinearRecurrence(torch.autograd.Function):
    """``x_t = p c_t x_{t-1} + b_t`` with ``x_{-1} = h0`` (or 0), all T states returned.

    ``p`` is time-invariant (shape broadcasting against [B, N]) or None; ``c`` is [T, B, N]
    or a [T, B, 1] mask. Backward is the adjoint recurrence, itself a reverse scan:
    ``lam_t = g_t + conj(a_{t+1}) lam_{t+1}``, ``db_t = lam_t``,
    ``da_t = lam_t conj(x_{t-1})``, ``dh0 = conj(a_0) lam_0`` with ``a_t = p c_t``
    (PyTorch's conjugate-Wirtinger convention; conjugates vanish for real dtypes). Only the
    coefficients and the output are saved. ``c`` gets a gradient only when ``p`` is None.
    With ``inplace`` the states overwrite ``b`` (marked dirty), saving a [T, B, N] buffer;
    ``b`` comes first because autograd's in-place-on-view rule (CopySlices) routes the first
    gradient to the modified view.
    """

    @staticmethod
    def forward(ctx, b, p, c, h0, inplace: bool):
        if inplace:
            ctx.mark_dirty(b)
        x = b if inplace else _contiguous_copy(b)
        if h0 is not None:
            x[0].addcmul_(c[0], h0 if p is None else p * h0)
        _scan_forward_(p, c[1:], x, _workspace(x, 0 if p is None else (x.shape[0] + 1) // 2))
        ctx.save_for_backward(p, c, x, h0)
        return x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_x):
        p, c, x, h0 = ctx.saved_tensors
        lam = _contiguous_copy(grad_x)
        t = lam.shape[0]
        coefficients = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        # One scratch buffer serves the reverse scan (T/2 rows), then da (T rows).
        work = _workspace(lam, t if coefficients else (0 if p is None else (t + 1) // 2))
        _scan_reverse_(None if p is None else p.conj(), c[1:].conj(), lam, work)
        grad_p = grad_c = grad_h0 = None
        if coefficients:
            grad_a = _coefficient_grad(lam, x, h0, out=work)
            if p is None:
                grad_c = grad_a
            else:
                grad_p = _sum_to(grad_a, c.conj(), p.shape)
        if h0 is not None and ctx.needs_input_grad[3]:
            a0 = c[0] if p is None else p * c[0]
            grad_h0 = lam[0] * a0.conj()
        return lam, grad_p, grad_c, grad_h0, None


def _coefficient_grad(
    lam: torch.Tensor, x: torch.Tensor, h0: torch.Tensor | None, out: torch.Tensor
) -> torch.Tensor:
    """``lam_t conj(x_{t-1})`` with ``x_{-1} = h0`` (or 0), written into ``out`` [T, B, N]."""
    torch.mul(lam[1:], x[:-1].conj(), out=out[1:])
    if h0 is None:
        out[0].zero_()
    else:
        torch.mul(lam[0], h0.conj(), out=out[0])
    return out


def _sum_to(grad_a: torch.Tensor, weight: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``sum(weight * grad_a)`` reduced to ``shape``; one matrix-vector product when the
    reduction runs over time and batch (``weight`` [T, B, 1], ``grad_a`` [T, B, N])."""
    n = grad_a.shape[-1]
    if len(shape) > 0 and shape[-1] == n and math.prod(shape[:-1]) == 1:
        return (weight.reshape(1, -1) @ grad_a.reshape(-1, n)).reshape(shape)
    return grad_a.mul_(weight).sum_to_size(shape)


# --------------------------------------------------------------------------------------------
# Public scans
# --------------------------------------------------------------------------------------------


def resettable_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    reset: torch.Tensor,
    h0: torch.Tensor | None = None,
    *,
    overwrite_b: bool = False,
) -> torch.Tensor:
    r"""All states of a diagonal linear recurrence with resets, by a log-depth parallel scan.

    .. math::

        x_t = \begin{cases} b_t & \text{if reset}_t \\
                             a_t \odot x_{t-1} + b_t & \text{otherwise,} \end{cases}
        \qquad x_{-1} = h_0 \ (\text{or } 0).

    This is the associative scan of the elements :math:`e_t = (a_t, b_t, r_t)` under

    .. math::

        (A_1, b_1, r_1) \bullet (A_2, b_2, r_2) =
        \begin{cases} (A_2, b_2, 1) & r_2 \\
                       (A_2 A_1, A_2 b_1 + b_2, r_1) & \text{otherwise,} \end{cases}

    (``e_1`` earlier). The flag is carried by zeroing ``a`` where ``reset`` is set: the pair
    ``(A, r) -> A·[not r]`` maps this operator onto the plain affine composition
    ``(A_2 A_1, A_2 b_1 + b_2)``, so the scan runs on two tensors instead of three. The forward
    pass is an in-place odd/even parallel prefix (O(T) work, O(log T) sequential depth, any T);
    the backward pass is the adjoint recurrence, run as a reverse scan of the same kind, so
    autograd stores only the coefficients and the states. Works on any device and for real or
    complex dtypes. ``h0`` is folded into the first step (dropped if ``reset[0]``), so a long
    rollout can be scanned in pieces, each starting from the previous piece's last state.

    Args:
        a: State multipliers, float32/float64/complex64/complex128 of shape [T, B, N], or any
            shape that broadcasts to it (e.g. [N] for a time-invariant system).
        b: Inputs, same dtype, shape [T, B, N].
        reset: bool tensor of shape [T, B]; ``reset[t, i]`` means an episode of batch element
            ``i`` started at step ``t``.
        h0: Optional state before step 0, same dtype, shape [B, N]; zeros when omitted.
        overwrite_b: Write the states into ``b`` (contiguous, not a leaf that requires grad,
            not used elsewhere) instead of a new tensor: one [T, B, N] buffer less.

    Returns:
        The states ``x_0 .. x_{T-1}``, same dtype as ``b``, shape [T, B, N] (``b`` itself
        with ``overwrite_b``).

    Raises:
        ValueError: on rank, shape, dtype or device mismatches (given vs expected shapes).
    """
    _check_scan_inputs(a, b, reset, h0)
    if overwrite_b and not b.is_contiguous():
        raise ValueError("overwrite_b needs a contiguous b")
    keep = ~reset.unsqueeze(-1)
    if a.dim() == 3 and a.shape[0] != 1:
        return _LinearRecurrence.apply(b, None, torch.where(keep, a, 0), h0, overwrite_b)
    p = a[0] if a.dim() == 3 else a
    return _LinearRecurrence.apply(b, p, keep.to(b.dtype), h0, overwrite_b)


def sequential_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    reset: torch.Tensor,
    h0: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reference for :func:`resettable_scan`: the same recurrence as a plain Python loop.

    Args:
        a: State multipliers, shape [T, B, N] or broadcastable to it.
        b: Inputs, shape [T, B, N].
        reset: bool tensor of shape [T, B] ("episode started at step t").
        h0: Optional initial state, shape [B, N]; zeros when omitted.

    Returns:
        The states ``x_0 .. x_{T-1}``, shape [T, B, N], differentiable by autograd.
    """
    _check_scan_inputs(a, b, reset, h0)
    a = a.expand(b.shape)
    x = torch.zeros_like(b[0]) if h0 is None else h0
    states = []
    for t in range(b.shape[0]):
        x = torch.where(reset[t].unsqueeze(-1), 0, x) * a[t] + b[t]
        states.append(x)
    return torch.stack(states)


def _parallel_scan_into_b(a, b, reset, h0):
    return resettable_scan(a, b, reset, h0, overwrite_b=True)


# S5Layer's scans; the layer's B̄u is a fresh buffer, so the parallel scan may overwrite it.
_SCANS: dict[str, ScanFn] = {"parallel": _parallel_scan_into_b, "sequential": sequential_scan}


# --------------------------------------------------------------------------------------------
# HiPPO initialisation
# --------------------------------------------------------------------------------------------


def hippo_legs(n: int) -> torch.Tensor:
    """The HiPPO-LegS state matrix, float64 of shape [n, n].

    ``A[i, k] = -sqrt(2i+1) sqrt(2k+1)`` below the diagonal, ``-(i+1)`` on it, 0 above.
    """
    q = torch.sqrt(2 * torch.arange(n, dtype=torch.float64) + 1)
    return -(torch.tril(q[:, None] * q[None, :], -1) + torch.diag(torch.arange(1.0, n + 1)))


def hippo_normal_eig(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigendecomposition of HiPPO-N, the normal part of HiPPO-LegS.

    With ``P_i = sqrt(i + 1/2)``, ``S = A + P P^T = -I/2 + K`` where ``K`` is real
    skew-symmetric, so ``S = V diag(Λ) V^H`` with unitary ``V`` and
    ``Λ = -1/2 + iω``, ``ω`` the (real) eigenvalues of the Hermitian matrix ``-iK``.
    Eigenvalues come in conjugate pairs, ascending in ``ω``.

    Returns:
        ``(Λ, V)``: complex128 of shapes [n] and [n, n].
    """
    p = torch.sqrt(torch.arange(n, dtype=torch.float64) + 0.5)
    s = hippo_legs(n) + p[:, None] * p[None, :]
    diag = torch.diagonal(s)
    omega, v = torch.linalg.eigh(-1j * (s - torch.diag(diag)))
    return torch.complex(diag.mean().expand(n), omega), v


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class S5Layer(nn.Module):
    r"""One S5 state-space layer with a diagonal, conjugate-symmetric complex state matrix.

    Continuous system ``x' = Λ x + B̃ u``, ``y = 2 Re(C̃ x) + D u``, with ``state_dim / 2``
    complex states (their conjugates are implied, hence ``2 Re``). Initialisation: ``Λ`` and
    ``V`` from :func:`hippo_normal_eig`, ``B̃ = V^{-1} B`` with ``B`` LeCun-normal,
    ``C̃ = C V`` with ``C`` complex normal, ``D`` standard normal, and one learnable timestep per
    state, ``log Δ ~ U[log dt_min, log dt_max]``. Zero-order hold:

    .. math::

        \bar A = e^{\Lambda\Delta}, \qquad
        \bar B = \Lambda^{-1}(\bar A - 1)\,\tilde B.

    ``Re Λ`` is clipped at ``-1e-4`` when used so that the system stays stable during training
    (``|Ā| < 1``).

    Parameters (real tensors, so any optimiser and ``state_dict`` round trip work):
        ``lambda_re``, ``lambda_im``, ``log_step``: [state_dim / 2];
        ``b_tilde``: [state_dim / 2, d_model, 2]; ``c_tilde``: [d_model, state_dim / 2, 2]
        (trailing axis = real, imaginary); ``d``: [d_model].

    Args:
        d_model: Input and output width H.
        state_dim: State size P (even); the layer keeps P / 2 complex states.
        dt_min: Smallest initial timestep.
        dt_max: Largest initial timestep.
        scan: ``"parallel"`` (:func:`resettable_scan`) or ``"sequential"`` (reference loop).
    """

    def __init__(
        self,
        d_model: int,
        state_dim: int,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        scan: str = "parallel",
    ) -> None:
        super().__init__()
        if state_dim < 2 or state_dim % 2:
            raise ValueError(f"state_dim must be even and >= 2, got {state_dim}")
        if scan not in _SCANS:
            raise ValueError(f"scan must be one of {sorted(_SCANS)}, got {scan!r}")
        self.d_model, self.state_dim, self.n_states = d_model, state_dim, state_dim // 2
        self.scan = scan
        lam, v = hippo_normal_eig(state_dim)
        lam, v = lam[: self.n_states], v[:, : self.n_states]
        b = torch.randn(state_dim, d_model, dtype=torch.float64) / math.sqrt(d_model)
        c = torch.randn(d_model, state_dim, dtype=torch.complex128) / math.sqrt(state_dim)
        log_step = torch.empty(self.n_states).uniform_(math.log(dt_min), math.log(dt_max))
        dtype = torch.get_default_dtype()
        self.lambda_re = nn.Parameter(lam.real.to(dtype))
        self.lambda_im = nn.Parameter(lam.imag.to(dtype))
        self.b_tilde = nn.Parameter(torch.view_as_real(v.conj().T @ b.to(v.dtype)).to(dtype))
        self.c_tilde = nn.Parameter(torch.view_as_real(c @ v).to(dtype))
        self.d = nn.Parameter(torch.randn(d_model, dtype=dtype))
        self.log_step = nn.Parameter(log_step.to(dtype))

    def eigenvalues(self) -> torch.Tensor:
        """Continuous-time eigenvalues ``Λ`` as used (real part clipped), complex [P / 2]."""
        return torch.complex(self.lambda_re.clamp(max=-1e-4), self.lambda_im)

    def discretize(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero-order-hold discretisation.

        Returns:
            ``(Ā, B̄)``: complex tensors of shapes [P / 2] and [P / 2, d_model].
        """
        lam = self.eigenvalues()
        a_bar = torch.exp(lam * torch.exp(self.log_step))
        b_bar = ((a_bar - 1) / lam).unsqueeze(-1) * torch.view_as_complex(self.b_tilde)
        return a_bar, b_bar

    def initial_state(self, batch: int) -> torch.Tensor:
        """Zero state, complex of shape [batch, P / 2] on the parameters' device."""
        dtype = _COMPLEX_OF[self.lambda_re.dtype]
        return torch.zeros(batch, self.n_states, dtype=dtype, device=self.lambda_re.device)

    def step_weights(self) -> StepWeights:
        """What :meth:`step` needs of the parameters: ``Ā`` and the real matrices of ``B̄ u``
        and ``2 Re(C̃ x) + D u``. Compute them once while the parameters stay fixed (a
        rollout) and pass them to every step."""
        a_bar, b_bar = self.discretize()
        return StepWeights(a_bar, self._input_weight(b_bar), self._output_weight())

    def _input_weight(self, b_bar: torch.Tensor) -> torch.Tensor:
        """Real [P, H] matrix of ``B̄ u`` on the interleaved (re, im) state."""
        return torch.view_as_real(b_bar).transpose(1, 2).reshape(self.state_dim, self.d_model)

    def _output_weight(self) -> torch.Tensor:
        """Real [H, P] matrix of ``2 Re(C̃ x)`` on the interleaved (re, im) state."""
        c = torch.view_as_complex(self.c_tilde)
        return torch.stack((2 * c.real, -2 * c.imag), dim=-1).reshape(self.d_model, self.state_dim)

    def _input(self, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``B̄ u`` as one real matmul: [..., H] real -> [..., P / 2] complex (a view)."""
        return torch.view_as_complex(F.linear(u, w).unflatten(-1, (self.n_states, 2)))

    def _output(self, x: torch.Tensor, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``2 Re(C̃ x) + D u`` as one real matmul on the interleaved (re, im) state."""
        return F.linear(torch.view_as_real(x).flatten(-2), w).addcmul_(u, self.d)

    def _check_input(self, u: torch.Tensor, reset: torch.Tensor, rank: int) -> None:
        lead = "[T, B, d_model]" if rank == 3 else "[B, d_model]"
        if u.dim() != rank or u.shape[-1] != self.d_model:
            raise ValueError(
                f"u must have shape {lead} with d_model={self.d_model}, got {tuple(u.shape)}"
            )
        if reset.shape != u.shape[:-1]:
            raise ValueError(
                f"reset must have shape {tuple(u.shape[:-1])} (u without its last axis), "
                f"got {tuple(reset.shape)}"
            )
        if u.dtype != self.lambda_re.dtype:
            raise ValueError(f"u must have dtype {self.lambda_re.dtype}, got {u.dtype}")

    def forward(
        self, u: torch.Tensor, reset: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Parallel mode over a whole rollout.

        Args:
            u: Inputs, float of shape [T, B, d_model].
            reset: bool [T, B]; ``reset[t]`` = an episode started at step ``t``.
            h0: Optional complex state before step 0, [B, P / 2]; zeros when omitted.

        Returns:
            ``(y, h_last)``: outputs [T, B, d_model] (dtype of ``u``) and the complex state
            after the last step, [B, P / 2].
        """
        self._check_input(u, reset, rank=3)
        a_bar, b_bar = self.discretize()
        x = _SCANS[self.scan](a_bar, self._input(u, self._input_weight(b_bar)), reset, h0)
        return self._output(x, u, self._output_weight()), x[-1]

    def step(
        self,
        u_t: torch.Tensor,
        reset_t: torch.Tensor,
        h: torch.Tensor,
        weights: StepWeights | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step, for acting; same numbers as :meth:`forward` on the same sequence.

        Args:
            u_t: Inputs, float [B, d_model].
            reset_t: bool [B]; True where an episode starts at this step.
            h: Complex state before this step, [B, P / 2].
            weights: :meth:`step_weights` of the current parameters (computed here when
                omitted).

        Returns:
            ``(y_t, h_new)``: outputs [B, d_model] and the new state [B, P / 2].
        """
        self._check_input(u_t, reset_t, rank=2)
        if h.shape != (u_t.shape[0], self.n_states):
            raise ValueError(
                f"h must have shape [B, P/2] = {(u_t.shape[0], self.n_states)}, "
                f"got {tuple(h.shape)}"
            )
        a_bar, w_in, w_out = self.step_weights() if weights is None else weights
        h = torch.where(reset_t.unsqueeze(-1), 0, h) * a_bar + self._input(u_t, w_in)
        return self._output(h, u_t, w_out), h


class S5Block(nn.Module):
    """A stack of S5 layers with pre-LayerNorm, GELU + gated linear unit and residuals.

    For each layer ``l``: ``z = S5_l(LayerNorm_l(x))``, ``g = GELU(z)``,
    ``x <- x + g ⊙ sigmoid(W_l g + c_l)``. The recurrent state is the layers' states stacked,
    complex of shape [n_layers, B, state_dim / 2].

    Args:
        d_model: Input and output width H.
        state_dim: State size P of every layer (even).
        n_layers: Number of stacked layers.
        **layer_kwargs: Passed to :class:`S5Layer` (``dt_min``, ``dt_max``, ``scan``).
    """

    def __init__(self, d_model: int, state_dim: int, n_layers: int = 2, **layer_kwargs) -> None:
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        self.n_layers = n_layers
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.layers = nn.ModuleList(
            S5Layer(d_model, state_dim, **layer_kwargs) for _ in range(n_layers)
        )
        self.gates = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(n_layers))

    def initial_state(self, batch: int) -> torch.Tensor:
        """Zero state, complex of shape [n_layers, batch, state_dim / 2]."""
        return torch.stack([layer.initial_state(batch) for layer in self._s5_layers()])

    def _s5_layers(self) -> list[S5Layer]:
        """`layers` with their type (a ModuleList's items are typed Module)."""
        return cast("list[S5Layer]", list(self.layers))

    def _mix(self, i: int, z: torch.Tensor) -> torch.Tensor:
        g = F.gelu(z)
        return g * self.gates[i](g).sigmoid_()

    def _check_state(self, h: torch.Tensor | None, batch: int) -> None:
        expected = (self.n_layers, batch, self.layers[0].n_states)
        if h is not None and h.shape != expected:
            raise ValueError(
                f"state must have shape [n_layers, B, P/2] = {expected}, got {tuple(h.shape)}"
            )

    def forward(
        self, u: torch.Tensor, reset: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Parallel mode over a whole rollout.

        Args:
            u: Inputs, float [T, B, d_model].
            reset: bool [T, B]; ``reset[t]`` = an episode started at step ``t``.
            h0: Optional complex state [n_layers, B, P / 2]; zeros when omitted.

        Returns:
            ``(y, h_last)``: outputs [T, B, d_model] and the state after the last step,
            complex [n_layers, B, P / 2].
        """
        if u.dim() != 3:
            raise ValueError(f"u must have shape [T, B, d_model], got {tuple(u.shape)}")
        self._check_state(h0, u.shape[1])
        x, states = u, []
        for i, (norm, layer) in enumerate(zip(self.norms, self.layers, strict=True)):
            z, h = layer(norm(x), reset, None if h0 is None else h0[i])
            x = self._mix(i, z).add_(x)
            states.append(h)
        return x, torch.stack(states)

    def step_weights(self) -> list[StepWeights]:
        """Every layer's :meth:`S5Layer.step_weights` (compute once per rollout)."""
        return [layer.step_weights() for layer in self._s5_layers()]

    def step(
        self,
        u_t: torch.Tensor,
        reset_t: torch.Tensor,
        h: torch.Tensor,
        weights: list[StepWeights] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step, for acting; same numbers as :meth:`forward`.

        Args:
            u_t: Inputs, float [B, d_model].
            reset_t: bool [B]; True where an episode starts at this step.
            h: Complex state [n_layers, B, P / 2].
            weights: :meth:`step_weights` of the current parameters (computed here when
                omitted).

        Returns:
            ``(y_t, h_new)``: outputs [B, d_model] and the new state [n_layers, B, P / 2].
        """
        if u_t.dim() != 2:
            raise ValueError(f"u_t must have shape [B, d_model], got {tuple(u_t.shape)}")
        self._check_state(h, u_t.shape[0])
        x, states = u_t, []
        for i, (norm, layer) in enumerate(zip(self.norms, self._s5_layers(), strict=True)):
            z, h_i = layer.step(norm(x), reset_t, h[i], None if weights is None else weights[i])
            x = self._mix(i, z).add_(x)
            states.append(h_i)
        return x, torch.stack(states)
