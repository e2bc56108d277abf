"""The adapters expose which agents a team draw left out of an episode (`EnvConfig.team_draw`):
absent agents are masked or left out, and a config without a draw keeps its outputs."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from gigastep import EnvConfig, GigastepEnv, TeamDraw

DRAWN = EnvConfig(
    teams=(0, 0, 0, 1, 1, 1),
    obs_type="vector",
    discrete_actions=True,
    max_agents_in_vec_obs=6,
    team_draw=TeamDraw(sizes=((1, 2), (1, 2))),  # slot 2 and slot 5 are never present
)
FIXED = DRAWN.replace(team_draw=None)
B = 16


def _some_absent(present: np.ndarray) -> None:
    """A batch of draws leaves out the slots above the max size, and some below it."""
    assert not present[..., 2].any() and not present[..., 5].any()
    assert present[..., [0, 3]].all()
    assert not present[..., [1, 4]].all()


def test_torch_vec_env_present_is_the_episode_mask():
    import torch

    from gigastep.adapters.torch import TorchVecEnv

    venv = TorchVecEnv(GigastepEnv(DRAWN), num_envs=B)
    venv.reset()
    present = venv.present.numpy()
    _some_absent(present)
    assert np.array_equal(present, np.asarray(venv.states.agents.alive))
    venv.step(torch.zeros((B, 6), dtype=torch.int32))
    assert np.array_equal(venv.present.numpy(), np.asarray(venv.states.episode.present))
    fixed = TorchVecEnv(GigastepEnv(FIXED), num_envs=B)
    fixed.reset()
    assert fixed.present.all()


def test_torch_vec_env_present_of_a_team_against_an_opponent():
    from gigastep.adapters.torch import TorchVecEnv

    venv = TorchVecEnv(GigastepEnv(DRAWN), num_envs=B, opponent="random", team=1)
    venv.reset()
    assert np.array_equal(venv.present.numpy(), np.asarray(venv.states.episode.present)[:, 3:])


def test_pettingzoo_agents_are_the_present_agents():
    from gigastep.adapters.pettingzoo import GigastepParallelEnv

    env = GigastepParallelEnv(GigastepEnv(DRAWN))
    seen = set()
    for seed in range(6):
        env.reset(seed=seed)
        present = np.asarray(env._state.episode.present)
        assert env.agents == [a for a, p in zip(env.possible_agents, present, strict=True) if p]
        seen.add(len(env.agents))
    assert len(seen) > 1  # the compositions differ between episodes


def test_gymnasium_info_holds_the_team_present_mask():
    from gigastep.adapters.gymnasium import TeamEnv, TeamVectorEnv

    env = TeamEnv(GigastepEnv(DRAWN), team=0)
    _, info = env.reset(seed=0)
    assert np.array_equal(info["agent_present"], np.asarray(env._state.episode.present)[:3])
    _, _, _, _, info = env.step(env.action_space.sample())
    assert info["agent_present"].shape == (3,)
    venv = TeamVectorEnv(GigastepEnv(DRAWN), num_envs=B)
    _, info = venv.reset(seed=0)
    _some_absent(np.concatenate([info["agent_present"], info["agent_present"]], axis=1))
    _, info = TeamEnv(GigastepEnv(FIXED)).reset(seed=0)
    assert "agent_present" not in info


def test_jaxmarl_infos_hold_present():
    from gigastep.adapters.jaxmarl import GigastepJaxMARLEnv

    env = GigastepJaxMARLEnv(GigastepEnv(DRAWN))
    _, state = env.reset(jax.random.key(0))
    actions = {a: 0 for a in env.agents}
    _, nxt, _, dones, infos = env.step(jax.random.key(1), state, actions)
    assert np.array_equal(infos["present"], np.asarray(nxt.episode.present))
    absent = [a for a, p in zip(env.agents, np.asarray(nxt.episode.present), strict=True) if not p]
    assert absent and all(bool(dones[a]) for a in absent)


def test_torchrl_mask_is_false_for_absent_agents():
    pytest.importorskip("torchrl")
    from gigastep.adapters.torchrl import GigastepTorchRLEnv

    env = GigastepTorchRLEnv(GigastepEnv(DRAWN), num_envs=B)
    td = env.reset()
    present = np.asarray(env._venv.states.episode.present)
    mask = np.concatenate(
        [td["team0", "info", "mask"].numpy(), td["team1", "info", "mask"].numpy()], 1
    )
    assert np.array_equal(mask, present)
    td = env.rollout(3)
    mask = td["next", "team0", "info", "mask"].numpy()
    assert not mask[..., 2].any()
