"""Tests of the S5 recurrence (baselines.s5) against independent references.

References: a hand-computed scalar case, the plain sequential loop (`sequential_scan`),
finite differences (`gradcheck`), stepping one step at a time, running each episode alone,
and the JAX implementation (`baselines.s5_jax`, built on `jax.lax.associative_scan` with an
explicit (A, b, reset) operator).

Tolerances: 64-bit dtypes 1e-10; 32-bit dtypes rtol = atol = 1e-5 for states and outputs
(2e-5 .. 1e-4 for gradients, which sum over time and batch), as stated at each check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from baselines.s5 import (  # noqa: E402
    S5Block,
    S5Layer,
    hippo_legs,
    hippo_normal_eig,
    resettable_scan,
    sequential_scan,
)

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
LENGTHS = [1, 2, 7, 16, 33]


def _tol(dtype: torch.dtype, grad: bool = False) -> dict[str, float]:
    if dtype in (torch.float64, torch.complex128):
        return {"rtol": 1e-10, "atol": 1e-10}
    return {"rtol": 1e-4, "atol": 2e-5} if grad else {"rtol": 1e-5, "atol": 1e-5}


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype)


def _scan_inputs(t: int, dtype: torch.dtype, a_kind: str, seed: int = 0, p_reset: float = 0.3):
    """(a, b, reset, h0) for B = 3, N = 4; |a| < 1 so states stay O(1)."""
    gen = torch.Generator().manual_seed(seed)
    batch, n = 3, 4
    shapes = {"full": (t, batch, n), "per_state": (n,), "per_batch": (1, batch, n), "scalar": ()}
    a_shape = shapes[a_kind]
    a = (
        0.95
        * torch.rand(a_shape, generator=gen)
        * torch.exp(1j * math.pi * torch.rand(a_shape, generator=gen))
    )
    a = a.to(dtype) if dtype.is_complex else a.real.to(dtype)
    b = _randn(gen, t, batch, n, dtype=dtype)
    reset = torch.rand(t, batch, generator=gen) < p_reset
    h0 = _randn(gen, batch, n, dtype=dtype)
    return a, b, reset, h0


def _loss(x: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """A real loss that weights every state differently, so every gradient entry matters."""
    w = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed), dtype=x.dtype)
    return (x * w.conj()).real.sum()


def _values_and_grads(scan, a, b, reset, h0):
    leaves = [v.detach().clone().requires_grad_() for v in (a, b, h0)]
    x = scan(leaves[0], leaves[1], reset, leaves[2])
    return (x, *torch.autograd.grad(_loss(x), leaves))


# --------------------------------------------------------------------------------------------
# The scan
# --------------------------------------------------------------------------------------------


def test_hand_computed_scalar_case():
    # a = 0.5, b = 1, episode starts at t = 2, h0 = 0:
    #   x0 = 0.5*0 + 1 = 1, x1 = 0.5*1 + 1 = 1.5, x2 = 1 (reset), x3 = 0.5*1 + 1 = 1.5.
    # loss = sum_t x_t:  dL/db = (1 + a1, 1, 1 + a3, 1) = (1.5, 1, 1.5, 1),
    #   dL/da_t = x_{t-1} where no reset: (h0, x0, 0, x2) = (0, 1, 0, 1).
    a = torch.full((4, 1, 1), 0.5, dtype=torch.float64, requires_grad=True)
    b = torch.ones(4, 1, 1, dtype=torch.float64, requires_grad=True)
    reset = torch.tensor([[False], [False], [True], [False]])
    x = resettable_scan(a, b, reset)
    torch.testing.assert_close(x.flatten(), torch.tensor([1.0, 1.5, 1.0, 1.5], dtype=x.dtype))
    x.sum().backward()
    torch.testing.assert_close(b.grad.flatten(), torch.tensor([1.5, 1, 1.5, 1], dtype=x.dtype))
    torch.testing.assert_close(a.grad.flatten(), torch.tensor([0.0, 1, 0, 1], dtype=x.dtype))


def test_initial_state_enters_first_step_unless_it_resets():
    # h0 = 2: x0 = 0.5*2 + 1 = 2, x1 = 0.5*2 + 1 = 2. With reset[0], h0 is dropped: x0 = 1.
    a = torch.full((2, 2, 1), 0.5)
    b = torch.ones(2, 2, 1)
    reset = torch.tensor([[False, True], [False, False]])
    x = resettable_scan(a, b, reset, h0=torch.full((2, 1), 2.0))
    torch.testing.assert_close(x[:, :, 0], torch.tensor([[2.0, 1.0], [2.0, 1.5]]))


@pytest.mark.parametrize("t", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("a_kind", ["full", "per_state", "per_batch", "scalar"])
@pytest.mark.parametrize("p_reset", [0.0, 0.3])
def test_parallel_scan_equals_sequential_loop(t, dtype, a_kind, p_reset):
    a, b, reset, h0 = _scan_inputs(t, dtype, a_kind, seed=t, p_reset=p_reset)
    par = _values_and_grads(resettable_scan, a, b, reset, h0)
    seq = _values_and_grads(sequential_scan, a, b, reset, h0)
    torch.testing.assert_close(par[0], seq[0], **_tol(dtype))
    for name, g_par, g_seq in zip(("a", "b", "h0"), par[1:], seq[1:], strict=True):
        torch.testing.assert_close(g_par, g_seq, **_tol(dtype, grad=True), msg=name)


@pytest.mark.parametrize("a_kind", ["full", "per_state"])
def test_scan_gradients_match_finite_differences(a_kind):
    a, b, reset, h0 = _scan_inputs(7, torch.complex128, a_kind, seed=3)
    leaves = tuple(v.requires_grad_() for v in (a, b, h0))
    assert torch.autograd.gradcheck(lambda a, b, h: resettable_scan(a, b, reset, h), leaves)


def test_scan_without_initial_state_starts_from_zero():
    a, b, reset, _ = _scan_inputs(9, torch.complex64, "full", seed=4)
    zeros = torch.zeros(b.shape[1:], dtype=b.dtype)
    torch.testing.assert_close(resettable_scan(a, b, reset), sequential_scan(a, b, reset, zeros))


@pytest.mark.parametrize("k", [1, 5, 16])
def test_scan_continues_across_pieces(k):
    a, b, reset, h0 = _scan_inputs(17, torch.complex64, "full", seed=5)
    whole = resettable_scan(a, b, reset, h0)
    first = resettable_scan(a[:k], b[:k], reset[:k], h0)
    second = resettable_scan(a[k:], b[k:], reset[k:], first[-1])
    torch.testing.assert_close(torch.cat([first, second]), whole, rtol=1e-5, atol=1e-5)


def test_overwrite_b_writes_states_into_b_and_keeps_gradients():
    a, _, reset, h0 = _scan_inputs(16, torch.complex64, "per_state", seed=12)
    base = torch.randn(16, 3, 8, generator=torch.Generator().manual_seed(2), requires_grad=True)

    def run(overwrite: bool):
        b = torch.view_as_complex((2 * base).unflatten(-1, (4, 2)))  # a view, as in S5Layer
        x = resettable_scan(a, b, reset, h0, overwrite_b=overwrite)
        return x, b, torch.autograd.grad(_loss(x), base)[0]

    x_in, b_in, g_in = run(True)
    x_new, b_new, g_new = run(False)
    assert x_in.data_ptr() == b_in.data_ptr() and x_new.data_ptr() != b_new.data_ptr()
    torch.testing.assert_close(x_in, x_new)
    torch.testing.assert_close(g_in, g_new)


@settings(max_examples=25, deadline=None)
@given(
    t=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    p_reset=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
)
def test_parallel_scan_equals_sequential_loop_for_any_length(t, seed, p_reset):
    a, b, reset, h0 = _scan_inputs(t, torch.complex128, "full", seed=seed, p_reset=p_reset)
    torch.testing.assert_close(
        resettable_scan(a, b, reset, h0), sequential_scan(a, b, reset, h0), rtol=1e-10, atol=1e-10
    )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_parallel_scan_on_cuda_equals_cpu(dtype):
    a, b, reset, h0 = _scan_inputs(33, dtype, "per_state", seed=6)
    cpu = _values_and_grads(resettable_scan, a, b, reset, h0)
    cuda = _values_and_grads(resettable_scan, a.cuda(), b.cuda(), reset.cuda(), h0.cuda())
    for c, g in zip(cpu, cuda, strict=True):
        torch.testing.assert_close(g.cpu(), c, rtol=1e-4, atol=2e-5)


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"b": torch.zeros(5, 3)}, r"b must have shape \[T, B, N\].*got \(5, 3\)"),
        ({"reset": torch.zeros(5, 2, dtype=torch.bool)}, r"reset.*\(5, 3\), got \(5, 2\)"),
        ({"reset": torch.zeros(5, 3)}, "reset must be a bool tensor"),
        ({"a": torch.zeros(5, 3, 7)}, r"a must have shape.*\(5, 3, 4\).*got \(5, 3, 7\)"),
        ({"h0": torch.zeros(3, 5)}, r"h0 must have shape \[B, N\] = \(3, 4\), got \(3, 5\)"),
        ({"a": torch.zeros(5, 3, 4, dtype=torch.float64)}, "share one dtype"),
        ({"b": torch.zeros(0, 3, 4)}, "T >= 1"),
        ({"reset": torch.zeros(5, 3, dtype=torch.bool, device="meta")}, "one device"),
    ],
)
@pytest.mark.parametrize("scan", [resettable_scan, sequential_scan])
def test_scan_rejects_mismatched_inputs(scan, change, message):
    args = {
        "a": torch.zeros(5, 3, 4),
        "b": torch.zeros(5, 3, 4),
        "reset": torch.zeros(5, 3, dtype=torch.bool),
        "h0": torch.zeros(3, 4),
    }
    with pytest.raises(ValueError, match=message):
        scan(**(args | change))


def test_layer_and_block_reject_mismatched_inputs():
    layer, block = S5Layer(4, 8), S5Block(4, 8, n_layers=2)
    reset = torch.zeros(5, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"d_model=4, got \(5, 3, 6\)"):
        layer(torch.zeros(5, 3, 6), reset)
    with pytest.raises(ValueError, match=r"reset must have shape \(5, 3\).*got \(5, 2\)"):
        layer(torch.zeros(5, 3, 4), reset[:, :2])
    with pytest.raises(ValueError, match=r"h must have shape \[B, P/2\] = \(3, 4\)"):
        layer.step(torch.zeros(3, 4), reset[0], torch.zeros(3, 5, dtype=torch.complex64))
    with pytest.raises(ValueError, match=r"\[n_layers, B, P/2\] = \(2, 3, 4\), got \(1, 3, 4\)"):
        block(torch.zeros(5, 3, 4), reset, torch.zeros(1, 3, 4, dtype=torch.complex64))
    with pytest.raises(ValueError, match="state_dim must be even"):
        S5Layer(4, 7)


# --------------------------------------------------------------------------------------------
# Initialisation
# --------------------------------------------------------------------------------------------


def test_hippo_legs_matches_its_definition():
    s3, s5, s15 = math.sqrt(3), math.sqrt(5), math.sqrt(15)
    expected = -torch.tensor([[1.0, 0, 0], [s3, 2, 0], [s5, s15, 3]], dtype=torch.float64)
    torch.testing.assert_close(hippo_legs(3), expected)


def test_hippo_normal_eigendecomposition_reconstructs_normal_part():
    n = 8
    lam, v = hippo_normal_eig(n)
    p = torch.sqrt(torch.arange(n, dtype=torch.float64) + 0.5)
    s = hippo_legs(n) + p[:, None] * p[None, :]
    torch.testing.assert_close(v @ torch.diag(lam) @ v.conj().T, s.to(v.dtype))
    torch.testing.assert_close(v.conj().T @ v, torch.eye(n, dtype=v.dtype))
    # Real S: eigenvalues in conjugate pairs, the first half's conjugates are the second half.
    torch.testing.assert_close(
        torch.sort(-lam[: n // 2].imag).values, torch.sort(lam[n // 2 :].imag).values
    )


def test_initial_eigenvalues_are_stable_and_discretisation_contracts():
    torch.manual_seed(0)
    layer = S5Layer(d_model=6, state_dim=16)
    lam = layer.eigenvalues().detach()
    assert lam.shape == (8,)
    assert torch.all(lam.real < 0)
    torch.testing.assert_close(lam.real, torch.full((8,), -0.5))
    assert torch.all(lam.imag < 0), "the kept half are the eigenvalues with negative imag part"
    a_bar, b_bar = layer.discretize()
    assert b_bar.shape == (8, 6)
    assert torch.all(a_bar.abs() < 1)
    step = layer.log_step.exp()
    assert torch.all((step >= 1e-3) & (step <= 1e-1))


def test_zero_order_hold_matches_matrix_exponential():
    # ZOH of x' = Λx + B̃u over Δ: Ā = e^{ΛΔ}, B̄ = ∫_0^Δ e^{Λs} ds B̃. Build the augmented
    # matrix [[ΛΔ, B̃Δ], [0, 0]]; its exponential holds Ā and B̄ in its top row (Van Loan).
    torch.manual_seed(1)
    layer = S5Layer(d_model=3, state_dim=4).double()
    a_bar, b_bar = (v.detach() for v in layer.discretize())
    lam, delta = layer.eigenvalues().detach(), layer.log_step.exp().detach()
    b_tilde = torch.view_as_complex(layer.b_tilde.detach())
    for i in range(2):
        m = torch.zeros(4, 4, dtype=torch.complex128)
        m[0, 0] = lam[i] * delta[i]
        m[0, 1:] = b_tilde[i] * delta[i]
        e = torch.linalg.matrix_exp(m)
        torch.testing.assert_close(a_bar[i], e[0, 0])
        torch.testing.assert_close(b_bar[i], e[0, 1:])


# --------------------------------------------------------------------------------------------
# Layer and block: replay, continuation
# --------------------------------------------------------------------------------------------


def _episodes(t: int, batch: int, seed: int) -> torch.Tensor:
    """bool [T, B] episode starts: element 0 starts at 0, others at random steps."""
    reset = torch.rand(t, batch, generator=torch.Generator().manual_seed(seed)) < 0.15
    reset[0, 0] = True
    return reset


@pytest.mark.parametrize("module", ["layer", "block"])
def test_replay_parallel_equals_stepping_with_manual_resets(module):
    torch.manual_seed(2)
    net = S5Layer(5, 8) if module == "layer" else S5Block(5, 8, n_layers=2)
    t, batch = 21, 3
    u = torch.randn(t, batch, 5)
    reset = _episodes(t, batch, seed=7)
    h0 = 0.3 * torch.randn_like(net.initial_state(batch))
    y, h_last = net(u, reset, h0)
    # Step with reset flags off, restoring the initial state by hand at each episode start.
    h, zeros, ys = h0, net.initial_state(batch), []
    no_reset = torch.zeros(batch, dtype=torch.bool)
    state_shape = (-1, 1) if module == "layer" else (1, -1, 1)
    for i in range(t):
        h = torch.where(reset[i].view(state_shape), zeros, h)
        y_i, h = net.step(u[i], no_reset, h)
        ys.append(y_i)
    torch.testing.assert_close(torch.stack(ys), y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, h_last, rtol=1e-5, atol=1e-5)


def test_step_with_reset_flags_equals_parallel():
    torch.manual_seed(3)
    block = S5Block(4, 6, n_layers=2)
    u, reset = torch.randn(13, 2, 4), _episodes(13, 2, seed=8)
    y, h_last = block(u, reset)
    h, ys = block.initial_state(2), []
    for i in range(13):
        y_i, h = block.step(u[i], reset[i], h)
        ys.append(y_i)
    torch.testing.assert_close(torch.stack(ys), y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, h_last, rtol=1e-5, atol=1e-5)


def test_each_episode_run_alone_gives_the_same_outputs():
    torch.manual_seed(4)
    block = S5Block(4, 8, n_layers=2)
    u = torch.randn(20, 1, 4)
    starts = [0, 6, 7, 15]  # episodes of lengths 6, 1, 8, 5
    reset = torch.zeros(20, 1, dtype=torch.bool)
    reset[starts] = True
    y, _ = block(u, reset)
    for s, e in zip(starts, [*starts[1:], 20], strict=True):
        alone, _ = block(u[s:e], torch.zeros(e - s, 1, dtype=torch.bool))
        torch.testing.assert_close(y[s:e], alone, rtol=1e-5, atol=1e-5)


def test_block_continues_across_pieces():
    torch.manual_seed(5)
    block = S5Block(4, 8, n_layers=3)
    u, reset = torch.randn(19, 3, 4), _episodes(19, 3, seed=9)
    y, h = block(u, reset)
    y1, h1 = block(u[:8], reset[:8])
    y2, h2 = block(u[8:], reset[8:], h1)
    torch.testing.assert_close(torch.cat([y1, y2]), y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h2, h, rtol=1e-5, atol=1e-5)


def test_sequential_and_parallel_layers_agree_including_parameter_gradients():
    torch.manual_seed(6)
    par = S5Block(4, 8, n_layers=2)
    seq = S5Block(4, 8, n_layers=2, scan="sequential")
    seq.load_state_dict(par.state_dict())
    u, reset = torch.randn(12, 3, 4), _episodes(12, 3, seed=10)
    for net in (par, seq):
        net(u, reset)[0].square().mean().backward()
    for (name, p), q in zip(par.named_parameters(), seq.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)


# --------------------------------------------------------------------------------------------
# Parity with the JAX reference
# --------------------------------------------------------------------------------------------


def _jax():
    return pytest.importorskip("baselines.s5_jax")


def _numpy_state(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def test_jax_scan_with_explicit_reset_operator_equals_torch_scan():
    s5_jax = _jax()
    import jax

    scan = jax.jit(s5_jax.resettable_scan)
    for a_kind in ("full", "per_state"):
        a, b, reset, h0 = _scan_inputs(33, torch.complex64, a_kind, seed=11)
        x_jax = scan(a.numpy(), b.numpy(), reset.numpy(), h0.numpy())
        # float32 tolerance for states: rtol = atol = 1e-5.
        np.testing.assert_allclose(
            np.asarray(x_jax), resettable_scan(a, b, reset, h0).numpy(), rtol=1e-5, atol=1e-5
        )


def test_layer_matches_jax_reference():
    s5_jax = _jax()
    import jax

    torch.manual_seed(7)
    layer = S5Layer(6, 16)
    u, reset = torch.randn(33, 4, 6), _episodes(33, 4, seed=12)
    h0 = 0.5 * torch.randn(4, 8, dtype=torch.complex64)
    y, h = layer(u, reset, h0)
    params = s5_jax.layer_params_from_state_dict(_numpy_state(layer))
    y_jax, h_jax = jax.jit(s5_jax.s5_layer)(params, u.numpy(), reset.numpy(), h0.numpy())
    # float32: states rtol = atol = 1e-5; outputs (sums over 8 complex states) the same.
    np.testing.assert_allclose(np.asarray(h_jax), h.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(y_jax), y.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_block_and_its_gradients_match_jax_reference():
    s5_jax = _jax()
    import jax
    import jax.numpy as jnp

    torch.manual_seed(8)
    block = S5Block(6, 16, n_layers=2)
    u, reset = torch.randn(24, 3, 6), _episodes(24, 3, seed=13)
    h0 = 0.5 * torch.randn(2, 3, 8, dtype=torch.complex64)
    y, h = block(u, reset, h0)
    y.square().mean().backward()

    def loss(p):
        y, h = s5_jax.s5_block(p, u.numpy(), reset.numpy(), h0.numpy())
        return jnp.mean(jnp.square(y)), (y, h)

    params = s5_jax.block_params_from_state_dict(_numpy_state(block))
    (_, (y_jax, h_jax)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    # float32: states rtol = atol = 1e-5; block outputs rtol = atol = 2e-5 (two layers deep).
    np.testing.assert_allclose(np.asarray(h_jax), h.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(y_jax), y.detach().numpy(), rtol=2e-5, atol=2e-5)
    for i, layer in enumerate(block.layers):
        for name, p in layer.named_parameters():
            # Gradients sum over time and batch: rtol 1e-4, atol 1e-5.
            np.testing.assert_allclose(
                np.asarray(grads["layers"][i][name]),
                p.grad.numpy(),
                rtol=1e-4,
                atol=1e-5,
                err_msg=f"layer {i} {name}",
            )


# --------------------------------------------------------------------------------------------
# The benchmark's bookkeeping
# --------------------------------------------------------------------------------------------


def test_benchmark_ratios_and_tables():
    from benchmarks.scan import add_ratios, goal_lines, render

    size = {"T": 128, "batch": 1024, "state_dim": 8, "d_model": 4}
    rows = [
        {"impl": "torch_parallel", "fwd_bwd_ms": 10.0, "peak_mb": 30.0, **size},
        {"impl": "torch_sequential", "fwd_bwd_ms": 60.0, "peak_mb": 50.0, **size},
        {"impl": "jax", "fwd_bwd_ms": 8.0, "peak_mb": 40.0, **size},
    ]
    add_ratios(rows)
    # 10 / 8 = 1.25 of JAX's time, 60 / 10 = 6x faster than the loop, 30 / 40 = 0.75 memory.
    assert rows[0]["time_vs_jax"] == pytest.approx(1.25)
    assert rows[0]["speedup_vs_sequential"] == pytest.approx(6.0)
    assert rows[0]["memory_vs_jax"] == pytest.approx(0.75)
    assert rows[1]["speedup_vs_sequential"] == pytest.approx(1.0)
    header = render(rows, "markdown").splitlines()[0]
    assert "[ms]" in header and "[MiB]" in header and "[×]" in header
    assert render(rows, "latex").startswith(r"\begin{table}")
    assert goal_lines(rows) == [
        "Goals (defined at T = 128, batch = 1024):",
        "  P=8: time / JAX <= 1.5: 1.25 (met)",
        "  P=8: speed-up vs sequential >= 5: 6.00 (met)",
        "  P=8: mem / JAX <= 1.5: 0.75 (met)",
    ]
    # at another size no goal is judged (the quick preset runs batch 256)
    small = [{**r, "batch": 256} for r in rows]
    assert goal_lines(small) == [
        "Goals are defined at T = 128, batch = 1024 (`--T 128 --batch 1024`); this run has no "
        "row at that size, so none is evaluated."
    ]


@pytest.mark.subprocess
@pytest.mark.slow
def test_benchmark_command_writes_rows_for_every_implementation(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "scan.json"
    flags = "--T 8 --batch 2 --state-dim 4 --d-model 4 --repeats 2 --format none".split()
    cmd = [sys.executable, "-m", "benchmarks.scan", *flags, "--json", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    rows = json.loads(out.read_text())
    assert [r["impl"] for r in rows] == ["torch_parallel", "torch_sequential", "jax"]
    for r in rows:
        assert r["fwd_bwd_ms"] > 0 and r["peak_mb"] >= 0 and r["peak_mb_method"]
        assert (r["T"], r["batch"], r["state_dim"]) == (8, 2, 4)
