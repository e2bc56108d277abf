"""PettingZoo adapter (gigastep.adapters.pettingzoo): the official checks, the agent life cycle."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test, render_test, state_test
from pettingzoo.utils.conversions import parallel_to_aec

from gigastep.adapters.pettingzoo import agent_names, parallel_env
from gigastep.types import EnvConfig, EnvState

SMALL_RGB = dict(resolution_x=16, resolution_y=16)
SCENARIOS = [
    ("identical_2_vs_2_fobs_vec_void_disc", SMALL_RGB),
    ("identical_5_vs_1_pobs_rgb_maps_cont", SMALL_RGB),
    ("identical_1_vs_1_fobs_vec_void_cont", dict(obs_type="rgb_vector", **SMALL_RGB)),
]
IDS = ["vec-disc", "rgb-cont-maps", "rgb_vector-cont"]


@pytest.fixture(params=SCENARIOS, ids=IDS)
def make(request):
    name, overrides = request.param

    def factory(render_mode=None):
        return parallel_env(name, render_mode=render_mode, **overrides)

    return factory


def test_parallel_api_test(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker reports API slips as warnings
        parallel_api_test(make(), num_cycles=200)


def test_parallel_seed_test(make):
    parallel_seed_test(make, num_cycles=100)


def test_render_test(make):
    # render_test first builds the env with render_mode="human" only to read
    # metadata["render_modes"]; Gigastep renders "rgb_array" frames only, so that probe is
    # answered with an env without rendering.
    def aec(render_mode=None):
        return parallel_to_aec(make(None if render_mode == "human" else render_mode))

    render_test(aec)


def test_state_test(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state_test(parallel_to_aec(make()), make())


# ------------------------------------------------------------------------------------------
# Names, spaces, life cycle
# ------------------------------------------------------------------------------------------


def test_agents_are_named_by_team_and_index_within_the_team():
    config = EnvConfig(teams=(0, 0, 1, 0, 1), obs_type="vector")
    assert agent_names(config) == [
        "team0_agent0",
        "team0_agent1",
        "team1_agent0",
        "team0_agent2",
        "team1_agent1",
    ]


def test_spaces_are_cached_objects():
    env = parallel_env("identical_2_vs_2_fobs_vec_void_disc")
    for a in env.possible_agents:
        assert env.observation_space(a) is env.observation_space(a)
        assert env.action_space(a) is env.action_space(a)
    with pytest.raises(KeyError, match="team0_agent0"):
        env.action_space("team0_agnet0")


def test_reset_is_reproducible_for_a_seed():
    env = parallel_env("identical_2_vs_2_fobs_vec_void_disc")
    a, _ = env.reset(seed=11)
    b, _ = env.reset(seed=11)
    c, _ = env.reset(seed=12)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not all(np.array_equal(a[k], c[k]) for k in a)


# A 2-vs-1 duel without randomness (see tests/adapters/test_torch_bridge.py): team0_agent0 and
# team1_agent0 fly head-on from 0.95 apart and collide at step 3; team0_agent1 survives.
DUEL = EnvConfig(
    teams=(0, 0, 1),
    obs_type="vector",
    map_set="empty",
    stochastic_obs=False,
    stochastic_comm=False,
    damage_per_second=0.0,
    discrete_actions=True,
)


def test_dead_agents_leave_and_the_game_end_terminates_the_rest():
    env = parallel_env(DUEL)
    start = EnvState.create(DUEL, x=[5.0, 2.0, 5.95], y=[5.0, 8.0, 5.0], heading=[0.0, 0.0, np.pi])
    env.reset(seed=0, options={"state": start})
    noop = dict.fromkeys(env.agents, 13)
    for _ in range(2):
        _, _, term, trunc, _ = env.step(noop)
        assert not any(term.values()) and not any(trunc.values())
    obs, rewards, term, trunc, _ = env.step(noop)
    # Both colliders die (terminated); team 1 is eliminated, so the survivor is terminated too.
    assert set(obs) == set(rewards) == {"team0_agent0", "team0_agent1", "team1_agent0"}
    assert all(term.values()) and not any(trunc.values())
    assert env.agents == []
    assert (obs["team0_agent0"] == 0).all() and np.abs(obs["team0_agent1"]).sum() > 0


def test_reset_from_a_given_state_leaves_its_dead_agents_out():
    env = parallel_env(DUEL)
    start = EnvState.create(DUEL, x=[5.0, 2.0, 8.0], y=[5.0, 8.0, 5.0], alive=[True, False, True])
    obs, infos = env.reset(seed=0, options={"state": start})
    assert env.agents == ["team0_agent0", "team1_agent0"] == sorted(obs) == sorted(infos)


def test_reset_from_a_state_with_a_non_finite_position_is_refused():
    env = parallel_env(DUEL)
    start = EnvState.create(DUEL, x=[5.0, 2.0, 8.0], y=[5.0, 8.0, 5.0])
    bad = start.replace(agents=start.agents.replace(y=start.agents.y.at[1].set(np.nan)))
    with pytest.raises(ValueError, match=r"options\['state'\].*y.*agent 1"):
        env.reset(seed=0, options={"state": bad})


def test_missing_and_malformed_actions_are_clear_errors():
    env = parallel_env(DUEL)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="team1_agent0"):
        env.step({"team0_agent0": 13, "team0_agent1": 13})
    with pytest.raises(ValueError, match="integer"):
        env.step({a: 1.5 for a in env.agents})
    with pytest.raises(KeyError, match="closest"):
        env.step({**dict.fromkeys(env.agents, 13), "team2_agent0": 13})


def test_render_without_render_mode_returns_none_and_bad_mode_is_refused():
    env = parallel_env(DUEL)
    env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert env.render() is None
    with pytest.raises(ValueError, match="rgb_array"):
        parallel_env(DUEL, render_mode="human")


def test_last_step_time_limit_truncates_the_survivors_and_terminates_the_agent_dying_on_it():
    """The last step of an episode (rules §4.9): DUEL's time limit is 500 steps and the game
    starts at step 497, so its third step is the last. team0_agent0 flies out of the map on
    that step (x 9.75 + 0.096 + 2 * 0.12324 = 10.09248 > 10; 9.96924 after two steps); team 0
    keeps team0_agent1, so the episode is truncated, not terminated: the dying agent is
    terminated, the two survivors truncated, and `agents` empties. Every agent alive at the
    start of the step gets its terminal observation (no reset: the dead agent's is zeros, the
    survivors' ego rows show them 3 no-op steps on, x (2 + 0.34248) / 10), its reward and an
    empty info. Rewards (defaults: defeat 100, divided by the team size; §13.2's sign):
    team0_agent1 100 * (-1 - 0) / (1 + 1) / 2 = -25, team1_agent0 100 * (0 - (-1)) / (1 + 1)
    = 50, the dead agent 0."""
    env = parallel_env(DUEL)
    start = EnvState.create(DUEL, x=[9.75, 2.0, 2.0], y=[5.0, 8.0, 2.0], step=497)
    env.reset(seed=0, options={"state": start})
    noop = dict.fromkeys(env.agents, 13)
    for _ in range(2):
        _, _, term, trunc, _ = env.step(noop)
        assert not any(term.values()) and not any(trunc.values())
    obs, rewards, term, trunc, infos = env.step(noop)
    assert term == {"team0_agent0": True, "team0_agent1": False, "team1_agent0": False}
    assert trunc == {"team0_agent0": False, "team0_agent1": True, "team1_agent0": True}
    assert env.agents == []
    assert infos == {a: {} for a in env.possible_agents}
    np.testing.assert_array_equal(obs["team0_agent0"], 0.0)
    np.testing.assert_allclose(obs["team0_agent1"][2:4], [0.234248, 0.8], atol=1e-5)
    np.testing.assert_allclose(obs["team1_agent0"][2:4], [0.234248, 0.2], atol=1e-5)
    assert rewards == pytest.approx(
        {"team0_agent0": 0.0, "team0_agent1": -25.0, "team1_agent0": 50.0}, abs=1e-4
    )
