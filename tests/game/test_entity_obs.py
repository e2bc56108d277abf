"""The entity observation (rules §5.5), one rule per test.

Most tests call `entity_observations` on hand-built states with a hand-chosen `seen` matrix
(which agents each ego sees), so every expected value is computed by hand from the layout:
rows of 25 features (present, is_self, is_ally, is_enemy, is_box, is_waypoint, forward / S,
left / S, up / z_max, distance / S, cos and sin bearing, cos and sin relative heading,
speed / diag, health / max_health, 3 sprite bits, detection_range, damage_range, thrust,
max_health, half width / S, half depth / S) with S = max(limit_x, limit_y). The visibility
rule itself is checked against the vector observation through the environment.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gigastep
from gigastep.game.arena import map_arrays
from gigastep.game.observations.entity import COLUMNS, entity_groups, entity_observations
from gigastep.game.types import EnvConfig, EnvState

C = {name: i for i, name in enumerate(COLUMNS)}
F = len(COLUMNS)
ATOL = 1e-6
_entity_observations = jax.jit(entity_observations, static_argnums=0)


def _config(**fields) -> EnvConfig:
    base = dict(
        teams=(0, 1),
        obs_type="entity",
        map_set="empty",
        stochastic_obs=False,
        stochastic_comm=False,
        entity_max_allies=2,
        entity_max_enemies=2,
    )
    base.update(fields)
    return EnvConfig(**base)


def _observe(config: EnvConfig, seen=None, **state_fields) -> dict[str, np.ndarray]:
    """The entity groups of every ego of a hand-built state; `seen` defaults to everyone alive
    seeing everyone alive."""
    state = EnvState.create(config, **state_fields)
    n = config.n_agents
    alive = np.asarray(state.agents.alive)
    if seen is None:
        seen = alive[:, None] & alive[None, :]
    maps = map_arrays(config)
    obs = _entity_observations(
        config,
        state.agents,
        state.episode,
        jnp.asarray(seen, bool),
        jnp.asarray(maps.boxes)[state.episode.map_idx],
        jnp.asarray(maps.box_valid)[state.episode.map_idx],
    )
    assert obs.shape == (n, config.entity_size) and obs.dtype == jnp.float32
    return {k: np.asarray(v) for k, v in entity_groups(config, obs).items()}


# ------------------------------------------------------------------------------------------
# Geometry in the ego's frame
# ------------------------------------------------------------------------------------------


def test_an_enemy_straight_ahead_at_distance_2():
    # ego 0 at (5, 5) heading 0; enemy 1 at (7, 5): forward 2, left 0, S = 10
    g = _observe(_config(), x=[5.0, 7.0], y=[5.0, 5.0])
    row = g["enemies"][0, 0]
    assert row[C["present"]] == 1 and row[C["is_enemy"]] == 1 and row[C["is_ally"]] == 0
    np.testing.assert_allclose(
        row[[C["forward"], C["left"], C["up"], C["distance"]]], [0.2, 0.0, 0.0, 0.2], atol=ATOL
    )
    assert (row[C["cos_bearing"]], row[C["sin_bearing"]]) == (1.0, 0.0)


def test_an_enemy_to_the_left_of_a_north_facing_ego():
    # ego heading pi/2 (facing +y); enemy at (2, 5) from the ego at (5, 5): world dx = -3,
    # which is 3 to the ego's left (forward 0, left 0.3, bearing +pi/2)
    g = _observe(_config(), x=[5.0, 2.0], y=[5.0, 5.0], heading=[math.pi / 2, 0.0])
    row = g["enemies"][0, 0]
    np.testing.assert_allclose(row[[C["forward"], C["left"]]], [0.0, 0.3], atol=ATOL)
    np.testing.assert_allclose(row[[C["cos_bearing"], C["sin_bearing"]]], [0.0, 1.0], atol=ATOL)
    np.testing.assert_allclose(row[C["distance"]], 0.3, atol=ATOL)


def test_an_enemy_facing_the_ego_has_relative_heading_cosine_minus_one():
    # ego heading 0, enemy heading pi (the reset's head-on start): cos = -1 exactly, no wrap
    g = _observe(_config(), x=[3.0, 7.0], y=[5.0, 5.0], heading=[0.0, math.pi])
    row = g["enemies"][0, 0]
    assert row[C["cos_heading"]] == -1.0
    assert abs(row[C["sin_heading"]]) < 1e-6
    # and the same seen from the other side: heading pi against 0 (a difference of -pi)
    other = g["enemies"][1, 0]
    assert other[C["cos_heading"]] == -1.0 and abs(other[C["sin_heading"]]) < 1e-6


def test_headings_just_either_side_of_the_wrap_are_close():
    # relative headings pi - 0.01 and -pi + 0.01 differ by 0.02 rad, not by 2 pi
    g = _observe(
        _config(teams=(0, 1, 1)),
        x=[5.0, 7.0, 7.0],
        y=[5.0, 5.5, 4.0],
        heading=[0.0, math.pi - 0.01, -math.pi + 0.01],
    )
    a, b = g["enemies"][0, 0], g["enemies"][0, 1]
    cols = [C["cos_heading"], C["sin_heading"]]
    np.testing.assert_allclose(
        a[cols], [math.cos(math.pi - 0.01), math.sin(math.pi - 0.01)], atol=ATOL
    )
    np.testing.assert_allclose(np.abs(a[cols] - b[cols]).max(), 2 * math.sin(0.01), atol=ATOL)


def test_altitude_speed_health_and_type_features_of_another_agent():
    # enemy 1: z 4 vs ego z 1 (up 3 / z_max 10), speed 2 / diag sqrt(200), health 1.5 of 2,
    # sprite 5 = dot + diagonals, type table (0.5, 2, 1.5, 2)
    config = _config(
        sprites=(1, 5),
        max_health=(1.0, 2.0),
        detection_range=(1.0, 0.5),
        damage_range=(1.0, 2.0),
        thrust=(1.0, 1.5),
    )
    g = _observe(config, x=[5.0, 6.0], y=[5.0, 5.0], z=[1.0, 4.0], v=[1.0, 2.0], health=[1, 1.5])
    row = g["enemies"][0, 0]
    np.testing.assert_allclose(row[C["up"]], 0.3, atol=ATOL)
    np.testing.assert_allclose(row[C["speed"]], 2 / math.sqrt(200), atol=ATOL)
    np.testing.assert_allclose(row[C["health"]], 0.75, atol=ATOL)
    names = ["sprite_dot", "sprite_plus", "sprite_diagonal", "detection_range", "damage_range"]
    np.testing.assert_allclose(row[[C[k] for k in names]], [1, 0, 1, 0.5, 2.0], atol=ATOL)
    np.testing.assert_allclose(row[[C["thrust"], C["max_health"]]], [1.5, 2.0], atol=ATOL)


def test_the_self_row_holds_position_heading_speed_and_health_in_the_world_frame():
    config = _config(limit_x=20.0, limit_y=10.0, max_health=(2.0, 1.0))
    g = _observe(
        config,
        x=[5.0, 6.0],
        y=[2.5, 5.0],
        z=[3.0, 0.0],
        v=[1.5, 1.0],
        heading=[math.pi / 2, 0.0],
        health=[0.5, 1.0],
    )
    row = g["self"][0, 0]
    assert row[C["present"]] == 1 and row[C["is_self"]] == 1
    # x / limit_x, y / limit_y, z / z_max; heading pi/2 as (cos, sin); speed / sqrt(500)
    want = {
        "forward": 0.25,
        "left": 0.25,
        "up": 0.3,
        "cos_heading": 0.0,
        "sin_heading": 1.0,
        "speed": 1.5 / math.sqrt(500),
        "health": 0.25,
        "distance": 0.0,
        "cos_bearing": 0.0,
    }
    np.testing.assert_allclose(row[[C[k] for k in want]], list(want.values()), atol=ATOL)


def test_positions_scale_by_the_larger_side_of_the_arena():
    # 20 x 10 world: S = 20 on both axes, so 2 ahead is 0.1 whichever way the ego faces
    config = _config(limit_x=20.0, limit_y=10.0)
    east = _observe(config, x=[5.0, 7.0], y=[5.0, 5.0])["enemies"][0, 0]
    north = _observe(config, x=[5.0, 5.0], y=[5.0, 7.0], heading=[math.pi / 2, 0.0])
    np.testing.assert_allclose(east[C["forward"]], 0.1, atol=ATOL)
    np.testing.assert_allclose(north["enemies"][0, 0][C["forward"]], 0.1, atol=ATOL)


def test_rotating_the_world_about_the_ego_changes_only_its_world_heading():
    # agents around an ego at the centre; rotate every position and heading by 1.1 rad
    config = _config(teams=(0, 0, 1, 1, 1), entity_max_allies=3, entity_max_enemies=3)
    x = np.array([5.0, 6.0, 3.0, 5.5, 7.0])
    y = np.array([5.0, 7.0, 4.0, 2.0, 6.0])
    z = np.array([2.0, 3.0, 1.0, 2.5, 4.0])
    h = np.array([0.3, -2.0, 2.5, 1.0, -0.5])
    a = 1.1
    c, s = math.cos(a), math.sin(a)
    xr = 5.0 + c * (x - 5.0) - s * (y - 5.0)
    yr = 5.0 + s * (x - 5.0) + c * (y - 5.0)
    hr = (h + a + math.pi) % (2 * math.pi) - math.pi
    g0 = _observe(config, x=x, y=y, z=z, heading=h)
    g1 = _observe(config, x=xr, y=yr, z=z, heading=hr)
    for group in ("allies", "enemies"):
        np.testing.assert_allclose(g0[group][0], g1[group][0], atol=1e-5)
    world = [C["cos_heading"], C["sin_heading"]]
    rest = [i for i in range(F) if i not in world]
    np.testing.assert_allclose(g0["self"][0][:, rest], g1["self"][0][:, rest], atol=1e-6)
    np.testing.assert_allclose(g1["self"][0, 0, world], [math.cos(1.4), math.sin(1.4)], atol=1e-6)


# ------------------------------------------------------------------------------------------
# Slots, order and masks
# ------------------------------------------------------------------------------------------


def test_slots_hold_the_nearest_agents_first_and_drop_the_farthest():
    # ego 0 at (5, 5); enemies at distances 3, 1, 2 (agents 2, 3, 4); 2 enemy slots:
    # slot 0 agent 3 (d 1), slot 1 agent 4 (d 2); agent 2 (d 3) is left out
    config = _config(teams=(0, 0, 1, 1, 1))
    g = _observe(config, x=[5.0, 5.0, 8.0, 6.0, 5.0], y=[5.0, 9.0, 5.0, 5.0, 3.0])
    np.testing.assert_allclose(g["enemies"][0, :, C["distance"]], [0.1, 0.2], atol=ATOL)
    np.testing.assert_allclose(g["enemies"][0, 1, [C["forward"], C["left"]]], [0, -0.2], atol=ATOL)


def test_equal_distances_keep_agent_order():
    # enemies 1 and 2 both at distance 2: agent 1 (ahead) before agent 2 (behind)
    g = _observe(_config(teams=(0, 1, 1)), x=[5.0, 7.0, 3.0], y=[5.0, 5.0, 5.0])
    np.testing.assert_allclose(g["enemies"][0, :, C["forward"]], [0.2, -0.2], atol=ATOL)


def test_presence_masks_the_slots_without_an_agent():
    # 1 teammate and 1 enemy for 2 + 2 slots: presence (1, 0) in each group, empty rows zero
    config = _config(teams=(0, 0, 1))
    g = _observe(config, x=[5.0, 6.0, 7.0], y=[5.0, 5.0, 5.0])
    assert list(g["allies"][0, :, C["present"]]) == [1.0, 0.0]
    assert list(g["enemies"][0, :, C["present"]]) == [1.0, 0.0]
    assert not g["allies"][0, 1].any() and not g["enemies"][0, 1].any()
    assert g["allies"][0, 0, C["is_ally"]] == 1 and g["enemies"][0, 0, C["is_enemy"]] == 1


def test_more_slots_than_agents_pads_with_empty_rows():
    config = _config(entity_max_allies=3, entity_max_enemies=4)  # 1 vs 1
    g = _observe(config, x=[5.0, 6.0], y=[5.0, 5.0])
    assert g["allies"].shape == (2, 3, F) and not g["allies"].any()
    assert list(g["enemies"][0, :, C["present"]]) == [1, 0, 0, 0]


def test_an_unseen_enemy_is_an_empty_slot():
    seen = np.array([[True, False], [False, True]])  # each ego sees only itself
    g = _observe(_config(), seen=seen, x=[5.0, 6.0], y=[5.0, 5.0])
    assert not g["enemies"].any()
    assert g["self"][0, 0, C["present"]] == 1


def test_a_dead_agent_is_an_empty_slot():
    config = _config(teams=(0, 0, 1))
    g = _observe(config, x=[5.0, 6.0, 7.0], y=[5.0, 5.0, 5.0], alive=[True, True, False])
    assert not g["enemies"][0].any()
    assert g["allies"][0, 0, C["present"]] == 1


def test_a_dead_ego_observes_all_zeros():
    config = _config(teams=(0, 0, 1))
    seen = np.ones((3, 3), bool)  # even if it were told what others see
    g = _observe(config, seen=seen, x=[5.0, 6.0, 7.0], y=[5.0, 5.0, 5.0], alive=[False, True, True])
    assert all(not g[k][0].any() for k in g)
    assert g["self"][1, 0, C["present"]] == 1


def test_the_size_does_not_depend_on_the_team_sizes():
    # 3 vs 3 and 5 vs 5 with the same slots: (1 + 4 + 8) rows of 25
    three = _config(teams=(0,) * 3 + (1,) * 3, entity_max_allies=4, entity_max_enemies=8)
    five = _config(teams=(0,) * 5 + (1,) * 5, entity_max_allies=4, entity_max_enemies=8)
    assert three.entity_size == five.entity_size == (1 + 4 + 8) * F
    g3 = entity_groups(three, np.zeros((6, three.entity_size), np.float32))
    g5 = entity_groups(five, np.zeros((10, five.entity_size), np.float32))
    assert {k: v.shape[1:] for k, v in g3.items()} == {k: v.shape[1:] for k, v in g5.items()}
    g3 = _observe(three, x=np.linspace(1, 9, 6), y=np.full(6, 5.0))
    assert g3["allies"].shape == (6, 4, F) and g3["enemies"].shape == (6, 8, F)
    # the catalogue's scenarios likewise (2 vs 2 and 20 vs 20 with the default 8 + 8 slots)
    small = gigastep.make("identical_2_vs_2_fobs_ent_void_disc")
    large = gigastep.make("identical_20_vs_20_fobs_ent_void_disc")
    assert small.observation_space.shape == large.observation_space.shape == (17 * F,)


# ------------------------------------------------------------------------------------------
# Boxes and waypoint
# ------------------------------------------------------------------------------------------


def test_boxes_are_centre_nearest_distance_and_half_extents_nearest_first():
    # four_rooms on the 10 x 10 world: boxes [0, 4.8, 3, 5.2], [7, 4.8, 10, 5.2],
    # [4.8, 0, 5.2, 3], [4.8, 7, 5.2, 10]. Ego at (2, 2) heading pi/2 (facing +y):
    # box 0's centre (1.5, 5) is world (-0.5, 3) away -> forward 3, left 0.5; nearest point
    # (2, 4.8) at distance 2.8. Box 2's centre (5, 1.5): world (3, -0.5) -> forward -0.5,
    # left -3; nearest point (4.8, 2) at 2.8 too, so box 0 (lower index) comes first.
    config = _config(map_set="four_rooms")
    g = _observe(config, x=[2.0, 8.0], y=[2.0, 8.0], heading=[math.pi / 2, 0.0])
    boxes = g["boxes"][0]
    assert boxes.shape == (4, F) and list(boxes[:, C["present"]]) == [1, 1, 1, 1]
    assert list(boxes[:, C["is_box"]]) == [1, 1, 1, 1]
    cols = [C[k] for k in ("forward", "left", "distance", "half_width", "half_depth")]
    np.testing.assert_allclose(boxes[0, cols], [0.3, 0.05, 0.28, 0.15, 0.02], atol=ATOL)
    np.testing.assert_allclose(boxes[1, cols], [-0.05, -0.3, 0.28, 0.02, 0.15], atol=ATOL)
    # the far boxes: 1 at ((7 - 2)^2 + (4.8 - 2)^2)^0.5 = 5.73, 3 at the same by symmetry
    np.testing.assert_allclose(boxes[2:, C["distance"]], [math.hypot(5, 2.8) / 10] * 2, atol=ATOL)
    # the world x axis seen from an ego facing +y points to its right: angle -pi/2
    np.testing.assert_allclose(boxes[0, [C["cos_heading"], C["sin_heading"]]], [0, -1], atol=ATOL)


def test_padding_boxes_are_empty_slots():
    # maps of different box counts: the empty map pads all 4 of four_rooms' slots
    config = _config(maps=(gigastep.MapSpec(name="a"), *_config(map_set="four_rooms").maps))
    g = _observe(config, x=[2.0, 8.0], y=[2.0, 8.0], map_idx=0)
    assert g["boxes"].shape == (2, 4, F) and not g["boxes"].any()


def test_the_waypoint_row_appears_while_a_waypoint_is_active():
    # waypoint square [6, 4, 7, 5]: centre (6.5, 4.5), 1.5 ahead and 0.5 to the right of an
    # ego at (5, 5) heading 0; nearest point (6, 5) at distance 1; half side 0.05
    config = _config(enable_waypoints=True)
    common = dict(x=[5.0, 1.0], y=[5.0, 1.0], waypoint=[6.0, 4.0, 7.0, 5.0])
    on = _observe(config, **common, waypoint_time=2.0)["waypoint"][0, 0]
    cols = [C[k] for k in ("present", "is_waypoint", "forward", "left", "distance", "half_width")]
    np.testing.assert_allclose(on[cols], [1, 1, 0.15, -0.05, 0.1, 0.05], atol=ATOL)
    off = _observe(config, **common, waypoint_time=0.0)["waypoint"]
    assert not off.any()


# ------------------------------------------------------------------------------------------
# Through the environment
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rollout():
    """A few steps of a stochastic 2 vs 2 game observed as entities and as vectors, from the
    same keys (the observation type changes nothing else)."""
    out = {}
    for obs_type in ("entity", "vector"):
        env = gigastep.make(
            "identical_2_vs_2_pobs_vec_maps_disc",
            obs_type=obs_type,
            entity_max_allies=1,
            entity_max_enemies=2,
            max_agents_in_vec_obs=4,
            cone_depth=14.0,
            cone_angle=math.pi,
        )
        step = jax.jit(env.step)
        obs, state = env.reset(jax.random.key(3))
        seq = [obs]
        for t in range(20):
            a = jax.random.randint(jax.random.key(100 + t), (4,), 0, 27)
            obs, state, *_ = step(state, a, jax.random.key(200 + t))
            seq.append(obs)
        out[obs_type] = (env, np.stack([np.asarray(o) for o in seq]))
    return out


def test_each_ego_sees_the_same_agents_as_in_the_vector_observation(rollout):
    env, ent = rollout["entity"]
    _, vec = rollout["vector"]
    g = entity_groups(env.config, ent)
    rows = vec[..., : 4 * 9].reshape(*vec.shape[:2], 4, 9)  # 4 rows: every agent
    others = rows[..., 1:, :]
    seen_allies = (others[..., 0] * others[..., 1]).sum(-1)
    seen_enemies = (others[..., 0] * (1 - others[..., 1])).sum(-1)
    np.testing.assert_array_equal(g["allies"][..., 0].sum(-1), seen_allies)
    np.testing.assert_array_equal(g["enemies"][..., 0].sum(-1), seen_enemies)
    assert seen_enemies.sum() > 0  # the game sees some enemies: the check has teeth


def test_observations_stay_inside_the_observation_space(rollout):
    env, ent = rollout["entity"]
    space = env.observation_space
    assert np.all(ent >= space.low) and np.all(ent <= space.high)
    assert np.all(np.isfinite(ent))


def test_entity_groups_refuses_a_wrong_length():
    config = _config()
    with pytest.raises(ValueError, match=f"entity_size = {config.entity_size}"):
        entity_groups(config, np.zeros((2, 10), np.float32))


@pytest.mark.parametrize("field", ["entity_max_allies", "entity_max_enemies"])
@pytest.mark.parametrize("value", [-1, 1025])
def test_slot_counts_outside_0_to_1024_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        _config(**{field: value})


def test_a_batch_of_games_observes_what_each_game_observes_alone():
    env = gigastep.make("identical_2_vs_2_pobs_ent_maps_disc")
    keys = jax.random.split(jax.random.key(7), 3)
    batched, _ = env.v_reset(keys)
    assert batched.shape == (3, 4, env.config.entity_size)
    for i in range(3):
        alone, _ = env.reset(keys[i])
        np.testing.assert_allclose(batched[i], alone, atol=1e-6)
