"""`EnvConfig()`'s defaults pinned by literal values from rules: §1 (constructor defaults), §3.1
(dynamics constants), §0 (dt, z_max), §4.2 (waypoint spawn and lifetime), with §15's changes.

The NumPy reference (tests/reference.py) reads its constants from `EnvConfig`, so a wrong
default would be shared by the code and its reference; this file is the independent side.
Radii are stored as radii here (rules §1 lists the 2023 library's squared storage, e.g.
cone_depth 3.0 "stored squared (9)"; this project keeps the radius and squares where it is used).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from gigastep.types import EnvConfig

# field: (rules default, where it comes from)
SPEC_DEFAULTS = {
    # §0 conventions
    "dt": (0.1, "§0 dt = 0.1"),
    "z_max": (10.0, "§0 z_max = 10"),
    # §3.1 constants
    "heading_rate": (4.0, "§3.1 c_heading"),
    "dive_rate": (5.0, "§3.1 c_dive"),
    "dive_speed_exchange": (0.5, "§3.1 c_dive_throttle"),
    "throttle_rate": (1.5, "§3.1 c_throttle"),
    "min_speed": (1.3, "§3.1 v_min"),
    "gravity": (9.81, "§3.1 g"),
    "drag": (0.4, "§3.1 v_resistance"),
    # §1 sensing and combat
    "very_close_depth": (1.0, "§1 very_close_cone_depth"),
    "cone_depth": (3.0, "§1 cone_depth"),
    "cone_angle": (0.75 * math.pi, "§1 cone_angle"),
    "damage_cone_depth": (2.05, "§1 damage_cone_depth"),
    "damage_cone_angle": (math.pi / 4, "§1 damage_cone_angle"),
    "damage_per_second": (1.0, "§1 damage_per_second"),
    "min_tracking_steps": (3, "§1 min_tracking_time (steps, §15 row 23)"),
    "max_tracking_steps": (10, "§1 max_tracking_time (steps, §15 row 23)"),
    "healing_per_second": (0.1, "§1 healing_per_second"),
    "communication_range": (8.0, "§1 communication_range"),
    "stochastic_obs": (True, "§1 use_stochastic_obs"),
    "stochastic_comm": (True, "§1 use_stochastic_comm"),
    "collision_range": (0.4, "§1 collision_range"),
    "collision_altitude": (0.5, "§1 collision_altitude"),
    # §1 world and waypoints, §4.2
    "limit_x": (10.0, "§1 limit_x"),
    "limit_y": (10.0, "§1 limit_y"),
    "map_set": ("empty", "§1 maps"),
    "map_generator": (None, "§8.4: the maps of map_set unless a generator is chosen"),
    "enable_waypoints": (False, "§1 enable_waypoints"),
    "waypoint_size": (0.6, "§1 waypoint_size"),
    "waypoint_spawn_prob": (0.05, "§4.2 step 5: a 5% chance per step"),
    "waypoint_lifetime": ((5.0, 10.0), "§4.2 step 6: T ~ U[5, 10)"),
    # §1 rewards
    "reward_game_won": (10.0, "§1"),
    "reward_defeat_one_opponent": (100.0, "§1"),
    "reward_detection": (0.0, "§1"),
    "reward_damage": (0.0, "§1"),
    "reward_idle": (0.0, "§1"),
    "reward_agent_disabled": (0.0, "§1"),
    "reward_collision_agent": (0.0, "§1"),
    "reward_collision_obstacle": (0.0, "§1"),
    "reward_hit_waypoint": (0.0, "§1"),
    "divide_reward_by_team_size": (True, "§1 (by the agent's own team, §15 row 8)"),
    # §1 interface
    "obs_type": ("rgb", "§1"),
    "discrete_actions": (False, "§1"),
    "resolution_x": (84, "§1"),
    "resolution_y": (84, "§1"),
    "max_agents_in_vec_obs": (15, "§1 max_agent_in_vec_obs"),
    "entity_max_allies": (8, "§5.5: the entity observation, new in this library"),
    "entity_max_enemies": (8, "§5.5: the entity observation, new in this library"),
    "max_episode_length": (500, "§1"),
    "episode_ends_one_team_dead": (True, "§1"),
    "reset_max_rounds": (100, "§15 row 22: bounded; 10 left crowded starts in conflict"),
    # §1 agents, with §15 row 23 (team 0 first): 10 agents, 5 of each team
    "teams": ((0,) * 5 + (1,) * 5, "§1 n_agents = 10, per_agent_team with §15 row 23"),
    "sprites": ((1,) * 10, "§1 per_agent_sprites"),
    "max_health": ((1.0,) * 10, "§1 per_agent_max_health"),
    "detection_range": ((1.0,) * 10, "§1 per_agent_range"),
    "damage_range": ((1.0,) * 10, "§1 per_agent_damage_range"),
    "thrust": ((1.0,) * 10, "§1 per_agent_thrust"),
    "idle_reward": ((0.0,) * 10, "§1 per_agent_idle_reward"),
    "team_draw": (None, "rules, Absent agents: no draw, every agent plays every episode"),
}
# Fields that are not game constants: names shown by `gigastep info`, and the map objects
# (pinned by tests/game/test_map_data.py through `map_set`).
NOT_CONSTANTS = {"type_names", "maps"}


@pytest.mark.parametrize("field", list(SPEC_DEFAULTS))
def test_default_equals_spec(field):
    want, source = SPEC_DEFAULTS[field]
    got = getattr(EnvConfig(), field)
    if isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-12), source
    else:
        assert got == want, source


def test_every_config_field_is_pinned():
    """A new EnvConfig field needs its rules default here (or a reason in NOT_CONSTANTS)."""
    fields = {f.name for f in dataclasses.fields(EnvConfig)}
    assert fields == set(SPEC_DEFAULTS) | NOT_CONSTANTS


def test_default_map_set_is_the_two_empty_maps():
    assert [m.name for m in EnvConfig().maps] == ["empty", "empty_flipped"]
