"""Inputs that used to be accepted and then misbehaved (issue 52): each is now refused before
any compute, with a message naming the input, the value given and what is expected.

The table of every input is in docs/development.md, "Inputs and their checks"; these tests
are the rows that had no check before.
"""

from __future__ import annotations

import re

import pytest

import gigastep
from gigastep.game.maps import MapSpec
from gigastep.game.types import INT32_MAX, MAX_MAGNITUDE, NON_NEGATIVE_DYNAMICS, RESOLUTION_MAX
from gigastep.types import EnvConfig

TEAMS = (0, 0, 1, 1)


# ------------------------------------------------------------------------------------------
# EnvConfig: magnitudes whose float32 arithmetic would overflow
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["limit_x", "min_speed", "drag", "gravity", "reward_game_won"])
@pytest.mark.parametrize("value", [1e7, 1e30, 3.5e38])
def test_a_float_field_beyond_the_float32_safe_range_is_refused(field, value):
    with pytest.raises(ValueError, match=f"{field} must be within"):
        EnvConfig(teams=TEAMS, **{field: value})


def test_a_float_field_at_the_bound_is_accepted():
    assert EnvConfig(teams=TEAMS, limit_x=MAX_MAGNITUDE).limit_x == 1e6


@pytest.mark.parametrize(("field", "value"), [("limit_x", 1e-300), ("dt", 1e-9), ("z_max", 5e-7)])
def test_a_positive_field_too_small_for_float32_is_refused(field, value):
    # 1e-300 is 0 in float32; 1e-9 as a time step makes limit / dt exceed 1e9 steps per world
    with pytest.raises(ValueError, match=f"{field} must be at least 1e-06"):
        EnvConfig(teams=TEAMS, **{field: value})
    assert getattr(EnvConfig(teams=TEAMS, **{field: 1e-6}), field) == 1e-6


@pytest.mark.parametrize("field", ["max_health", "detection_range", "thrust", "idle_reward"])
def test_a_per_agent_number_beyond_the_float32_safe_range_is_refused(field):
    with pytest.raises(ValueError, match=f"{field} must be within"):
        EnvConfig(teams=TEAMS, **{field: (1.0, 1.0, 1.0, 1e9)})


@pytest.mark.parametrize("field", NON_NEGATIVE_DYNAMICS)
def test_a_negative_dynamics_constant_is_refused(field):
    with pytest.raises(ValueError, match=f"{field} must be >= 0, got -1.0"):
        EnvConfig(teams=TEAMS, **{field: -1.0})


@pytest.mark.parametrize("field", ["max_episode_length", "max_tracking_steps", "reset_max_rounds"])
def test_a_count_beyond_int32_is_refused(field):
    with pytest.raises(ValueError, match=f"{field} must be at most 2\\*\\*31 - 1"):
        EnvConfig(teams=TEAMS, **{field: INT32_MAX + 1})


def test_a_count_of_exactly_int32_max_is_accepted():
    assert EnvConfig(teams=TEAMS, max_episode_length=INT32_MAX).max_episode_length == INT32_MAX


@pytest.mark.parametrize("res", [(RESOLUTION_MAX + 1, 84), (84, 100_000)])
def test_a_resolution_above_the_maximum_is_refused(res):
    with pytest.raises(ValueError, match=f"at most {RESOLUTION_MAX}"):
        EnvConfig(teams=TEAMS, resolution_x=res[0], resolution_y=res[1])


@pytest.mark.parametrize("sprite", [1.5, True])
def test_a_sprite_that_is_not_an_integer_is_refused_not_rounded(sprite):
    with pytest.raises(TypeError, match="sprites must hold integer bit masks"):
        EnvConfig(teams=TEAMS, sprites=(1, 1, 1, sprite))


def test_an_integral_float_sprite_is_accepted_as_its_integer():
    assert EnvConfig(teams=TEAMS, sprites=(1, 2.0, 4, 7)).sprites == (1, 2, 4, 7)


@pytest.mark.parametrize("lifetime", [(10.0, 5.0), (-1.0, 5.0), (1.0, 1e9)])
def test_a_waypoint_lifetime_not_ordered_or_negative_is_refused(lifetime):
    with pytest.raises(ValueError, match="waypoint_lifetime"):
        EnvConfig(teams=TEAMS, waypoint_lifetime=lifetime)


