"""Misuse fails early and clearly, with a message that says what to do instead; invalid
action values are defined.

The API contract and its error handling: wrong action shapes or dtypes, bad keys and bad
config values raise a `ValueError` that says what was expected, at construction or at trace
time, before any compute: the action and key checks are exercised through `jax.eval_shape`,
which only traces. rules §15 ("Also part of this project's game"): continuous actions that are
NaN act as 0; discrete actions outside 0..26 are clipped. The state checks (a batched state
where one game is expected, a state of another scenario, ...) are exercised through
`jax.eval_shape` as well as eagerly.
"""

from __future__ import annotations

import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gigastep
from gigastep.env import GigastepEnv
from gigastep.game.maps import map_set_names
from gigastep.game.procmaps import generator_names
from gigastep.game.types import REWARD_FIELDS
from gigastep.scenarios import ScenarioBuilder, make_config
from gigastep.types import EnvConfig, EnvState

TEAMS = (0, 0, 1, 1)
N = len(TEAMS)
CONT = EnvConfig(teams=TEAMS, obs_type="vector", map_set="empty")
DISC = CONT.replace(discrete_actions=True)
KEY = jax.random.key(0)


@functools.cache
def _env(config) -> GigastepEnv:
    return GigastepEnv(config)


@functools.cache
def _jit_step(config):
    return jax.jit(_env(config).step)


def close_state(config) -> EnvState:
    """Two duels, 1 apart, facing each other, with locks about to deal damage, so that a
    changed action changes detections, locks and health as well as motion."""
    tracked = np.zeros((N, N), np.int32)
    tracked[2, 0] = tracked[0, 2] = tracked[3, 1] = 4  # [target, shooter]
    return EnvState.create(
        config,
        x=np.array([4.0, 4.0, 5.0, 5.0], np.float32),
        y=np.array([3.0, 7.0, 3.0, 7.0], np.float32),
        z=np.array([2.0, 2.0, 2.0, 2.0], np.float32),
        heading=np.array([0.0, 0.0, math.pi, math.pi], np.float32),
        tracked=tracked,
    )


def _raises_at_trace(fn, *args, expected: str):
    """`fn(*args)` raises a ValueError naming `expected`, eagerly and while only tracing."""
    with pytest.raises(ValueError, match=re.escape(expected)):
        fn(*args)
    with pytest.raises(ValueError, match=re.escape(expected)):
        jax.eval_shape(fn, *args)


# ------------------------------------------------------------------------------------------
# Actions: shape and dtype
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(N,), (N, 2), (N, 4), (N + 1, 3), (N - 1, 3), (1, N, 3), ()])
def test_continuous_actions_of_wrong_shape_raise_naming_the_expected_shape(shape):
    env = _env(CONT)
    state = close_state(CONT)
    _raises_at_trace(env.step, state, jnp.zeros(shape, jnp.float32), KEY, expected=f"({N}, 3)")


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint8, jnp.bool_])
def test_continuous_actions_of_non_float_dtype_raise_naming_the_expected_shape(dtype):
    env = _env(CONT)
    state = close_state(CONT)
    _raises_at_trace(env.step, state, jnp.zeros((N, 3), dtype), KEY, expected=f"({N}, 3)")


@pytest.mark.parametrize("shape", [(N, 3), (N, 1), (N + 1,), (N - 1,), (1, N), ()])
def test_discrete_actions_of_wrong_shape_raise_naming_the_expected_shape(shape):
    env = _env(DISC)
    state = close_state(DISC)
    _raises_at_trace(env.step, state, jnp.zeros(shape, jnp.int32), KEY, expected=f"({N},)")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bool_])
def test_discrete_actions_of_non_integer_dtype_raise_naming_the_expected_shape(dtype):
    env = _env(DISC)
    state = close_state(DISC)
    _raises_at_trace(env.step, state, jnp.zeros((N,), dtype), KEY, expected=f"({N},)")


def test_batched_step_with_wrong_per_game_action_shape_raises():
    env = _env(CONT)
    states = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), close_state(CONT))
    keys = jax.random.split(KEY, 2)
    with pytest.raises(ValueError, match=re.escape(f"({N}, 3)")):
        env.v_step(states, jnp.zeros((2, N, 2), jnp.float32), keys)


