"""The cooperative mode (gigastep.versus): one team of a game played by a scripted policy."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.env import GigastepEnv
from gigastep.opponents import pursuit
from gigastep.types import EnvState
from gigastep.versus import VersusEnv
from tests.api.test_opponents import _config


@pytest.fixture(scope="module")
def versus_config():
    return _config((0, 0, 1, 1), discrete_actions=True)


@pytest.fixture(scope="module")
def versus_disc(versus_config):
    return VersusEnv(GigastepEnv(versus_config), "pursuit", opponent_team=1)


@pytest.fixture(scope="module")
def env_step(versus_config):
    return jax.jit(GigastepEnv(versus_config).step)


@pytest.mark.parametrize("learner", [0, 1])
def test_versus_step_is_the_env_step_with_the_opponent_rows_scripted(
    versus_config, env_step, learner
):
    # Reference: the opponent acts from the first half of the split key, the env steps with
    # the second (documented in VersusEnv.step); the learner's rows are its own actions.
    versus = VersusEnv(GigastepEnv(versus_config), "pursuit", opponent_team=1 - learner)
    rows = [0, 1] if learner == 0 else [2, 3]
    state = EnvState.create(
        versus_config,
        x=[2.0, 2.0, 8.0, 8.0],
        y=[3.0, 7.0, 3.0, 7.0],
        heading=[0.0, 0.0, math.pi, math.pi],
    )
    key = jax.random.PRNGKey(7)
    got = jax.jit(versus.step)(state, jnp.asarray([0, 26], jnp.int32), key)
    k_opp, k_env = jax.random.split(key)
    joint = np.asarray(jax.jit(pursuit, static_argnums=0)(versus_config, state, k_opp)).copy()
    joint[rows] = [0, 26]
    want = env_step(state, jnp.asarray(joint), k_env)
    assert versus.team == learner and list(versus.team_indices) == rows
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0])[rows])
    np.testing.assert_array_equal(np.asarray(got[2]), np.asarray(want[2])[rows])
    np.testing.assert_array_equal(np.asarray(got[3]), np.asarray(want[3])[rows])
    np.testing.assert_array_equal(np.asarray(got[1].agents.x), np.asarray(want[1].agents.x))
    assert got[0].shape == (2, versus_config.vector_size)


def test_versus_rejects_actions_of_the_wrong_shape(versus_disc, versus_config):
    state = EnvState.create(versus_config, x=[2.0, 2.0, 8.0, 8.0], y=[3.0, 7.0, 3.0, 7.0])
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        versus_disc.step(state, jnp.zeros(4, jnp.int32), jax.random.PRNGKey(1))
    with pytest.raises(ValueError, match="integers"):
        versus_disc.step(state, jnp.zeros(2, jnp.float32), jax.random.PRNGKey(1))


def test_versus_rejects_a_team_without_agents():
    with pytest.raises(ValueError, match="no agents"):
        VersusEnv(GigastepEnv(_config((0, 0))), "random", opponent_team=0)
