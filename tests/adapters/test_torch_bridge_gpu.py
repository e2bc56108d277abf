"""The bridge and TorchVecEnv on a CUDA device: what only a GPU can show.

Every test is marked `gpu` (skipped without CUDA, tests/conftest.py); `.ci/gpu` runs them.
The device-aware tests of test_torch_bridge.py run on the GPU too (GIGASTEP_TEST_DEVICE=cuda).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

from gigastep.adapters.torch import TorchVecEnv, jax_to_torch, torch_to_jax

pytestmark = pytest.mark.gpu

SCENARIO = "identical_2_vs_2_fobs_vec_void_cont"
# The GPU and the CPU run the same program on the same inputs; they may differ in the last
# bits of transcendental functions and fused multiply-adds. A step's observations (values in
# [-1, 1]) and rewards (sums of a few O(1) terms) agree to this:
ATOL, RTOL = 1e-5, 1e-5


def _actions(seed: int, device: torch.device | str, batch: int = 8) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, 4, 3, generator=g) * 2 - 1).to(device)


def test_conversions_share_device_memory_both_ways():
    x = jax.device_put(np.arange(24, dtype=np.float32).reshape(4, 6), jax.devices("gpu")[0])
    t = jax_to_torch(x)
    assert t.is_cuda and t.data_ptr() == x.unsafe_buffer_pointer()
    back = torch_to_jax(t)
    assert back.devices() == x.devices() and back.unsafe_buffer_pointer() == t.data_ptr()
    u = torch.arange(12, dtype=torch.int32, device="cuda")
    assert torch_to_jax(u).unsafe_buffer_pointer() == u.data_ptr()


def test_a_misaligned_cuda_view_is_copied_and_runs_in_a_compiled_program():
    t = torch.arange(65, dtype=torch.float32, device="cuda")[1:]
    assert t.data_ptr() % 16 != 0
    x = torch_to_jax(t)
    assert x.unsafe_buffer_pointer() % 16 == 0
    out = jax.jit(lambda a: a.reshape(8, 8) @ a.reshape(8, 8).T)(x)
    ref = t.reshape(8, 8).double() @ t.reshape(8, 8).T.double()
    np.testing.assert_allclose(np.asarray(out), ref.cpu().numpy(), rtol=1e-3)


def test_outputs_live_on_the_gpu_and_stay_valid_after_later_steps():
    venv = TorchVecEnv(SCENARIO, 8, seed=0, device="cuda")
    assert venv.jax_device.platform == "gpu"
    venv.reset()
    obs, rewards, dones, ep_dones, info = venv.step(_actions(0, "cuda"))
    assert all(t.is_cuda for t in (obs, rewards, dones, ep_dones, *info.values()))
    kept = [t.clone() for t in (obs, rewards, dones, ep_dones)]
    for i in range(5):  # later steps donate the states, not the returned outputs
        venv.step(_actions(i + 1, "cuda"))
    torch.cuda.synchronize()
    for old, copy in zip((obs, rewards, dones, ep_dones), kept, strict=True):
        assert torch.equal(old, copy)


def test_actions_on_the_cpu_are_a_clear_error():
    venv = TorchVecEnv(SCENARIO, 8, seed=0, device="cuda")
    venv.reset()
    with pytest.raises(ValueError, match="actions are on cpu but this TorchVecEnv runs on cuda"):
        venv.step(_actions(0, "cpu"))


def test_snapshot_restore_and_the_seed_replay_bit_for_bit_on_the_gpu():
    venv = TorchVecEnv(SCENARIO, 8, seed=3, device="cuda")
    venv.reset()
    venv.step(_actions(0, "cuda"))
    snap = venv.snapshot()
    assert all(t.is_cuda for t in snap["states"])

    def three_steps(env):
        return [env.step(_actions(10 + i, "cuda"))[0].clone() for i in range(3)]

    first = three_steps(venv)
    venv.restore(snap)
    again = three_steps(venv)
    other = TorchVecEnv(SCENARIO, 8, seed=3, device="cuda")
    other.reset()
    other.step(_actions(0, "cuda"))
    third = three_steps(other)
    for a, b, c in zip(first, again, third, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_a_gpu_step_equals_the_cpu_step():
    """Same seed, same actions: the reset and one step agree within ATOL/RTOL; the flags of
    the step (dones, ep_dones) exactly."""
    runs = {}
    for device in ("cpu", "cuda"):
        venv = TorchVecEnv(SCENARIO, 8, seed=7, device=device)
        first = venv.reset().cpu()
        obs, rewards, dones, ep_dones, _ = venv.step(_actions(1, device))
        runs[device] = [first, obs.cpu(), rewards.cpu(), dones.cpu(), ep_dones.cpu()]
    for name, c, g in zip(
        ("reset obs", "obs", "rewards"), runs["cpu"][:3], runs["cuda"][:3], strict=True
    ):
        torch.testing.assert_close(g, c, atol=ATOL, rtol=RTOL, msg=f"{name} differ")
    for c, g in zip(runs["cpu"][3:], runs["cuda"][3:], strict=True):
        assert torch.equal(c, g)