def test_wrong_actions_raise_inside_an_outer_jit_at_trace_time():
    env = _env(CONT)
    with pytest.raises(ValueError, match=re.escape(f"({N}, 3)")):
        jax.jit(env.step)(close_state(CONT), jnp.zeros((N,), jnp.float32), KEY)


# ------------------------------------------------------------------------------------------
# Keys
# ------------------------------------------------------------------------------------------

BAD_KEYS = {
    "uint32 (3,)": lambda: jnp.zeros(3, jnp.uint32),
    "uint32 (2, 2) batch": lambda: jax.random.split(jax.random.PRNGKey(0), 2),
    "float32 (2,)": lambda: jnp.zeros(2, jnp.float32),
    "int32 scalar": lambda: jnp.int32(0),
    "typed (2,) batch": lambda: jax.random.split(jax.random.key(0), 2),
}


@pytest.mark.parametrize("bad", list(BAD_KEYS))
def test_reset_with_a_bad_key_raises(bad):
    with pytest.raises(ValueError, match="key"):
        _env(CONT).reset(BAD_KEYS[bad]())
    with pytest.raises(ValueError, match="key"):
        jax.eval_shape(_env(CONT).reset, BAD_KEYS[bad]())


@pytest.mark.parametrize("bad", list(BAD_KEYS))
def test_step_with_a_bad_key_raises(bad):
    env = _env(CONT)
    state, actions = close_state(CONT), jnp.zeros((N, 3), jnp.float32)
    with pytest.raises(ValueError, match="key"):
        env.step(state, actions, BAD_KEYS[bad]())
    with pytest.raises(ValueError, match="key"):
        jax.eval_shape(env.step, state, actions, BAD_KEYS[bad]())


@pytest.mark.parametrize(
    "keys",
    [
        jax.random.PRNGKey(0),
        jnp.zeros((2, 3), jnp.uint32),
        jax.random.key(0),
        jnp.zeros((2, 2), jnp.float32),
    ],
    ids=["single raw key", "uint32 (2, 3)", "single typed key", "float32 (2, 2)"],
)
def test_batched_reset_with_bad_keys_raises(keys):
    with pytest.raises(ValueError, match="key"):
        _env(CONT).v_reset(keys)


# ------------------------------------------------------------------------------------------
# Config values (checked at construction)
# ------------------------------------------------------------------------------------------


def test_no_agents_is_rejected():
    with pytest.raises(ValueError, match="agent"):
        EnvConfig(teams=())
    with pytest.raises(ValueError, match="no agents"):
        ScenarioBuilder("empty").config()


def test_negative_agent_count_is_a_value_error():
    with pytest.raises(ValueError, match="count"):
        ScenarioBuilder("bad").add_type(0, "default", -1)


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_agents_in_vec_obs", 0),
        ("max_agents_in_vec_obs", -1),
        ("max_episode_length", 0),
        ("max_episode_length", -5),
        ("min_tracking_steps", -1),
        ("reset_max_rounds", -1),
    ],
)
def test_zero_or_negative_counts_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        EnvConfig(teams=TEAMS, **{field: value})


@pytest.mark.parametrize(
    "name, closest", [("vectr", "vector"), ("rgb_vec", "rgb_vector"), ("RGB", "rgb")]
)
def test_unknown_obs_type_names_the_closest(name, closest):
    with pytest.raises(ValueError, match=re.escape(repr(closest))):
        EnvConfig(teams=TEAMS, obs_type=name)


@pytest.mark.parametrize("res", [(7, 84), (84, 7), (0, 0), (-8, 8)])
def test_resolution_below_8_is_rejected(res):
    with pytest.raises(ValueError, match="8"):
        EnvConfig(teams=TEAMS, resolution_x=res[0], resolution_y=res[1])


def test_resolution_of_8_is_accepted():
    assert EnvConfig(teams=TEAMS, resolution_x=8, resolution_y=8).resolution == (8, 8)


@pytest.mark.parametrize("teams", [(0, 1, 2), (0, -1), (2, 2)])
def test_teams_other_than_0_and_1_are_rejected(teams):
    with pytest.raises(ValueError, match="0 and 1"):
        EnvConfig(teams=teams)


@pytest.mark.parametrize(
    "field", ["max_health", "detection_range", "damage_range", "thrust", "idle_reward", "sprites"]
)
@pytest.mark.parametrize("length", [N - 1, N + 1])
def test_per_agent_table_of_wrong_length_is_rejected(field, length):
    value = (1,) * length
    with pytest.raises(ValueError, match=field):
        EnvConfig(teams=TEAMS, **{field: value})


