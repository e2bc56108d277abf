"""The pieces of the PPO baseline, each against a hand calculation or an independent loop:
GAE, the masked loss, recurrent replay, normalisers, the opponent mix, checkpoints."""

from __future__ import annotations

import dataclasses
import os
import pickle

import numpy as np
import pytest
import torch

from baselines.buffer import compute_gae
from baselines.checkpoint import atomic_save, load_checkpoint, save_checkpoint, sealed
from baselines.config import PPOConfig, parse_opponents, validate
from baselines.envs import GameSpec
from baselines.loss import ppo_loss
from baselines.matchmaking import make_plan
from baselines.normalize import RewardScaler, RunningMeanStd
from baselines.policies import ActorCritic, PolicySpec

# ------------------------------------------------------------------------------------------
# GAE
# ------------------------------------------------------------------------------------------


def _gae_reference(
    rewards, values, alive_after, terminated, truncated, final_values, next_values, gamma, lam
):
    """Per agent, walking backwards with if-statements over what happened at each step."""
    t_max, n = len(rewards), len(rewards[0])
    adv = [[0.0] * n for _ in range(t_max)]
    for i in range(n):
        running = 0.0
        for t in reversed(range(t_max)):
            ended = terminated[t][i] or truncated[t][i]
            if not alive_after[t][i] or terminated[t][i]:
                target, keep = rewards[t][i], 0.0  # no future for this agent
            elif truncated[t][i]:
                target, keep = rewards[t][i] + gamma * final_values[t][i], 0.0
            else:
                nxt = next_values[i] if t == t_max - 1 else values[t + 1][i]
                target, keep = rewards[t][i] + gamma * nxt, 1.0
            assert not (ended and keep)
            running = target - values[t][i] + gamma * lam * keep * running
            adv[t][i] = running
    return adv


def test_gae_of_a_hand_checked_case():
    # One agent, T = 3, gamma 0.5, lambda 0.5, values 1, 2, 3, next value 4, rewards 1, 0, 2;
    # the episode is truncated after step 1 (final value 8) and goes on from step 2.
    # delta_2 = 2 + 0.5 * 4 - 3 = 1            A_2 = 1
    # delta_1 = 0 + 0.5 * 8 - 2 = 2            A_1 = 2 (no continuation across the reset)
    # delta_0 = 1 + 0.5 * 2 - 1 = 1            A_0 = 1 + 0.25 * 2 = 1.5
    f = torch.tensor
    adv, ret = compute_gae(
        rewards=f([[1.0], [0.0], [2.0]]),
        values=f([[1.0], [2.0], [3.0]]),
        cont=f([[True], [False], [True]]),
        boot=f([[False], [True], [False]]),
        final_values=f([[0.0], [8.0], [0.0]]),
        next_values=f([4.0]),
        gamma=0.5,
        lam=0.5,
    )
    assert adv[:, 0].tolist() == [1.5, 2.0, 1.0]
    assert ret[:, 0].tolist() == [2.5, 4.0, 4.0]


