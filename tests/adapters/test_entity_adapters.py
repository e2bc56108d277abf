"""Every adapter builds its spaces and specs for the entity observation (rules §5.5) and hands
out observations that fit them: Gymnasium, PettingZoo, TorchVecEnv, TorchRL and JaxMARL.

One small game (1 vs 1 on the empty maps, 3-step time limit) per adapter: entity_size is
(1 self + 2 allies + 3 enemies) rows of 25 = 150.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest

import gigastep
from gigastep.types import EnvConfig

GAME = EnvConfig(
    teams=(0, 1),
    obs_type="entity",
    map_set="empty",
    discrete_actions=True,
    max_episode_length=3,
    entity_max_allies=2,
    entity_max_enemies=3,
)
SIZE = (1 + 2 + 3) * 25


def test_the_env_space_is_a_bounded_float_box_of_entity_size():
    space = gigastep.GigastepEnv(GAME).observation_space
    assert space.shape == (SIZE,) and space.dtype == np.float32
    assert np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))


def test_gymnasium_team_env_passes_check_env():
    from gymnasium.utils.env_checker import check_env

    from gigastep.adapters.gymnasium import TeamEnv

    env = TeamEnv(GAME, team=0, opponent="pursuit")
    assert env.observation_space.shape == (1, SIZE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no registered spec
        check_env(env)


def test_pettingzoo_parallel_env_passes_the_api_test():
    from pettingzoo.test import parallel_api_test

    from gigastep.adapters.pettingzoo import parallel_env

    env = parallel_env(GAME)
    assert env.observation_space(env.possible_agents[0]).shape == (SIZE,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(env, num_cycles=10)


def test_torch_vec_env_returns_entity_rows():
    torch = pytest.importorskip("torch")
    from gigastep.adapters.torch import TorchVecEnv

    venv = TorchVecEnv(GAME, 2)
    obs = venv.reset()
    obs = obs[0] if isinstance(obs, tuple) else obs
    assert tuple(obs.shape) == (2, 2, SIZE) and obs.dtype == torch.float32


@pytest.mark.slow  # about a minute on 2 cores
def test_torchrl_env_passes_check_env_specs():
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    from gigastep.adapters.torchrl import GigastepTorchRLEnv

    env = GigastepTorchRLEnv(GAME, num_envs=2)
    assert tuple(env.observation_spec["team0", "observation"].shape) == (2, 1, SIZE)
    check_env_specs(env, break_when_any_done="both", seed=0)


@pytest.mark.slow  # about 30 s on 2 cores
def test_jaxmarl_env_space_and_observations():
    pytest.importorskip("jaxmarl")
    from gigastep.jaxmarl import make

    env = make(GAME)
    agent = env.agents[0]
    space = env.observation_space(agent)
    assert space.shape == (SIZE,)
    obs, _ = env.reset(jax.random.key(0))
    row = np.asarray(obs[agent])
    assert row.shape == (SIZE,)
    assert np.all(row >= np.asarray(space.low)) and np.all(row <= np.asarray(space.high))