def test_a_map_starting_agents_above_the_ceiling_is_refused():
    high = MapSpec("high", height=(2.0, 8.0))
    with pytest.raises(ValueError, match=re.escape("map 'high' starts agents at heights")):
        EnvConfig(teams=TEAMS, maps=(high,), z_max=5.0)
    assert EnvConfig(teams=TEAMS, maps=(high,), z_max=8.0).z_max == 8.0


# ------------------------------------------------------------------------------------------
# Maps and scenario files: start regions inside the world
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "region", [(-1.0, 1.0, 4.0, 9.0), (1.0, 1.0, 11.0, 9.0), (6.0, 1.0, 9.0, 12.5)]
)
def test_a_start_region_outside_the_reference_world_is_refused(region):
    with pytest.raises(ValueError, match="lies outside the world"):
        MapSpec("out", start_team0=region)


def test_a_scenario_file_whose_start_region_lies_outside_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "outside.toml"
    path.write_text(
        "[maps.far]\nstart_team0 = [1.0, 1.0, 4.0, 9.0]\nstart_team1 = [6.0, 1.0, 19.0, 9.0]\n"
        "[scenarios.s]\nteam0 = { default = 1 }\nteam1 = { default = 1 }\nmap = 'far'\n"
    )
    with pytest.raises(ValueError, match="lies outside the world") as err:
        gigastep.make(str(path))
    assert str(path) in str(err.value)


# ------------------------------------------------------------------------------------------
# make(): overrides that build a game no one can win
# ------------------------------------------------------------------------------------------


def test_a_make_override_that_empties_a_team_is_refused():
    with pytest.raises(ValueError, match="leave team 1 with no agents"):
        gigastep.make("identical_2_vs_2", teams=(0, 0, 0, 0))


def test_a_single_team_config_built_directly_stays_allowed():
    assert EnvConfig(teams=(0,)).team_sizes == (1, 0)


# ------------------------------------------------------------------------------------------
# Actions given as plain Python lists
# ------------------------------------------------------------------------------------------

DISC = EnvConfig(teams=TEAMS, obs_type="vector", discrete_actions=True, map_set="empty")


def _state(config):
    from gigastep.types import EnvState

    return EnvState.create(config, x=[1.0, 1.0, 9.0, 9.0], y=[2.0, 8.0, 2.0, 8.0])


def test_a_python_list_of_actions_steps_as_the_array_would():
    import jax
    import numpy as np

    from gigastep.env import GigastepEnv

    env, state, key = GigastepEnv(DISC), _state(DISC), jax.random.key(1)
    by_list = env.step(state, [0, 13, 26, 5], key)
    by_array = env.step(state, np.array([0, 13, 26, 5], np.int32), key)
    for a, b in zip(
        jax.tree_util.tree_leaves(by_list), jax.tree_util.tree_leaves(by_array), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "actions, message",
    [
        ([[0, 1], [2]], "must be rectangular"),
        (["a", "b", "c", "d"], "must hold numbers"),
        ([0.0, 1.0, 2.0, 3.0], re.escape("discrete actions must be integers of shape (4,)")),
        ([0, 1, 2], re.escape("of shape (4,)")),
    ],
)
def test_a_bad_python_list_of_actions_is_one_clear_value_error(actions, message):
    import jax

    from gigastep.env import GigastepEnv

    with pytest.raises(ValueError, match=message):
        GigastepEnv(DISC).step(_state(DISC), actions, jax.random.key(1))


def test_v_step_converts_a_python_list_of_actions_before_checking_the_batch():
    import jax

    from gigastep.env import GigastepEnv

    env = GigastepEnv(DISC)
    states = jax.tree_util.tree_map(lambda x: x[None], _state(DISC))
    keys = jax.random.split(jax.random.key(0), 1)
    with pytest.raises(ValueError, match="states hold 1 games but actions hold 2"):
        env.v_step(states, [[0, 0, 0, 0], [0, 0, 0, 0]], keys)


# ------------------------------------------------------------------------------------------
# Seeds: a PRNG key keeps 32 bits, so a seed outside 0..2**32 - 1 aliases one inside
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_check_seed_refuses_a_seed_that_would_alias_another(seed):
    from gigastep._util.checks import check_seed

    with pytest.raises(ValueError, match=f"would play the games of seed {seed % 2**32}"):
        check_seed(seed)


@pytest.mark.parametrize("seed", [1.0, "3", True])
def test_check_seed_refuses_a_non_integer(seed):
    from gigastep._util.checks import check_seed

    with pytest.raises(TypeError, match="seed must be an integer in 0..4294967295"):
        check_seed(seed)


