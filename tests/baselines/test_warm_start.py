"""Warm start (`--warm-start pursuit`): PPO starts from a policy cloned from a scripted
player, and the run says so (warm_start.json, config.json)."""

from __future__ import annotations

import json

import pytest

from baselines.config import PPOConfig, validate

CHANCE = 1 / 27


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_warm_start_clones_pursuit_above_chance_and_is_recorded(framework, tmp_path):
    config = PPOConfig(
        scenario="identical_2_vs_2_fobs_vec_void_disc",
        num_envs=16,
        rollout_steps=8,
        updates=1,
        policy="mlp",
        hidden=32,
        opponent="pursuit",
        warm_start="pursuit",
        warm_start_updates=60,
        framework=framework,
        out=str(tmp_path),
        progress=False,
        tensorboard=False,
        plots=False,
    )
    if framework == "torch":
        from baselines.train import Trainer

        Trainer(config).run()
    else:
        from baselines.jax_ppo.trainer import JaxTrainer

        JaxTrainer(config).run()
    (result,) = json.loads((tmp_path / "warm_start.json").read_text())
    assert result["teacher"] == "pursuit" and result["updates"] == 60
    assert result["accuracy_before"] < 0.2  # a near-uniform policy: about chance
    assert result["accuracy"] > 10 * CHANCE  # held-out games, after a few seconds
    assert result["seconds"] < 60
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["warm_start"] == "pursuit" and saved["warm_start_updates"] == 60


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(warm_start="pursuitt"), "closest: \\['pursuit'"),
        (dict(warm_start="pursuit", warm_start_updates=0), "--warm-start-updates must be a"),
    ],
)
def test_a_bad_warm_start_is_refused_before_any_compute(fields, message):
    with pytest.raises(ValueError, match=message):
        validate(PPOConfig(**fields))
