"""Inputs that used to be accepted and then misbehaved (issue 52): each is now refused before
any compute, with a message naming the input, the value given and what is expected.

The table of every input is in docs/development.md, "Inputs and their checks"; these tests
are the rows that had no check before.
"""

from __future__ import annotations

import math
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
