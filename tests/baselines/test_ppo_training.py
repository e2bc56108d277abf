"""The PPO trainer end to end: replay alignment in a real rollout, masking of dead agents,
divergence, the command line, checkpoints that resume bit for bit after SIGKILL, flat
memory, the memory probe, and checkpoints as evaluation players."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from baselines.checkpoint import load_checkpoint, load_policy
from baselines.config import PPOConfig
from baselines.ppo import main
from baselines.train import Trainer, TrainingDiverged

ROOT = Path(__file__).resolve().parents[2]
TINY = PPOConfig(
    scenario="identical_2_vs_2_fobs_vec_void_disc",
    num_envs=8,
    rollout_steps=12,
    updates=3,
    hidden=16,
    s5_state_dim=8,
    epochs=2,
    minibatches=2,
    opponent="self:0.5,pool:0.25,pursuit:0.25",
    pool_every=1,
    progress=False,
    tensorboard=False,
    plots=False,
    checkpoint_every=1,
)


def _tiny(tmp_path, **changes) -> PPOConfig:
    return dataclasses.replace(TINY, out=str(tmp_path / "run"), **changes)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """A trainer of the tiny config after one rollout (raw observations: no normalisation), on
    the individual signal, whose buffers follow the game's alive masks (the team signal's are
    tested in test_training_signal.py)."""
    folder = tmp_path_factory.mktemp("collect")
    config = _tiny(folder, norm_obs=False, rollout_steps=40, signal="individual")
    trainer = Trainer(config)
    trainer.start()
    trainer.collect()
    return trainer


def test_replaying_the_trainers_rollout_gives_the_acting_log_probs(collected):
    learner = collected.learners[0]
    buf = learner.buffer
    assert buf.first[1:].any(), "the rollout should cross an episode boundary"
    with torch.no_grad():
        logp, _, values = learner.net.evaluate(
            buf.obs, learner.types, buf.first, buf.h0, buf.actions
        )
    torch.testing.assert_close(logp, buf.logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, buf.values, atol=1e-5, rtol=1e-5)


def test_agents_dead_before_a_step_are_exactly_the_masked_ones(collected):
    """Dead agents observe all zeros (rules §15 row 19): the mask agrees with the observations."""
    buf = collected.learners[0].buffer
    zero_obs = (buf.obs == 0).all(-1)
    assert (~buf.alive).any(), "some agent should die during the rollout"
    assert torch.equal(zero_obs, ~buf.alive)
    assert not buf.cont[~buf.alive].any() and not buf.boot[~buf.alive].any()
    assert (buf.rewards[~buf.alive] == 0).all()


def test_a_non_finite_loss_stops_the_run_naming_the_update(tmp_path):
    class Poisoned(Trainer):
        def collect(self):
            super().collect()
            if self.update == 2:
                self.learners[0].buffer.rewards[3, 0] = float("nan")

    trainer = Poisoned(_tiny(tmp_path))
    with pytest.raises(TrainingDiverged, match="non-finite loss or gradient at update 2"):
        trainer.run()
    assert load_checkpoint(tmp_path / "run")["update"] == 1  # the last good one, intact


@pytest.mark.slow
def test_mappo_and_two_learners_train_and_log_per_team(tmp_path):
    config = _tiny(
        tmp_path,
        scenario="identical_5_vs_1_fobs_vec_void_disc",
        algo="mappo",
        train_both=True,
        opponent="auto",
        updates=2,
        tensorboard=True,
    )
    trainer = Trainer(config)
    trainer.run()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2]
    assert {"policy_loss_team1", "win_rate/learner"} <= set(rows[0])
    assert all(r["policy_loss_team1"] is not None for r in rows)
    ckpt = load_checkpoint(tmp_path / "run")
    assert [s["team"] for s in ckpt["learners"]] == [0, 1]
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.parametrize(
    ("scenario", "env"),
    [
        ("identical_2_vs_2_fobs_vec_void_cont", ""),  # continuous actions
        (
            "identical_2_vs_2_fobs_rgb_void_disc",
            "obs_type=rgb_vector,resolution_x=24,resolution_y=24",
        ),
    ],
)
@pytest.mark.slow
def test_continuous_actions_and_images_train(scenario, env, tmp_path):
    trainer = Trainer(_tiny(tmp_path, scenario=scenario, env=env, updates=1, rollout_steps=6))
    trainer.run()
    assert load_checkpoint(tmp_path / "run")["update"] == 1
    assert trainer.spec.obs_type == ("rgb_vector" if env else "vector")


@pytest.mark.subprocess
def test_a_checkpoint_file_is_a_frozen_opponent(smoke_run, tmp_path):
    from baselines.config import preset

    config = dataclasses.replace(
        preset("smoke"),
        opponent=str(smoke_run / "checkpoint.pt"),
        updates=1,
        out=str(tmp_path / "run"),
        progress=False,
        tensorboard=False,
        plots=False,
    )
    trainer = Trainer(config)
    trainer.run()
    (frozen,) = trainer.frozen
    assert frozen.source == str(smoke_run / "checkpoint.pt")
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert "win_rate/file:checkpoint" in row
    # A run of another core and width plays it with the file's own architecture.
    other = Trainer(dataclasses.replace(config, policy="gru", hidden=16, out=str(tmp_path / "o")))
    (frozen,) = other.frozen
    assert (frozen.net.spec.core, frozen.net.spec.hidden) == (
        trainer.spec.core,
        trainer.spec.hidden,
    )
    assert (other.spec.core, other.spec.hidden) == ("gru", 16)
    other.run()
    # A game of other observations is refused, naming the field.
    with pytest.raises(ValueError, match=r"observations or actions differ .*'vector_size'"):
        Trainer(
            dataclasses.replace(
                config, scenario="identical_2_vs_2_fobs_vec_void_disc", out=str(tmp_path / "x")
            )
        )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "identical_5_vs_5_fobs_vec_void_dsc"], "closest"),
        (["--encoder", "cnn"], "--encoder cnn needs rgb observations"),
        (["--num-envs", "0"], "--num-envs must be a positive integer"),
        (
            ["--opponent", "self", "--scenario", "identical_5_vs_1_fobs_vec_void_disc"],
            "needs a symmetric scenario",
        ),
        (["--preset", "smok"], "unknown preset 'smok'"),
    ],
)
def test_bad_arguments_fail_before_any_compute_with_a_clear_message(
    argv, message, tmp_path, capsys
):
    assert main([*argv, "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "x" / "metrics.csv").exists()


def test_resume_refuses_a_missing_run_and_a_changed_config(tmp_path, capsys):
    assert main(["--resume", "--out", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(dataclasses.asdict(TINY)))
    assert main(["--resume", "--out", str(run), "--lr", "0.1"]) == 2
    assert "cannot change --lr" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# The command line in subprocesses: smoke preset, SIGKILL and resume
# ------------------------------------------------------------------------------------------

SMOKE = ["--preset", "smoke", "--updates", "10", "--no-progress", "--no-tensorboard"]


def _ppo(*args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "baselines.ppo", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "run"
    proc = _ppo(*SMOKE, "--out", str(out))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return out


@pytest.mark.subprocess
def test_the_smoke_preset_writes_metrics_config_curves_and_a_checkpoint(smoke_run):
    names = {p.name for p in smoke_run.iterdir()}
    assert {
        "metrics.csv",
        "metrics.jsonl",
        "config.json",
        "checkpoint.pt",
        "learning_curves.png",
    } <= names
    config = json.loads((smoke_run / "config.json").read_text())
    assert config["scenario_name"] == "identical_5_vs_5_fobs_vec_void_disc"
    assert len(config["scenario_hash"]) == 12
    lines = (smoke_run / "metrics.csv").read_text().splitlines()
    assert len(lines) == 11 and lines[0].startswith("update,agent_steps,env_steps,wall_s")
    ckpt = torch.load(smoke_run / "checkpoint.pt", weights_only=True)
    assert ckpt["update"] == 10 and ckpt["gigastep_player"] == "ppo"


@pytest.mark.subprocess
def test_a_run_killed_between_checkpoints_resumes_to_the_same_parameters(smoke_run, tmp_path):
    out = tmp_path / "run"
    proc = _ppo(*SMOKE, "--out", str(out))
    deadline = time.monotonic() + 600
    while not (out / "checkpoint_000002.pt").exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert load_checkpoint(out)["update"] < 10
    resumed = _ppo("--resume", "--out", str(out), "--no-progress")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True) for d in (smoke_run, out))
    for learner_a, learner_b in zip(a["learners"], b["learners"], strict=True):
        for key, value in learner_a["model"].items():
            assert torch.equal(value, learner_b["model"][key]), key
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().split("\n") if x]
    assert [r["update"] for r in rows] == list(range(1, 11))
    ref = [json.loads(x) for x in (smoke_run / "metrics.jsonl").read_text().split("\n") if x]
    assert [r["policy_loss"] for r in rows] == [r["policy_loss"] for r in ref]


# ------------------------------------------------------------------------------------------
# Checkpoints as players
# ------------------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_a_checkpoint_plays_a_team_of_a_torchvecenv(smoke_run):
    from gigastep.adapters.torch import TorchVecEnv

    policy = load_policy(smoke_run / "checkpoint.pt")
    venv = TorchVecEnv(policy.game.name, 3, seed=0, opponent="random", team=1)
    actor = policy.actor(team=1, num_envs=3)
    obs, first = venv.reset(), torch.ones(3, dtype=torch.bool)
    for _ in range(5):
        actions = actor(obs, first)
        assert actions.shape == (3, 5) and actions.dtype == torch.int64
        obs, _, _, first, _ = venv.step(actions)


@pytest.mark.subprocess
def test_a_checkpoint_refuses_a_game_it_cannot_play(smoke_run):
    import gigastep
    from baselines.players import load

    player = load(torch.load(smoke_run / "checkpoint.pt", weights_only=True))
    player.check(gigastep.make_config("identical_5_vs_5_pobs_vec_void_disc"), team=1)
    with pytest.raises(ValueError, match="observations rgb"):
        player.check(gigastep.make_config("identical_5_vs_5_fobs_rgb_void_disc"), team=0)
    with pytest.raises(ValueError, match="trained on identical_5_vs_5.*cannot play team 1"):
        player.check(gigastep.make_config("special_5_vs_5_fobs_vec_void_disc"), team=1)


# ------------------------------------------------------------------------------------------
# Slow: memory over many updates, the memory probe
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_memory_stays_flat_over_100_updates(tmp_path):
    from baselines.metrics import current_rss_mb

    # One epoch of one minibatch: the per-update objects (pool snapshots, buffers, metrics)
    # are all made, at half the cost of the tiny recipe's epochs.
    config = _tiny(
        tmp_path, updates=120, rollout_steps=8, checkpoint_every=1000, epochs=1, minibatches=1
    )
    trainer = Trainer(config)
    trainer.start()
    rss = []
    for _ in range(config.updates):
        trainer.step()
        rss.append(current_rss_mb())
    growth = rss[-1] - rss[19]
    assert growth < 20.0, f"RSS grew by {growth:.1f} MiB over 100 updates after warm-up"


@pytest.mark.slow
def test_s5_solves_the_memory_probe_where_an_mlp_stays_near_chance():
    from baselines.probes import train_probe

    _, s5 = train_probe("s5", updates=100)
    _, mlp = train_probe("mlp", updates=40)
    assert s5 >= 0.95, s5
    assert mlp < 0.4, mlp  # chance is 1/4
