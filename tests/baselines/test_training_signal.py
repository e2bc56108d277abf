"""The team training signal (`--signal team`), the rules of issue 53 on tiny hand-made batches.

The example used throughout: one game of three agents, agents 0 and 1 in team 0 (the
learner), agent 2 in team 1. Agent 1 dies during step 1. gamma = lambda = 0.5.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from baselines.buffer import compute_gae, signal_rewards, trajectory_flags
from baselines.jax_ppo import algorithm
from baselines.loss import ppo_loss

TEAMS = [0, 0, 1]
REWARDS = [[1.0, 2.0, 5.0], [0.5, -1.0, 0.0], [3.0, 0.0, 7.0]]  # [T, n]: the game's
DONES = [[False, False, False], [False, True, False], [False, True, False]]  # after the step
ALIVE = [[True, True], [True, True], [True, False]]  # learner rows 0, 1 before each step
VALUES = [[1.0, 2.0], [0.5, 0.25], [0.0, 1.0]]
NEXT = [2.0, 4.0]


def _torch_team_advantages(signal: str):
    teams = torch.tensor(TEAMS)
    rows = torch.tensor([0, 1])
    rewards, cont, boot = [], [], []
    for t in range(3):
        r = signal_rewards(signal, torch.tensor([REWARDS[t]]), None, teams)[0]
        alive = torch.tensor(ALIVE[t])
        valued = alive if signal == "individual" else torch.ones_like(alive)
        rewards.append(torch.where(valued, r[rows], 0.0))
        c, b = trajectory_flags(
            signal,
            ~torch.tensor(DONES[t])[rows],
            torch.zeros(2, dtype=bool),
            torch.zeros(2, dtype=bool),
        )
        cont.append(c)
        boot.append(b)
    return compute_gae(
        torch.stack(rewards),
        torch.tensor(VALUES),
        torch.stack(cont),
        torch.stack(boot),
        torch.zeros(3, 2),
        torch.tensor(NEXT),
        0.5,
        0.5,
    )


def test_team_reward_is_the_sum_of_the_teams_game_rewards_for_every_agent_dead_or_alive():
    r = signal_rewards("team", torch.tensor(REWARDS), None, torch.tensor(TEAMS))
    assert r.tolist() == [[3.0, 3.0, 5.0], [-0.5, -0.5, 0.0], [3.0, 3.0, 7.0]]


def test_shaping_stays_with_the_agent_that_earned_it_under_the_team_signal():
    # the game's own reward g (score) is shared; the shaping r - g is not
    game = torch.tensor([[1.0, 2.0, 5.0]])
    shaped = torch.tensor([[1.5, 2.0, 4.0]])  # agent 0 earned +0.5 shaping, agent 2 -1
    r = signal_rewards("team", shaped, game, torch.tensor(TEAMS))
    assert r.tolist() == [[3.5, 3.0, 4.0]]
    assert signal_rewards("individual", shaped, game, torch.tensor(TEAMS)) is shaped


def test_team_gae_runs_to_the_episodes_end_past_an_agents_death():
    # hand calculation (see the module doc): team rewards 3, -0.5, 3 for both rows
    # row 1 (dies in step 1): deltas 3 + .5*.25 - 2 = 1.125, -.5 + .5*1 - .25 = -.25,
    # 3 + .5*4 - 1 = 4; A2 = 4, A1 = -.25 + .25*4 = .75, A0 = 1.125 + .25*.75 = 1.3125
    # row 0: deltas 2.25, -1, 4; A2 = 4, A1 = 0, A0 = 2.25
    adv, ret = _torch_team_advantages("team")
    assert adv.tolist() == [[2.25, 1.3125], [0.0, 0.75], [4.0, 4.0]]
    assert torch.equal(ret, adv + torch.tensor(VALUES))


def test_individual_gae_is_cut_at_the_agents_death():
    # row 1: rewards 2, -1 (its step of death), then nothing; no continuation after step 1:
    # A1 = -1 - .25 = -1.25, A0 = 2 + .5*.25 - 2 + .25*(-1.25) = -.1875
    adv, _ = _torch_team_advantages("individual")
    assert adv[:2, 1].tolist() == [-0.1875, -1.25]


def test_both_frameworks_compute_the_same_team_advantages_on_the_same_batch():
    rng = np.random.default_rng(3)
    t, b, n = 6, 4, 4
    teams = np.array([0, 1, 0, 1])
    rewards = rng.normal(size=(t, b, n)).astype(np.float32)
    score = (rewards - rng.normal(size=(t, b, n)) * 0.1).astype(np.float32)
    alive_after = rng.random((t, b * n)) > 0.3
    ended = rng.random((t, b * n)) > 0.8
    truncated = ended & (rng.random((t, b * n)) > 0.5)
    values = rng.normal(size=(t, b * n)).astype(np.float32)
    final = rng.normal(size=(t, b * n)).astype(np.float32)
    nxt = rng.normal(size=b * n).astype(np.float32)
    out = []
    for lib in ("torch", "jax"):
        r_t, c_t, b_t = [], [], []
        for s in range(t):
            if lib == "torch":
                r = signal_rewards(
                    "team", torch.tensor(rewards[s]), torch.tensor(score[s]), torch.tensor(teams)
                )
                c, bo = trajectory_flags(
                    "team", *(torch.tensor(x[s]) for x in (alive_after, ended, truncated))
                )
            else:
                r = algorithm.signal_rewards(
                    "team", jnp.asarray(rewards[s]), jnp.asarray(score[s]), teams
                )
                c, bo = algorithm.trajectory_flags(
                    "team", *(jnp.asarray(x[s]) for x in (alive_after, ended, truncated))
                )
            r_t.append(np.asarray(r).reshape(-1))
            c_t.append(np.asarray(c))
            b_t.append(np.asarray(bo))
        args = [np.stack(r_t), values, np.stack(c_t), np.stack(b_t), final, nxt]
        if lib == "torch":
            adv, _ = compute_gae(*(torch.tensor(a) for a in args), 0.99, 0.95)
        else:
            adv, _ = algorithm.compute_gae(*(jnp.asarray(a) for a in args), 0.99, 0.95)
        out.append(np.asarray(adv))
    np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-5)
    assert np.stack(c_t).sum() == (~ended).sum()  # the team flags ignore deaths


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_dead_agents_action_contributes_nothing_to_the_policy_loss_but_its_value_is_trained(
    framework,
):
    alive = np.array([[True, True], [True, False], [True, False]])
    valued = np.ones_like(alive)
    rng = np.random.default_rng(0)
    old, adv, values, ret = (rng.normal(size=(3, 2)).astype(np.float32) for _ in range(4))
    logp = old.copy()  # ratio 1: no entry is clipped, every alive one has a gradient
    ent = np.abs(rng.normal(size=(3, 2))).astype(np.float32)
    kw = dict(clip=0.2, vf_coef=0.5, ent_coef=0.01)
    if framework == "torch":
        lp = torch.tensor(logp, requires_grad=True)
        v = torch.tensor(values, requires_grad=True)
        e = torch.tensor(ent, requires_grad=True)
        args = [torch.tensor(x) for x in (old, adv)]
        out = ppo_loss(
            lp,
            args[0],
            args[1],
            v,
            v.detach(),
            torch.tensor(ret),
            e,
            torch.tensor(alive),
            value_mask=torch.tensor(valued),
            **kw,
        )
        out.loss.backward()
        g_logp, g_v, g_e = lp.grad.numpy(), v.grad.numpy(), e.grad.numpy()
    else:
        import jax

        def loss(lp, v, e):
            return algorithm.ppo_loss(
                lp,
                jnp.asarray(old),
                jnp.asarray(adv),
                v,
                v,
                jnp.asarray(ret),
                e,
                jnp.asarray(alive),
                value_mask=jnp.asarray(valued),
                **kw,
            )[0]

        grads = jax.grad(loss, argnums=(0, 1, 2))(*(jnp.asarray(x) for x in (logp, values, ent)))
        g_logp, g_v, g_e = (np.asarray(g) for g in grads)
    assert (g_logp[~alive] == 0).all() and (g_e[~alive] == 0).all()
    assert (g_logp[alive] != 0).all()
    # the value of every row of the episode is trained, dead rows included (mean over all 6)
    np.testing.assert_allclose(g_v, 0.5 * (values - ret) / 6, rtol=1e-5)


@pytest.mark.slow
def test_in_a_real_rollout_dead_agents_keep_their_teams_reward_until_the_episode_ends(tmp_path):
    from baselines.config import PPOConfig
    from baselines.train import Trainer

    config = PPOConfig(
        scenario="identical_2_vs_2_fobs_vec_void_disc",
        num_envs=16,
        rollout_steps=48,
        updates=1,
        policy="mlp",
        hidden=16,
        opponent="pursuit",
        signal="team",
        shooter_credit=0.2,
        action_head="factored",
        out=str(tmp_path),
        progress=False,
        tensorboard=False,
        plots=False,
    )
    trainer = Trainer(config)
    trainer.start()
    trainer.collect()
    buf = trainer.learners[0].buffer
    assert buf.valued.all()  # every row's value is trained, dead or alive
    dead = ~buf.alive
    assert dead.any(), "no agent died in the rollout: the test needs a death"
    # a dead agent's trajectory goes on while its game goes on
    assert (buf.cont & dead).any()
    stats = trainer.learn(0)
    assert all(np.isfinite(v) for v in stats.values() if v is not None)