def test_gae_equals_a_loop_over_termination_truncation_deaths_and_boundaries():
    gen = torch.Generator().manual_seed(3)
    t, n, gamma, lam = 9, 6, 0.9, 0.8
    rewards = torch.randn(t, n, generator=gen)
    values = torch.randn(t, n, generator=gen)
    final_values = torch.randn(t, n, generator=gen)
    next_values = torch.randn(n, generator=gen)
    alive_after = torch.ones(t, n, dtype=torch.bool)
    terminated = torch.zeros(t, n, dtype=torch.bool)
    truncated = torch.zeros(t, n, dtype=torch.bool)
    terminated[3, 0] = True  # agent 0: a team eliminated at step 3, a new episode from 4
    truncated[2, 1] = truncated[6, 1] = True  # agent 1: two time limits
    alive_after[4:, 2] = False  # agent 2 dies at step 4 and stays dead
    truncated[5, 3] = True  # agent 3 dies at step 5, in the step the episode is truncated
    alive_after[5, 3] = False
    terminated[8, 4] = True  # agent 4: the episode ends on the last step
    cont = alive_after & ~terminated & ~truncated
    boot = alive_after & truncated
    adv, ret = compute_gae(rewards, values, cont, boot, final_values, next_values, gamma, lam)
    expected = _gae_reference(
        rewards.tolist(),
        values.tolist(),
        alive_after.tolist(),
        terminated.tolist(),
        truncated.tolist(),
        final_values.tolist(),
        next_values.tolist(),
        gamma,
        lam,
    )
    np.testing.assert_allclose(adv.numpy(), np.asarray(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        ret.numpy(), np.asarray(expected) + values.numpy(), rtol=1e-5, atol=1e-6
    )


def test_gae_rejects_mismatched_shapes():
    z = torch.zeros(3, 2)
    b = torch.zeros(3, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"next_values must have shape \(2,\)"):
        compute_gae(z, z, b, b, z, torch.zeros(3), 0.9, 0.9)
    with pytest.raises(ValueError, match="cont must have shape"):
        compute_gae(z, z, b[:2], b, z, torch.zeros(2), 0.9, 0.9)


# ------------------------------------------------------------------------------------------
# Policies: replay of a rollout equals acting step by step
# ------------------------------------------------------------------------------------------


def _spec(core: str, discrete=True, **kw) -> PolicySpec:
    return PolicySpec(
        obs_type="vector",
        vector_size=7,
        image_shape=None,
        n_types=2,
        discrete=discrete,
        core=core,
        hidden=16,
        s5_state_dim=8,
        **kw,
    )


def _episodes(t, n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    obs = torch.randn(t, n, 7, generator=gen)
    first = torch.rand(t, n, generator=gen) < 0.2  # several episodes per sequence
    types = torch.nn.functional.one_hot(torch.arange(n) % 2, 2).float()
    return obs, first, types


def _image_spec(core: str) -> PolicySpec:
    return PolicySpec(
        obs_type="rgb_vector",
        vector_size=7,
        image_shape=(24, 20, 3),
        n_types=2,
        discrete=True,
        core=core,
        hidden=16,
        s5_state_dim=8,
    )


@pytest.mark.parametrize("core", ["s5", "gru"])
def test_replaying_a_rollout_of_images_and_vectors_gives_the_acting_log_probs(core):
    torch.manual_seed(0)
    net = ActorCritic(_image_spec(core))
    t, n = 10, 3
    vec, first, types = _episodes(t, n)
    images = torch.randint(0, 256, (t, n, 24, 20, 3), dtype=torch.uint8)
    h, acted = net.initial_state(n), []
    with torch.no_grad():
        for step in range(t):
            a, logp, _, h = net.act((images[step], vec[step]), types, first[step], h)
            acted.append((a, logp))
        actions = torch.stack([a for a, _ in acted])
        logp, _, _ = net.evaluate((images, vec), types, first, net.initial_state(n), actions)
    torch.testing.assert_close(logp, torch.stack([x for _, x in acted]), atol=1e-5, rtol=1e-5)


def test_images_too_small_for_the_cnn_are_refused():
    with pytest.raises(ValueError, match="at least 20 x 20 pixels, got 16 x 16"):
        PolicySpec(obs_type="rgb", vector_size=0, image_shape=(16, 16, 3), n_types=1, discrete=True)


@pytest.mark.parametrize("core", ["s5", "gru", "mlp"])
@pytest.mark.parametrize("discrete", [True, False])
def test_replaying_a_rollout_gives_the_acting_log_probs_values_and_state(core, discrete):
    torch.manual_seed(0)
    net = ActorCritic(_spec(core, discrete))
    t, n = 24, 5
    obs, first, types = _episodes(t, n)
    first[0, 0] = True
    h0 = net.initial_state(n)
    if h0.numel():  # continue from a non-zero state, as a rollout after the first does
        h0 = h0 + 0.3 * torch.randn_like(h0)
    gen = torch.Generator().manual_seed(1)
    h, acted = h0, []
    with torch.no_grad():
        for step in range(t):
            u = torch.rand(n, net.noise_width, generator=gen)
            a, logp, v, h = net.act(obs[step], types, first[step], h, uniforms=u)
            acted.append((a, logp, v))
        actions = torch.stack([a for a, _, _ in acted])
        logp, entropy, value = net.evaluate(obs, types, first, h0, actions)
    torch.testing.assert_close(logp, torch.stack([x for _, x, _ in acted]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(value, torch.stack([x for _, _, x in acted]), atol=1e-5, rtol=1e-5)
    assert torch.isfinite(entropy).all()
    with torch.no_grad():
        _, h_replay = net.core.sequence(
            net.encoder(obs.reshape(t * n, 7), types.repeat(t, 1)).view(t, n, -1), first, h0
        )
    torch.testing.assert_close(h_replay, h, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("core", ["s5", "gru"])
def test_an_episode_start_forgets_everything_before_it(core):
    """Two different histories, then the same episode: identical outputs from its first step."""
    torch.manual_seed(0)
    net = ActorCritic(_spec(core))
    obs_a, _, types = _episodes(10, 3, seed=1)
    obs_b, _, _ = _episodes(10, 3, seed=2)
    episode, _, _ = _episodes(6, 3, seed=3)
    first = torch.zeros(16, 3, dtype=torch.bool)
    first[10] = True
    out = []
    with torch.no_grad():
        for history in (obs_a, obs_b):
            seq = torch.cat([history, episode])
            actions = torch.zeros(16, 3, dtype=torch.int64)
            out.append(net.evaluate(seq, types, first, net.initial_state(3), actions))
    for a, b in zip(out[0], out[1], strict=True):
        assert not torch.equal(a[:10], b[:10])
        torch.testing.assert_close(a[10:], b[10:], atol=1e-6, rtol=1e-6)


def test_a_dead_agents_loss_contribution_is_exactly_zero():
    """Changing what the masked-out (dead) entries hold changes no gradient, bit for bit."""
    torch.manual_seed(0)
    net = ActorCritic(_spec("s5"))
    t, n = 8, 4
    obs, first, types = _episodes(t, n)
    first[0] = True
    mask = torch.ones(t, n, dtype=torch.bool)
    mask[5:, 1] = False  # agent 1 dies at step 5 (dead agents observe zeros)
    obs[5:, 1] = 0.0
    gen = torch.Generator().manual_seed(4)
    base = dict(
        actions=torch.randint(0, 27, (t, n), generator=gen),
        old_logp=torch.randn(t, n, generator=gen),
        adv=torch.randn(t, n, generator=gen),
        ret=torch.randn(t, n, generator=gen),
        old_v=torch.randn(t, n, generator=gen),
    )

    def grads(data):
        net.zero_grad()
        logp, ent, v = net.evaluate(obs, types, first, net.initial_state(n), data["actions"])
        out = ppo_loss(
            logp,
            data["old_logp"],
            data["adv"],
            v,
            data["old_v"],
            data["ret"],
            ent,
            mask,
            clip=0.2,
            vf_coef=0.5,
            ent_coef=0.01,
            clip_value=True,
        )
        out.loss.backward()
        return [p.grad.clone() for p in net.parameters()]

    clean = grads(base)
    garbage = {k: v.clone() for k, v in base.items()}
    dead = ~mask
    garbage["actions"][dead] = 26
    for key in ("old_logp", "adv", "ret", "old_v"):
        garbage[key][dead] = float("nan")
    for a, b in zip(clean, grads(garbage), strict=True):
        assert torch.equal(a, b)
    assert any(g.abs().sum() > 0 for g in clean)


def test_the_loss_averages_only_alive_entries():
    # 2 entries alive with advantages 1 and -1 at ratio 1: policy loss mean(-A) = 0; value
    # loss 0.5 * mean((V - R)^2) = 0.5 * (1 + 4) / 2; entropy mean = (1 + 3) / 2.
    z = torch.zeros(1, 3)
    out = ppo_loss(
        z,
        z,
        torch.tensor([[1.0, -1.0, 50.0]]),
        torch.tensor([[1.0, 2.0, 9.0]]),
        z,
        torch.tensor([[0.0, 0.0, 0.0]]),
        torch.tensor([[1.0, 3.0, 9.0]]),
        torch.tensor([[True, True, False]]),
        clip=0.2,
        vf_coef=1.0,
        ent_coef=1.0,
        norm_adv=False,
    )
    assert float(out.policy) == 0.0
    assert float(out.value) == pytest.approx(1.25)
    assert float(out.entropy) == pytest.approx(2.0)
    assert float(out.loss) == pytest.approx(1.25 - 2.0)


# ------------------------------------------------------------------------------------------
# Normalisers
# ------------------------------------------------------------------------------------------


def test_running_moments_equal_numpy_over_the_masked_rows_of_all_batches():
    gen = np.random.default_rng(0)
    stats = RunningMeanStd(3)
    seen = []
    for size in (5, 1, 12):
        x = gen.normal(2.0, 3.0, (size, 3))
        mask = gen.random(size) < 0.7
        stats.add(torch.from_numpy(x), torch.from_numpy(mask))
        stats.commit()
        seen.append(x[mask])
    data = np.concatenate(seen)
    np.testing.assert_allclose(stats.mean.numpy(), data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats.var.numpy(), data.var(0), rtol=1e-12)
    assert float(stats.count) == len(data)


def test_reward_scaling_divides_by_the_std_of_discounted_returns_and_restarts_them():
    scaler = RewardScaler(1, gamma=0.5)
    one = torch.ones(1, dtype=torch.bool)
    # before any statistics the scale is 1/sqrt(1 + 1e-8)
    assert float(scaler(torch.tensor([2.0]), one, one)[0]) == pytest.approx(2.0)
    scaler(torch.tensor([2.0]), one, torch.zeros(1, dtype=torch.bool))  # G = 0.5*2+2 = 3, ends
    scaler.commit()  # returns seen: 2, 3 -> variance 0.25
    assert float(scaler.returns[0]) == 0.0
    assert float(scaler(torch.tensor([1.0]), one, one)[0]) == pytest.approx(2.0, rel=1e-6)


def test_reward_scaling_keeps_scale_1_until_the_returns_have_a_spread():
    scaler = RewardScaler(3, gamma=0.5)
    alive = torch.ones(3, dtype=torch.bool)
    for _ in range(4):  # no reward yet: every return seen is 0
        scaler(torch.zeros(3), alive, alive)
    scaler.commit()
    assert float(scaler.stats.count) == 12 and float(scaler.stats.m2[0]) == 0.0
    # 1/sqrt(0 + 1e-8) would be 1e4; the scale stays 1/sqrt(1 + 1e-8)
    assert float(scaler(torch.tensor([5.0, 0.0, 0.0]), alive, alive)[0]) == pytest.approx(5.0)
    scaler.commit()  # returns seen: twelve 0s, then 5, 0, 0 -> population variance 25*14/225
    var = 25 * 14 / 225
    got = float(scaler(torch.tensor([1.0, 0.0, 0.0]), alive, alive)[0])
    assert got == pytest.approx(1 / np.sqrt(var + 1e-8), rel=1e-6)


# ------------------------------------------------------------------------------------------
# The opponent mix and the plan of the batch
# ------------------------------------------------------------------------------------------

FIVE = GameSpec(
    name="5v5",
    scenario_hash="x",
    teams=(0,) * 5 + (1,) * 5,
    type_keys=("default",) * 10,
    obs_type="vector",
    vector_size=90,
    image_shape=None,
    discrete=True,
)
ASYM = dataclasses.replace(
    FIVE, name="5v1", teams=(0,) * 5 + (1,), type_keys=("default",) * 5 + ("super",)
)


def test_the_opponent_mix_is_parsed_and_normalised():
    specs = parse_opponents("self:2,pool,pursuit:1", symmetric=True)
    assert [(s.kind, s.weight) for s in specs] == [("self", 0.5), ("pool", 0.25), ("pursuit", 0.25)]
    assert [s.kind for s in parse_opponents("auto", symmetric=False)] == ["pursuit", "random"]


def test_checkpoint_opponents_of_one_file_name_are_labelled_by_their_folders(tmp_path):
    for run in ("a", "b"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "checkpoint.pt").write_bytes(b"")
    a, b = (str(tmp_path / "runs" / r / "checkpoint.pt") for r in ("a", "b"))
    labels = [s.label for s in parse_opponents(f"{a}:1,{b}:1,pursuit", symmetric=True)]
    assert labels == ["file:a/checkpoint", "file:b/checkpoint", "pursuit"]
    # One file keeps its short label; the same file twice is one kind named twice.
    assert [s.label for s in parse_opponents(a, symmetric=True)] == ["file:checkpoint"]
    with pytest.raises(ValueError, match="names a kind twice"):
        parse_opponents(f"{a},{tmp_path}/runs/b/../a/checkpoint.pt", symmetric=True)


@pytest.mark.parametrize(
    ("text", "symmetric", "message"),
    [
        ("persuit", True, r"unknown opponent 'persuit'.*closest: \['pursuit'"),
        ("self", False, "needs a symmetric scenario"),
        ("random:-1", True, "positive number"),
        ("random,random", True, "names a kind twice"),
        ("missing/ckpt.pt", True, "does not exist"),
    ],
)
def test_a_bad_opponent_mix_is_refused(text, symmetric, message):
    with pytest.raises(ValueError, match=message):
        parse_opponents(text, symmetric)


def test_the_batch_is_split_by_weight_with_pool_players_sharing_their_slice():
    config = PPOConfig(num_envs=10, opponent="self:0.5,pool:0.3,random:0.2", pool_players=2)
    plan = make_plan(config, FIVE)
    got = [(s.start, s.stop, s.label, s.players) for s in plan.slices]
    assert got == [
        (0, 5, "self", ("learner0", "learner0")),
        (5, 7, "pool", ("learner0", "frozen0")),
        (7, 8, "pool", ("learner0", "frozen1")),
        (8, 10, "random", ("learner0", "scripted:random")),
    ]
    assert plan.labels == ["self", "pool", "random"]
    assert [(s.start, s.stop, s.team) for s in plan.scripted()] == [(8, 10, 1)]
    assert plan.blocks("learner0")[:2] == [(0, 5, 0), (0, 5, 1)]


def test_the_trained_team_can_be_team_1_and_both_teams_can_train():
    plan = make_plan(PPOConfig(num_envs=4, opponent="random", team=1), ASYM)
    assert [s.players for s in plan.slices] == [("scripted:random", "learner0")]
    both = make_plan(PPOConfig(num_envs=4, train_both=True), ASYM)
    assert [s.players for s in both.slices] == [("learner0", "learner1")]
    with pytest.raises(ValueError, match="cannot be used with it"):
        make_plan(PPOConfig(num_envs=4, train_both=True, opponent="random"), ASYM)


def test_a_batch_too_small_for_the_mix_is_refused():
    with pytest.raises(ValueError, match="too small for the opponent mix"):
        make_plan(PPOConfig(num_envs=3, opponent="self,pool,random", pool_players=2), FIVE)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_envs", 0, "--num-envs must be a positive integer, got 0"),
        ("s5_state_dim", 7, "--s5-state-dim must be even"),
        ("gamma", 1.5, r"--gamma must be in \[0, 1\]"),
        ("lr", 0.0, "--lr must be > 0"),
    ],
)
def test_impossible_numbers_are_refused_before_any_compute(field, value, message):
    with pytest.raises(ValueError, match=message):
        validate(dataclasses.replace(PPOConfig(), **{field: value}))


# ------------------------------------------------------------------------------------------
# Checkpoints
# ------------------------------------------------------------------------------------------


def _complete(**entries) -> dict:
    """The smallest payload every loader accepts (one learner, finite weights)."""
    learner = {"name": "learner0", "team": 0, "model": {"w": torch.arange(3.0)}, "obs_norm": {}}
    return {
        "format": "gigastep-ppo/1",
        **{k: {} for k in ("config", "game", "policy_spec")},
        "learners": [learner],
        **entries,
    }


def test_checkpoints_are_replaced_atomically_and_pruned(tmp_path):
    payload = _complete()
    for update in (1, 2, 3):
        save_checkpoint(tmp_path, update, {**payload, "update": update}, keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["checkpoint.pt", "checkpoint_000002.pt", "checkpoint_000003.pt"]
    assert load_checkpoint(tmp_path)["update"] == 3
    assert load_checkpoint(tmp_path / "checkpoint_000002.pt")["update"] == 2


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path):
    path = tmp_path / "checkpoint.pt"
    atomic_save(sealed(_complete(update=1)), path)

    class Unsaveable:
        def __reduce__(self):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_save(sealed(_complete(update=2, x=Unsaveable())), path)
    assert load_checkpoint(path)["update"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


class _Payload:
    def __reduce__(self):
        return (os.getcwd, ())


def test_loading_never_unpickles_code(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"format": "gigastep-ppo/1", "x": _Payload()}, f)
    with pytest.raises(ValueError, match="weights_only=True"):
        load_checkpoint(path)


def test_a_foreign_checkpoint_is_refused(tmp_path):
    torch.save({"model": {}}, tmp_path / "a.pt")
    with pytest.raises(ValueError, match="no 'format' entry"):
        load_checkpoint(tmp_path / "a.pt")
    torch.save({"format": "gigastep-ppo/0"}, tmp_path / "b.pt")
    with pytest.raises(ValueError, match="format 'gigastep-ppo/0'"):
        load_checkpoint(tmp_path / "b.pt")
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.pt")


# ------------------------------------------------------------------------------------------
# Counter-based sampling noise
# ------------------------------------------------------------------------------------------


def test_noise_of_a_row_does_not_depend_on_the_other_rows_drawn():
    from baselines.noise import uniforms

    every = uniforms(7, 1, 3, torch.arange(1000), 2)
    part = uniforms(7, 1, 3, torch.arange(500, 1000), 2)
    assert torch.equal(every[500:], part)
    assert not torch.equal(uniforms(7, 2, 3, torch.arange(10), 2), every[:10])  # other stream
    assert not torch.equal(uniforms(7, 1, 4, torch.arange(10), 2), every[:10])  # other step


def test_noise_is_uniform_in_the_open_unit_interval():
    from baselines.noise import uniforms

    u = uniforms(0, 0, 0, torch.arange(200_000), 1)[:, 0].double()
    assert 0 < float(u.min()) and float(u.max()) < 1
    # mean 1/2 and variance 1/12 within 5 standard errors (n = 200,000)
    assert abs(float(u.mean()) - 0.5) < 5 * (1 / 12 / 200_000) ** 0.5
    assert abs(float(u.var()) - 1 / 12) < 5 * (1 / 180 / 200_000) ** 0.5


def test_categorical_samples_follow_the_probabilities():
    from baselines.noise import categorical, uniforms

    p = torch.tensor([0.1, 0.2, 0.7])
    n = 100_000
    a = categorical(p.log().expand(n, 3), uniforms(1, 0, 0, torch.arange(n), 1)[:, 0])
    freq = torch.bincount(a, minlength=3).double() / n
    assert torch.allclose(freq, p.double(), atol=5 * (0.25 / n) ** 0.5)


def test_box_muller_normals_have_unit_moments():
    from baselines.noise import normal, uniforms

    z = normal(uniforms(2, 0, 0, torch.arange(100_000), 6)).double()
    assert z.shape == (100_000, 3)
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1) < 0.01
