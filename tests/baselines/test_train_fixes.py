"""The trainer's correctness fixes: TensorBoard history kept on resume, the learning-rate
schedule (resumable, over updates or the time budget), value normalisation and a separate
critic, pool opponents kept for their episode, evaluation during training, and clear errors
for `--seeds 0` and a probe snapshot before its first reset."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from baselines.checkpoint import load_checkpoint
from baselines.config import PPOConfig, validate
from baselines.evaluator import eval_opponents
from baselines.matchmaking import PoolPlayer
from baselines.metrics import MetricsLogger
from baselines.policies import ActorCritic, PolicySpec
from baselines.ppo import main, parse_args
from baselines.probes import MemoryProbe
from baselines.schedule import LRSchedule
from baselines.train import Trainer
from baselines.valuenorm import BETA, ValueNorm, normalized_value_terms
from tests.baselines.eval_checks import check_evaluations

LR = 3e-4
TINY = PPOConfig(
    scenario="identical_2_vs_2_fobs_vec_void_disc",
    num_envs=6,
    rollout_steps=8,
    hidden=16,
    s5_state_dim=8,
    epochs=1,
    minibatches=2,
    lr=LR,
    opponent="self:0.5,pursuit:0.5",
    progress=False,
    tensorboard=False,
    plots=False,
)


def _tiny(tmp_path, **changes) -> PPOConfig:
    return dataclasses.replace(TINY, out=str(tmp_path / "run"), **changes)


COLUMNS = ["update", "agent_steps", "wall_s", "lr"]


def _scalars(run_dir, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]


def test_resuming_keeps_the_tensorboard_history_before_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    first = MetricsLogger(tmp_path, COLUMNS, plots=False)
    for u in (1, 2, 3):  # update 3 was logged, then the run died before its checkpoint
        first.log({"update": u, "agent_steps": 100 * u, "wall_s": 1.0 * u, "lr": 0.1 * u})
    first.close()
    resumed = MetricsLogger(tmp_path, COLUMNS, resume_update=2, resume_step=200, plots=False)
    resumed.log({"update": 3, "agent_steps": 300, "wall_s": 3.0, "lr": 0.7})
    resumed.close()
    assert _scalars(tmp_path, "lr") == [(100, 0.1), (200, 0.2), (300, 0.7)]


# ------------------------------------------------------------------------------------------
# The learning-rate schedule
# ------------------------------------------------------------------------------------------


def test_the_update_schedule_of_a_fresh_run_is_the_linear_decay_bit_for_bit():
    s = LRSchedule(3e-4, True, updates=7)
    assert [s.rate(k, 0.0) for k in range(7)] == [3e-4 * (1.0 - k / 7) for k in range(7)]
    assert LRSchedule(3e-4, False, updates=7).rate(5, 99.0) == 3e-4


def test_a_time_budget_anneals_by_the_share_of_the_budget_used():
    s = LRSchedule(1.0, True, updates=1_000_000, time_budget_s=100.0)
    assert s.rate(3, 25.0) == pytest.approx(0.75)  # 3 updates of a million: time dominates
    assert s.rate(3, 150.0) == 0.0  # past the budget: clamped at 0
    few = LRSchedule(1.0, True, updates=4, time_budget_s=100.0)
    assert few.rate(2, 10.0) == pytest.approx(0.5)  # the updates run out first


def test_a_new_horizon_continues_from_the_progress_reached():
    # 3 of 6 updates done (rate 0.5), resumed with --updates 9: 6 left to decay 0.5 -> 0
    s = LRSchedule(1.0, True, updates=6).resumed(9, 0.0, done=3, wall_s=0.0)
    assert [s.rate(k, 0.0) for k in (3, 6, 9)] == pytest.approx([0.5, 0.25, 0.0])
    # a budget of 100 s, half used (rate 0.5), resumed with 200 s: 150 s left for 0.5 -> 0
    t = LRSchedule(1.0, True, 10**6, 100.0).resumed(10**6, 200.0, done=9, wall_s=50.0)
    assert [t.rate(9, w) for w in (50.0, 125.0)] == pytest.approx([0.5, 0.25])
    # an ended schedule, extended: the new horizon's own rate (1 - 4 / 8), not 0
    ended = LRSchedule(1.0, True, updates=4).resumed(8, 0.0, done=4, wall_s=0.0)
    assert ended.rate(4, 0.0) == pytest.approx(0.5)
    assert LRSchedule.from_state_dict(s.state_dict()) == s


@pytest.mark.slow
def test_resuming_with_more_updates_does_not_make_the_rate_jump(tmp_path):
    config = _tiny(tmp_path, updates=4)
    interrupted = Trainer(config)  # planned for 4 updates, stopped after 2
    interrupted.start()
    rates = [interrupted.step()["lr"] for _ in range(2)]
    Path(config.out).mkdir()
    interrupted.save(Path(config.out))
    run = Trainer(dataclasses.replace(config, updates=8, resume=True)).run()
    rates += [json.loads(x)["lr"] for x in (run / "metrics.jsonl").read_text().split("\n") if x]
    # 1, 0.75 of the 4-update schedule, then 0.5 decaying to 0 over the 6 updates left
    expected = [1.0, 0.75] + [0.5 - 0.5 * j / 6 for j in range(6)]
    assert rates == pytest.approx([LR * e for e in expected])


# ------------------------------------------------------------------------------------------
# Value normalisation and a separate critic
# ------------------------------------------------------------------------------------------


def _spec(core: str = "gru", **flags) -> PolicySpec:
    return PolicySpec("vector", 6, None, 2, True, core=core, hidden=8, s5_state_dim=4, **flags)


def test_value_norm_keeps_a_debiased_moving_mean_and_std_of_the_alive_returns():
    norm = ValueNorm()
    assert norm.moments() == (0.0, 1.0)
    mask = torch.tensor([[True, True], [True, False]])
    norm.update(torch.tensor([[1.0, 3.0], [5.0, float("nan")]]), mask, lambda x: x)
    mean, std = norm.moments()  # one update: the batch's own moments, 3 and sqrt(35/3 - 9)
    assert float(mean) == pytest.approx(3.0) and float(std) == pytest.approx((8 / 3) ** 0.5)
    norm.update(torch.tensor([[10.0]]), torch.tensor([[True]]), lambda x: x)
    w = [BETA * (1 - BETA), 1 - BETA]  # the weights of the two batches
    m = (w[0] * 3 + w[1] * 10) / sum(w)
    m2 = (w[0] * 35 / 3 + w[1] * 100) / sum(w)
    assert float(norm.moments()[0]) == pytest.approx(m)
    assert float(norm.moments()[1]) == pytest.approx((m2 - m * m) ** 0.5)


def test_a_normalised_value_head_is_read_on_the_return_scale_and_trained_standardised():
    torch.manual_seed(0)
    plain = ActorCritic(_spec())
    normed = ActorCritic(_spec(value_norm=True))
    normed.load_state_dict(plain.state_dict(), strict=False)  # the same weights
    normed.value_norm.update(
        torch.tensor([[2.0, 6.0]]), torch.ones(1, 2, dtype=torch.bool), lambda x: x
    )
    obs, types = torch.randn(3, 6), torch.eye(2)[[0, 1, 0]]
    first, h = torch.ones(3, dtype=torch.bool), plain.initial_state(3)
    v_plain = plain.value(obs, types, first, h)
    v = normed.value(obs, types, first, h)
    assert torch.allclose(v, 4.0 + 2.0 * v_plain)  # mean 4, std 2
    x = torch.tensor([4.0, 8.0])
    assert all(
        torch.allclose(t, torch.tensor([0.0, 2.0])) for t in normalized_value_terms(normed, x, x, x)
    )
    assert normalized_value_terms(plain, x, x, x) == (x, x, x)


@pytest.mark.parametrize("core", ["s5", "gru", "mlp"])
def test_a_separate_critic_shares_nothing_with_the_actor_and_replays_exactly(core):
    torch.manual_seed(1)
    net = ActorCritic(_spec(core, separate_critic=True))
    t, n = 5, 3
    obs, types = torch.randn(t, n, 6), torch.eye(2)[[0, 1, 1]]
    first = torch.zeros(t, n, dtype=torch.bool)
    first[0], first[3, 1] = True, True
    h = h0 = net.initial_state(n)
    steps = []
    for k in range(t):
        a, logp, v, h = net.act(obs[k], types, first[k], h)
        steps.append((a, logp, v))
    actions, logp, v = (torch.stack(x) for x in zip(*steps, strict=True))
    logp2, _, v2 = net.evaluate(obs, types, first, h0, actions)
    assert torch.allclose(logp2, logp, atol=1e-6) and torch.allclose(v2, v, atol=1e-6)
    v2.sum().backward()  # the value's gradient reaches the critic's trunk only
    actor = [*net.encoder.parameters(), *net.core.parameters(), *net.heads.parameters()]
    assert all(p.grad is None for p in actor)
    critic = [*net.critic_encoder.parameters(), *net.critic_core.parameters()]
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in critic)


def test_separate_critic_with_mappo_is_refused_naming_both_flags():
    with pytest.raises(ValueError, match="--separate-critic.*mappo"):
        Trainer(dataclasses.replace(TINY, algo="mappo", separate_critic=True))


@pytest.mark.slow
def test_a_run_with_both_options_resumes_bit_for_bit_and_saves_them(tmp_path):
    config = _tiny(tmp_path, separate_critic=True, value_norm=True, updates=4, anneal_lr=False)
    straight = Trainer(dataclasses.replace(config, out=str(tmp_path / "a"))).run()
    half = dataclasses.replace(config, out=str(tmp_path / "b"), updates=2)
    Trainer(half).run()
    resumed = Trainer(dataclasses.replace(half, updates=4, resume=True)).run()
    a, b = (load_checkpoint(d / "checkpoint.pt") for d in (straight, resumed))
    assert a["config"]["separate_critic"] and a["config"]["value_norm"]
    assert a["policy_spec"]["separate_critic"] and a["policy_spec"]["value_norm"]
    model_a, model_b = a["learners"][0]["model"], b["learners"][0]["model"]
    assert "value_norm.mean" in model_a and any(k.startswith("critic_core.") for k in model_a)
    assert float(model_a["value_norm.weight"]) > 0
    for key, value in model_a.items():
        assert torch.equal(value, model_b[key]), key


# ------------------------------------------------------------------------------------------
# Evaluation during training
# ------------------------------------------------------------------------------------------


def _rows(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().split("\n") if x]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(eval_every=-1), "--eval-every must be >= 0"),
        (dict(eval_games=0), "--eval-games must be a positive integer"),
        (dict(eval_opponents="pursuit,self"), "--eval-opponents must be auto or scripted"),
    ],
)
def test_bad_evaluation_flags_are_refused_naming_the_flag(change, message):
    with pytest.raises(ValueError, match=message):
        validate(dataclasses.replace(TINY, **change))


@pytest.mark.slow
def test_evaluations_log_wilson_intervals_keep_the_best_policy_and_leave_training_alone(
    tmp_path,
):
    config = _tiny(tmp_path, updates=3, eval_games=6, eval_opponents="random", anneal_lr=False)
    plain = Trainer(dataclasses.replace(config, out=str(tmp_path / "plain"))).run()
    run = Trainer(dataclasses.replace(config, eval_every=2)).run()
    # every 2 updates and at the end; 6 games x 8 steps x 4 agents per update
    check_evaluations(run, plain, [2, 3], games=6, per_update=6 * 8 * 4)


# ------------------------------------------------------------------------------------------
# Pool opponents keep their episode
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pool_opponents_keep_their_snapshot_and_state_until_their_episode_ends(
    tmp_path, monkeypatch
):
    config = _tiny(tmp_path, opponent="pool:0.5,self:0.5", pool_every=1, rollout_steps=12)
    trainer = Trainer(config)
    trainer.start()
    pool = [p for p in trainer.frozen if p.name in ("frozen0", "frozen1")]
    swap, mid_episode = trainer._swap_pool_players, []

    def spy():  # at every rollout's start: rows in mid-episode keep their recurrent state
        before = [p.h.clone() for p in pool]
        swap()
        for p, h in zip(pool, before, strict=True):
            mid = ~trainer.collector.first[p.rows.game]
            assert torch.equal(p.h[..., mid, :], h[..., mid, :]), "state lost mid-episode"
            mid_episode.append(bool(mid.any()))

    trainer._swap_pool_players = spy
    seen = []  # (player, first, seat of every row after the step's start)
    act = PoolPlayer.act

    def watched(self, obs, types, first, h, *rest, **kwargs):
        out = act(self, obs, types, first, h, *rest, **kwargs)
        seen.append((self.name, first.clone(), self.seat.clone()))
        return out

    monkeypatch.setattr(PoolPlayer, "act", watched)
    for _ in range(6):
        trainer.step()
    assert any(mid_episode)
    moves = 0
    for name in ("frozen0", "frozen1"):
        steps = [(f, seat) for n, f, seat in seen if n == name]
        for (_, before), (first, now) in zip(steps, steps[1:], strict=False):
            changed = before != now
            assert not (changed & ~first).any()  # a row changes snapshot only as it restarts
            moves += int(changed.sum())
    assert moves > 0  # and new episodes take the newer snapshots


def test_a_central_critic_trains_against_frozen_and_pool_copies_of_itself(tmp_path):
    # The opponents act without the state vector only the learner's critic reads: they get
    # no values, and their actions come from the same actor head as the learner's.
    config = _tiny(tmp_path, algo="mappo", opponent="pool:0.5,self:0.5", pool_every=1)
    trainer = Trainer(config)
    trainer.start()
    rows = [trainer.step() for _ in range(2)]
    assert all(np.isfinite(row[k]) for row in rows for k in ("policy_loss", "value_loss"))
    net = trainer.learners[0].net
    assert net.spec.central_critic
    obs = torch.zeros(3, net.spec.vector_size)
    types = trainer.learners[0].types[:3]
    first = torch.ones(3, dtype=torch.bool)
    u = torch.full((3, net.noise_width), 0.5)
    actions, logp, value, _ = net.act(obs, types, first, net.initial_state(3), None, u)
    assert value is None and actions.shape == (3,) and torch.isfinite(logp).all()


# ------------------------------------------------------------------------------------------
# Returns per opponent kind, as trained and unshaped
# ------------------------------------------------------------------------------------------

# Hiders (team 1) of hide and seek earn a reward every step they live, so their unshaped
# return is not zero; the shaped runs add an idle penalty with --env.
HIDE = dict(
    scenario="hide_and_seek_5_vs_5_fobs_vec_void_disc",
    team=1,
    num_envs=4,
    rollout_steps=16,
    opponent="random:0.5,pursuit:0.5",
)
SHAPED, PLAIN = "reward_idle=1,max_episode_length=12", "max_episode_length=12"


def test_the_unshaped_return_sums_the_rewards_of_the_game_without_its_shaping(tmp_path):
    # Acting does not read rewards, so the first rollout of both games takes the same steps:
    # the shaped run's running unshaped returns are those the unshaped game keeps in its own
    # state, bit for bit, and its logged unshaped returns are the unshaped game's returns.
    rows, trainers = {}, {}
    for name, env in (("shaped", SHAPED), ("plain", PLAIN)):
        trainer = Trainer(_tiny(tmp_path / name, env=env, **HIDE))
        trainer.start()
        rows[name], trainers[name] = trainer.step(), trainer
    running = trainers["shaped"].collector.outcomes.running
    kept = torch.tensor(np.array(trainers["plain"].venv.states.episode.returns))
    assert bool((running != 0).any())
    assert torch.equal(running, kept)
    for kind in ("random", "pursuit"):
        shaped, plain = rows["shaped"], rows["plain"]
        assert plain[f"games/{kind}"] > 0
        assert shaped[f"return_unshaped/{kind}"] == plain[f"return/{kind}"]
        assert plain[f"return_unshaped/{kind}"] == plain[f"return/{kind}"]
        assert shaped[f"return/{kind}"] < shaped[f"return_unshaped/{kind}"]


@pytest.mark.slow
def test_the_unshaped_returns_of_episodes_across_a_resume_are_kept(tmp_path):
    # Episodes of 12 steps cross the rollouts of 16: the running sums are in the checkpoint.
    config = _tiny(tmp_path, env=SHAPED, updates=4, anneal_lr=False, **HIDE)
    straight = Trainer(dataclasses.replace(config, out=str(tmp_path / "a"))).run()
    half = dataclasses.replace(config, out=str(tmp_path / "b"), updates=2)
    Trainer(half).run()
    resumed = Trainer(dataclasses.replace(half, updates=4, resume=True)).run()
    want, got = (_rows(d / "metrics.jsonl") for d in (straight, resumed))
    columns = [k for k in want[0] if k.startswith("return")]
    assert [r["update"] for r in got] == [1, 2, 3, 4]
    for r, w in zip(got, want, strict=True):
        assert {k: r[k] for k in columns} == {k: w[k] for k in columns}


def test_the_new_options_are_flags_with_preset_defaults():
    config = parse_args(["--preset", "cpu", "--value-norm", "--separate-critic"])
    assert (config.eval_every, config.eval_games, config.eval_opponents) == (100, 128, "auto")
    assert config.value_norm and config.separate_critic
    assert parse_args([]).eval_every == 0  # no evaluation unless asked (or by a preset)
    assert eval_opponents(config, symmetric=True) == ("pursuit", "random")  # the mix's
    assert eval_opponents(parse_args(["--opponent", "self"]), True) == ("random", "pursuit")


def test_seeds_below_one_are_refused_naming_the_flag(tmp_path, capsys):
    # before: no run was made and the summary line read the missing trainer
    out = tmp_path / "run"
    assert main(["--preset", "smoke", "--seeds", "0", "--out", str(out)]) == 2
    assert "--seeds must be a positive integer, got 0" in capsys.readouterr().err
    assert not out.exists()


def test_the_memory_probe_refuses_a_snapshot_before_its_first_reset():
    probe = MemoryProbe(2)
    with pytest.raises(RuntimeError, match="before reset"):
        probe.snapshot()
    probe.reset()
    assert probe.snapshot()["last_obs"].shape == (2, 1, probe.obs_size)
