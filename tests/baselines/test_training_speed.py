"""The trainer's fast paths compute what the plain ones do: the rollout's noise in one call,
S5 step weights computed once, the GRU kernel replay, no host read while acting, and the
`target_kl` early stop on each epoch's own mean."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from baselines import noise
from baselines.config import PPOConfig
from baselines.learn import UPDATE_STATS, PPOUpdate
from baselines.policies import ActorCritic, PolicySpec
from baselines.s5 import S5Block
from baselines.train import Trainer

TINY = PPOConfig(
    scenario="identical_2_vs_2_fobs_vec_void_disc",
    num_envs=8,
    rollout_steps=12,
    hidden=16,
    s5_state_dim=8,
    epochs=3,
    minibatches=2,
    opponent="self",
    progress=False,
    tensorboard=False,
    plots=False,
)

_MASK = (1 << 64) - 1


def _splitmix_finaliser(x: int) -> int:
    """SplitMix64's finaliser on Python ints (Steele, Lea and Flood 2014)."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _reference_uniform(seed: int, stream: int, step: int, row: int, width: int, j: int) -> float:
    key = 0
    for v in (seed, stream, step):
        key = _splitmix_finaliser(key ^ (v & _MASK))
    bits = _splitmix_finaliser((row * width + j) ^ key) >> 40
    # in float32, as the sampler computes it (bits + 0.5 rounds to 24 bits)
    return float((np.float32(bits) + np.float32(0.5)) * np.float32(1.0 / (1 << 24)))


def test_a_rollouts_noise_in_one_call_is_the_splitmix_hash_of_every_step():
    rows = torch.tensor([0, 7, 1_000_003])
    got = noise.rollout_uniforms(seed=12, stream=3, first_step=40, steps=3, rows=rows, width=2)
    assert got.shape == (3, 3, 2)
    for t in range(3):
        for i, row in enumerate(rows.tolist()):
            for j in range(2):
                expected = _reference_uniform(12, 3, 40 + t, row, 2, j)
                assert got[t, i, j].item() == pytest.approx(expected, abs=0)
        assert torch.equal(got[t], noise.uniforms(12, 3, 40 + t, rows, 2))


def test_rollout_noise_refuses_rows_that_are_not_a_vector():
    with pytest.raises(ValueError, match=r"rows must be int64 \[N\], got shape \(2, 2\)"):
        noise.rollout_uniforms(0, 0, 0, 4, torch.zeros(2, 2, dtype=torch.int64), 1)


def test_s5_steps_with_weights_computed_once_equal_steps_computing_them():
    torch.manual_seed(0)
    block = S5Block(16, 8, n_layers=2)
    x = torch.randn(5, 6, 16)
    reset = torch.rand(5, 6) < 0.3
    weights = block.step_weights()
    h_once = h_each = block.initial_state(6)
    with torch.no_grad():
        for t in range(5):
            y_once, h_once = block.step(x[t], reset[t], h_once, weights)
            y_each, h_each = block.step(x[t], reset[t], h_each)
            assert torch.equal(y_once, y_each) and torch.equal(h_once, h_each)


def test_the_gru_kernel_replay_equals_the_cell_step_by_step_in_states_and_gradients():
    torch.manual_seed(0)
    spec = PolicySpec("vector", 7, None, 1, True, core="gru", hidden=16)
    core = ActorCritic(spec).core
    t, n = 9, 5
    x = torch.randn(t, n, 16, requires_grad=True)
    first = torch.zeros(t, n, dtype=torch.bool)
    first[0, 1] = True  # an episode starts with the rollout
    first[3, 0] = first[6, 0] = True  # three episodes in one row
    first[8, 2] = True  # one starts at the last step
    first[1:, 4] = True  # one-step episodes
    h0 = torch.randn(n, 16)
    states, h = [], h0
    for step in range(t):
        _, h = core.step(x[step], first[step], h)
        states.append(h)
    stepped = torch.stack(states)
    replayed, last = core.sequence(x, first, h0)
    torch.testing.assert_close(replayed, stepped, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(last, stepped[-1], atol=1e-6, rtol=1e-6)
    weights = torch.randn(t, n, 16)
    grads = [
        torch.autograd.grad((y * weights).sum(), [x, core.cell.weight_hh])
        for y in (replayed, stepped)
    ]
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _no_host_reads(monkeypatch):
    def refuse(name):
        def raise_(*args, **kwargs):
            raise AssertionError(f"the rollout read a tensor on the host ({name})")

        return raise_

    for name in ("item", "__bool__", "tolist", "cpu", "nonzero", "numpy", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, refuse(name))


@pytest.mark.parametrize(
    ("policy", "env"),
    [("s5", "max_episode_length=8"), ("gru", "max_episode_length=5")],
    ids=["s5-one-truncation-per-rollout", "gru-several-truncations"],
)
@pytest.mark.slow
def test_nothing_on_the_acting_path_reads_a_tensor_on_the_host(policy, env, tmp_path, monkeypatch):
    trainer = Trainer(dataclasses.replace(TINY, policy=policy, env=env, out=str(tmp_path)))
    trainer.start()
    trainer.update = 1
    trainer.collect()  # warm-up: the environment's step compiles
    boot_before = trainer.learners[0].buffer.boot.clone()
    with monkeypatch.context() as patched:
        _no_host_reads(patched)
        trainer.update = 2
        trainer.collect()
    boot = trainer.learners[0].buffer.boot
    assert (boot | boot_before).any(), "episodes should be truncated during these rollouts"


@pytest.mark.slow
def test_target_kl_stops_on_the_mean_kl_of_the_epoch_just_done(tmp_path, monkeypatch):
    """Epoch 1's minibatches have KL 0.1, epoch 2's 1.0: epoch 2's mean (1.0) exceeds 0.6, so
    the update stops after 2 epochs; the mean over both epochs' steps (0.55) would not."""
    kl_of_epoch = {0: 0.1, 1: 1.0, 2: 1.0}

    def known_kl(self, learner, evaluate, idx, advantages, returns, at):
        _, epoch, _ = at
        stats = torch.zeros(len(UPDATE_STATS), dtype=torch.float64)
        stats[UPDATE_STATS.index("approx_kl")] = kl_of_epoch[epoch]
        return stats

    monkeypatch.setattr(PPOUpdate, "minibatch_step", known_kl)
    trainer = Trainer(dataclasses.replace(TINY, target_kl=0.6, out=str(tmp_path)))
    trainer.start()
    trainer.update = 1
    trainer.collect()
    assert trainer.learn(0)["epochs"] == 2


@pytest.mark.slow
def test_a_compiled_acting_step_plays_the_rollout_of_the_eager_one(tmp_path):
    """--compile runs `ActorCritic.act` through torch.compile: the same rollout (same seed,
    noise and weights) gives the same actions, and log-probs and values equal within float32
    reassociation (the compiled kernels fuse and reorder the arithmetic)."""
    buffers = []
    for compiled in (False, True):
        config = dataclasses.replace(
            TINY, policy="mlp", compile=compiled, out=str(tmp_path / str(compiled))
        )
        trainer = Trainer(config)
        trainer.start()
        trainer.update = 1
        trainer.collect()
        buf = trainer.learners[0].buffer
        buffers.append((buf.actions.clone(), buf.logp.clone(), buf.values.clone()))
    (a0, lp0, v0), (a1, lp1, v1) = buffers
    assert torch.equal(a0, a1)
    torch.testing.assert_close(lp1, lp0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(v1, v0, rtol=1e-5, atol=1e-5)
