"""Misuse a new user runs into fails with a short message that says what to do instead.

Each error is raised before any compute: the state checks are exercised through
`jax.eval_shape`, which only traces, as well as eagerly.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import pytest

import gigastep
from gigastep.env import GigastepEnv
from gigastep.game.maps import map_set_names
from gigastep.scenarios import ScenarioBuilder, make_config
from gigastep.types import EnvConfig

CONFIG = EnvConfig(teams=(0, 0, 1, 1), obs_type="vector", discrete_actions=True)
N = CONFIG.n_agents
B = 4


@functools.cache
def _batch():
    env = GigastepEnv(CONFIG)
    keys = jax.random.split(jax.random.key(0), B)
    return env, env.v_reset(keys)[1], keys


def _one(states):
    return jax.tree_util.tree_map(lambda x: x[0], states)


def _raises(fn, *args, match: str, error=ValueError):
    with pytest.raises(error, match=match):
        fn(*args)
    with pytest.raises(error, match=match):
        jax.eval_shape(fn, *args)


# ------------------------------------------------------------------------------------------
# Renamed 2023 keywords and unknown fields
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: make_config("identical_5_vs_5", range=2.0),
        lambda: EnvConfig().replace(range=2.0),
        lambda: GigastepEnv(range=2.0),
        lambda: ScenarioBuilder("s").add_type(0, "default").set(range=2.0),
    ],
    ids=["make", "replace", "GigastepEnv", "ScenarioBuilder.set"],
)
def test_the_2023_keyword_range_points_to_detection_range(build):
    with pytest.raises(TypeError, match="'range' is called 'detection_range'"):
        build()


def test_scenario_builder_add_keeps_its_range_argument():
    config = ScenarioBuilder("s").add(0, range=2.0).add(1).config()
    assert config.detection_range == (2.0, 1.0)


def test_an_unknown_field_lists_a_few_close_fields_not_all_of_them():
    for wrong, first in (("cone_dept", "cone_depth"), ("max_episode_lenght", "max_episode_length"),
                         ("xyz", None)):  # fmt: skip
        with pytest.raises(TypeError) as err:
            make_config("identical_5_vs_1", **{wrong: 5})
        message = str(err.value)
        suggested = re.search(r"closest: (.*?)\)", message).group(1).split(", ")
        assert 1 <= len(suggested) <= 3
        assert first is None or suggested[0] == repr(first)
        assert "reward_hit_waypoint" not in message  # far from each: not listed
        assert len(message) < 250


def test_an_unknown_map_set_lists_each_valid_name_once():
    with pytest.raises(ValueError, match="unknown map set 'nope'") as err:
        make_config("identical_5_vs_5", map_set="nope")
    listed = re.search(r"expected one of \[(.*?)\]", str(err.value)).group(1).split(", ")
    assert listed.count("'empty'") == 1
    assert len(listed) == len(set(listed)) == len(map_set_names())


# ------------------------------------------------------------------------------------------
# Single game versus batch
# ------------------------------------------------------------------------------------------


def test_step_given_a_batched_state_says_use_v_step():
    env, states, _ = _batch()
    actions = jnp.zeros((B, N), jnp.int32)
    _raises(env.step, states, actions, jax.random.key(1),
            match=re.escape(f"this state is batched ({B} games); use v_step"))  # fmt: skip


def test_step_autoreset_given_a_batched_state_says_use_v_step_autoreset():
    env, states, _ = _batch()
    expected = re.escape(f"this state is batched ({B} games); use v_step_autoreset")
    _raises(env.step_autoreset, states, jnp.zeros((B, N), jnp.int32), jax.random.key(1),
            match=expected)  # fmt: skip


@pytest.mark.parametrize("method", ["v_step", "v_step_autoreset"])
def test_v_step_given_a_single_state_says_use_step(method):
    env, states, _ = _batch()
    fn = getattr(env, method)
    _raises(fn, _one(states), jnp.zeros((N,), jnp.int32), jax.random.key(1),
            match="this state is a single game .*; use step")  # fmt: skip


@pytest.mark.parametrize("what", ["actions", "keys"])
def test_v_step_names_a_batch_size_that_differs_from_the_states(what):
    env, states, keys = _batch()
    actions = jnp.zeros((B, N), jnp.int32)
    if what == "actions":
        actions = actions[:3]
    else:
        keys = keys[:3]
    _raises(env.v_step, states, actions, keys, match=f"states hold {B} games but {what} hold 3")


def test_a_state_of_another_scenario_names_both_agent_counts():
    env, states, _ = _batch()
    other = GigastepEnv(EnvConfig(teams=(0, 1), obs_type="vector", discrete_actions=True))
    _raises(other.step, _one(states), jnp.zeros((2,), jnp.int32), jax.random.key(1),
            match="state holds 4 agents per game but this game has 2")  # fmt: skip


def test_step_given_something_else_than_a_state_raises_type_error():
    env, _, _ = _batch()
    with pytest.raises(TypeError, match="must be a gigastep EnvState"):
        env.step({"x": jnp.zeros(N)}, jnp.zeros((N,), jnp.int32), jax.random.key(1))


# ------------------------------------------------------------------------------------------
# Scenario files
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("team1", ["team1 = { default = 0 }", "team1 = []", ""])
def test_a_scenario_file_with_an_empty_team_is_rejected_naming_team_and_file(tmp_path, team1):
    path = tmp_path / "lonely.toml"
    path.write_text(f"[scenarios.lonely]\nteam0 = {{ default = 2 }}\n{team1}\n")
    with pytest.raises(ValueError, match="team1 has no agents") as err:
        gigastep.make(str(path))
    assert str(path) in str(err.value) and "'lonely'" in str(err.value)