@pytest.mark.parametrize("field", REWARD_FIELDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_reward_weight_is_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        EnvConfig(teams=TEAMS, **{field: value})


def test_config_errors_are_raised_by_env_construction_and_replace():
    with pytest.raises(ValueError, match="reward_damage"):
        GigastepEnv(teams=TEAMS, reward_damage=math.nan)
    with pytest.raises(ValueError, match="resolution"):
        CONT.replace(resolution_x=4)


# ------------------------------------------------------------------------------------------
# Invalid action values have defined effects
# ------------------------------------------------------------------------------------------


def _assert_same_step(config, actions_a, actions_b, seed=1):
    state, key = close_state(config), jax.random.key(seed)
    a = _jit_step(config)(state, jnp.asarray(actions_a), key)
    b = _jit_step(config)(state, jnp.asarray(actions_b), key)
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    return a


def test_nan_continuous_actions_act_as_zero():
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (N, 3)).astype(np.float32)
    nan_mask = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], bool)
    with_nan = np.where(nan_mask, np.nan, actions).astype(np.float32)
    with_zero = np.where(nan_mask, 0.0, actions).astype(np.float32)
    out = _assert_same_step(CONT, with_nan, with_zero)
    for leaf in jax.tree_util.tree_leaves(out[1]):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert np.all(np.isfinite(np.asarray(leaf)))


def test_all_nan_continuous_actions_equal_the_no_op():
    _assert_same_step(CONT, np.full((N, 3), np.nan, np.float32), np.zeros((N, 3), np.float32))


def test_out_of_range_continuous_actions_saturate():
    big = np.array([[5, -7, 2], [-1.5, 1.5, -3], [1e30, -1e30, 1e30], [np.inf, -np.inf, 2]])
    _assert_same_step(CONT, big.astype(np.float32), np.clip(big, -1, 1).astype(np.float32))


def test_discrete_actions_below_0_act_as_0():
    _assert_same_step(
        DISC, np.array([-3, -1, -100, 13], np.int32), np.array([0, 0, 0, 13], np.int32)
    )


def test_discrete_actions_above_26_act_as_26():
    _assert_same_step(
        DISC, np.array([40, 27, 2**31 - 1, 13], np.int32), np.array([26, 26, 26, 13], np.int32)
    )


# ------------------------------------------------------------------------------------------
# States, batches and names a new user gets wrong
# ------------------------------------------------------------------------------------------

CONFIG = EnvConfig(teams=(0, 0, 1, 1), obs_type="vector", discrete_actions=True)
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
    for wrong, first in (
        ("cone_dept", "cone_depth"),
        ("max_episode_lenght", "max_episode_length"),
        ("xyz", None),
    ):
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
    # the map sets and maps, then the map generators (a name each chooses too)
    assert len(listed) == len(set(listed)) == len(map_set_names()) + len(generator_names())


# ------------------------------------------------------------------------------------------
# Single game versus batch
# ------------------------------------------------------------------------------------------


def test_step_given_a_batched_state_says_use_v_step():
    env, states, _ = _batch()
    actions = jnp.zeros((B, N), jnp.int32)
    _raises(
        env.step,
        states,
        actions,
        jax.random.key(1),
        match=re.escape(f"this state is batched ({B} games); use v_step"),
    )


def test_step_autoreset_given_a_batched_state_says_use_v_step_autoreset():
    env, states, _ = _batch()
    expected = re.escape(f"this state is batched ({B} games); use v_step_autoreset")
    _raises(
        env.step_autoreset, states, jnp.zeros((B, N), jnp.int32), jax.random.key(1), match=expected
    )


@pytest.mark.parametrize("method", ["v_step", "v_step_autoreset"])
def test_v_step_given_a_single_state_says_use_step(method):
    env, states, _ = _batch()
    fn = getattr(env, method)
    _raises(
        fn,
        _one(states),
        jnp.zeros((N,), jnp.int32),
        jax.random.key(1),
        match="this state is a single game .*; use step",
    )


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
    _raises(
        other.step,
        _one(states),
        jnp.zeros((2,), jnp.int32),
        jax.random.key(1),
        match="state holds 4 agents per game but this game has 2",
    )


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