def test_torch_vec_env_refuses_an_aliasing_seed_at_construction():
    pytest.importorskip("torch")
    from gigastep.adapters.torch import TorchVecEnv

    with pytest.raises(ValueError, match="seed must be in 0..2\\*\\*32 - 1"):
        TorchVecEnv(DISC, 2, seed=2**32)


def test_pettingzoo_reset_refuses_an_aliasing_seed():
    pytest.importorskip("pettingzoo")
    from gigastep.adapters.pettingzoo import parallel_env

    with pytest.raises(ValueError, match="seed must be in 0..2\\*\\*32 - 1"):
        parallel_env(DISC).reset(seed=-5)


# ------------------------------------------------------------------------------------------
# TorchVecEnv.restore: a snapshot handed back by the user
# ------------------------------------------------------------------------------------------


def _snapshot(venv, nan: bool = False):
    import jax
    import torch

    from gigastep.adapters.torch import _reset

    shapes = jax.eval_shape(lambda: _reset(venv.game, venv.num_envs, venv._key, venv.window)[2])
    leaves = [
        torch.zeros(s.shape, dtype=getattr(torch, str(s.dtype)))
        for s in jax.tree_util.tree_leaves(shapes)
    ]
    if nan:  # every position, speed and heading (and health): (games, agents) floats
        for leaf in leaves:
            if leaf.shape == (2, 4) and leaf.is_floating_point():
                leaf[...] = float("nan")
    return {"key": torch.zeros(2, dtype=torch.int64), "states": leaves, "last_obs": None}


def test_restore_refuses_a_snapshot_with_non_finite_positions():
    pytest.importorskip("torch")
    from gigastep.adapters.torch import TorchVecEnv

    venv = TorchVecEnv(DISC, 2)
    with pytest.raises(ValueError, match="TorchVecEnv.restore: .* of game 0, agent 0 is nan"):
        venv.restore(_snapshot(venv, nan=True))


@pytest.mark.parametrize("part", ["key", "states"])
def test_restore_refuses_a_malformed_key_or_state_list(part):
    pytest.importorskip("torch")
    import torch

    from gigastep.adapters.torch import TorchVecEnv

    venv = TorchVecEnv(DISC, 2)
    snap = _snapshot(venv)
    snap[part] = torch.zeros(3) if part == "key" else tuple(snap["states"])
    with pytest.raises((TypeError, ValueError), match=f"the snapshot's {part} must be"):
        venv.restore(snap)


# ------------------------------------------------------------------------------------------
# The gigastep command: numbers that were rounded, overflowed or divided by zero
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--fps", "inf", "expected frames per second in [0.01, 1000]"),
        ("--fps", "1e-300", "expected frames per second in [0.01, 1000]"),
        ("--fps", "0", "expected frames per second in [0.01, 1000]"),
        ("--fps", "nan", "expected frames per second in [0.01, 1000]"),
        ("--seed", "99999999999999999999999", "expected an integer seed in 0..4294967295"),
        ("--seed", "-1", "expected an integer seed in 0..4294967295"),
        ("--seed", "1.5", "expected an integer seed in 0..4294967295"),
        ("--steps", "2.5", "expected a positive integer, got '2.5'"),
        ("--scale", "0", "expected a positive integer, got '0'"),
    ],
)
def test_a_bad_number_for_render_exits_2_naming_the_option_before_any_compute(
    tmp_path, capsys, option, value, message
):
    from gigastep.cli import main

    out = tmp_path / "x.gif"
    assert main(["render", "identical_2_vs_2", "--out", str(out), option, value]) == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {message}" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "option, value", [("--games", "2.5"), ("--games", "-3"), ("--batch", "0"), ("--seed", "-3")]
)
def test_a_bad_number_for_eval_exits_2_naming_the_option(capsys, option, value):
    from gigastep.cli import main

    assert main(["eval", "random", "random", option, value]) == 2
    assert f"argument {option}:" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# EnvConfig: dynamics constants whose speed update overflows float32 (found by
# tests/api/test_config_properties.py: dt 1e6, throttle_rate 4e5, drag 2.5e5 gave inf)
# ------------------------------------------------------------------------------------------


def test_dynamics_whose_drag_step_overshoots_are_refused_naming_dt_and_drag():
    with pytest.raises(ValueError, match=r"dt \(1e\+06\) x drag \(246657\)"):
        EnvConfig(teams=TEAMS, dt=1e6, throttle_rate=443688.0, drag=246657.0)


def test_the_default_dynamics_are_far_inside_the_speed_bound():
    # top speed: max(1.3, sqrt(1.5 x 1 / 0.4) + sqrt(0.5 x 9.81 x 10)) + 0.1 x 1.5 = 9.1;
    # 0.1 x 0.4 x 9.1 = 0.36 <= 2
    EnvConfig(teams=TEAMS)
    # dt 0.35: 0.35 x 0.4 x (1.94 + 7.0 + 0.525) = 1.33 <= 2 (|v2| <= v1: no growth)
    EnvConfig(teams=TEAMS, dt=0.35)
    # 10 x as fast a clock: 1.0 x 0.4 x (1.94 + 7.0 + 1.5) = 4.2 > 2
    with pytest.raises(ValueError, match="it must be <= 2"):
        EnvConfig(teams=TEAMS, dt=1.0)


def test_without_drag_a_speed_that_grows_past_1e15_is_refused():
    # gain 1.0 x 1e6 x 1 = 1e6 per step; 1e6 x (2**31 - 1) steps (no limit) = 2.1e15 > 1e15
    with pytest.raises(ValueError, match="without drag the speed grows"):
        EnvConfig(teams=TEAMS, dt=1.0, drag=0.0, throttle_rate=1e6, max_episode_length=None)
    # 500 steps: 1e6 x 500 = 5e8
    EnvConfig(teams=TEAMS, dt=1.0, drag=0.0, throttle_rate=1e6, max_episode_length=500)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--device", "gpu"], "argument --device: expected a torch device: cpu, cuda or cuda:K"),
        (["--agents", "-1"], "agents [-1] do not exist: this game has agents 0..3"),
        (["--policy", "nobody"], "unknown player 'nobody'"),
        (["--opponent", "nobody"], "unknown player 'nobody'"),
    ],
)
def test_a_bad_device_agent_or_player_for_render_is_refused_before_any_compute(
    tmp_path, capsys, argv, message
):
    from gigastep.cli import main

    out = tmp_path / "x.gif"
    assert main(["render", "identical_2_vs_2", "--out", str(out), "--steps", "1", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "random", "random", "--max-steps", "0"], "argument --max-steps: expected a"),
        (["eval", "random", "random", "--device", "tpu"], "argument --device: expected a"),
        (["view", "identical_2_vs_2", "--max-frames", "0"], "argument --max-frames: expected a"),
        (["league", "random", "pursuit", "--out", "x", "--batch", "2.5"], "argument --batch"),
        (["play", "identical_2_vs_2", "--teammates", "nobody"], "unknown player 'nobody'"),
    ],
)
def test_other_commands_refuse_a_bad_option_naming_it(capsys, monkeypatch, argv, message):
    from gigastep.cli import main

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    assert main(argv) == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# States handed to the views: a state of another scenario, or the wrong batch form
# ------------------------------------------------------------------------------------------


def test_state_vector_refuses_a_state_of_another_scenario():
    # before: a 4-agent state gave a 2-agent game's state vector of 23 numbers, silently
    from gigastep.env import GigastepEnv

    two = GigastepEnv(EnvConfig(teams=(0, 1), obs_type="vector", discrete_actions=True))
    with pytest.raises(ValueError, match="state holds 4 agents per game but this game has 2"):
        two.state_vector(_state(DISC))


@pytest.mark.parametrize(
    "method, batched, message",
    [
        ("state_vector", True, "use v_state_vector"),
        ("global_view", True, "use v_global_view"),
        ("v_state_vector", False, "use state_vector for one game"),
        ("v_global_view", False, "use global_view for one game"),
    ],
)
def test_the_views_name_the_form_for_a_single_or_batched_state(method, batched, message):
    import jax

    from gigastep.env import GigastepEnv

    state = _state(DISC)
    if batched:
        state = jax.tree_util.tree_map(lambda x: x[None].repeat(2, 0), state)
    with pytest.raises(ValueError, match=message):
        getattr(GigastepEnv(DISC), method)(state)


def test_reset_done_episodes_refuses_states_of_another_scenario():
    import jax
    import jax.numpy as jnp

    from gigastep.env import GigastepEnv

    two = GigastepEnv(EnvConfig(teams=(0, 1), obs_type="vector", discrete_actions=True))
    states = jax.tree_util.tree_map(lambda x: x[None], _state(DISC))
    with pytest.raises(ValueError, match="states holds 4 agents per game but this game has 2"):
        two.reset_done_episodes(None, states, jnp.zeros(1, bool), jax.random.key(1))
