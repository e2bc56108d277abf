"""Reset as rules: rules §6 with §15 rows 4, 22 and 23, one test per rule, named for it.

Each configuration is reset once over N_KEYS keys with one compiled `v_reset` (cached per
config); the rule tests read those batches. Expected start regions, boxes and heading ranges are
rules §8.1's literal values (tests/spec_maps.py), not the catalogue's.

Statistical tests (map choice, waypoint spawn) use fixed keys, so they are deterministic; each
has a false-alarm rate of 1e-4 (the probability that a correct library fails it for a fresh,
random set of keys), stated where it is used.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import gigastep
from gigastep import EnvConfig, GigastepEnv, MapSpec
from gigastep import env as genv
from gigastep.game import reset as game_reset
from tests import reference as ref
from tests.spec_maps import SPEC_MAPS, scaled

N_KEYS = 4096
FALSE_ALARM = 1e-4  # per statistical test
MARGIN = 0.1  # §15 row 22: the enlargement of the collision radius and of the boxes at reset
TOL = 1e-5

# rules §9.1 types per team: more_health, more_range, faster, super, default
SPECIAL_MAX_HEALTH = (3.0, 0.5, 1.0, 3.0, 1.0) * 2
# A user map: team 0's region overlaps a box, a height range, headings that wrap past pi.
USER_MAP = MapSpec(
    name="user_rooms",
    boxes=((2.0, 2.0, 2.5, 3.0), (6.0, 0.0, 7.0, 10.0)),
    start_team0=(1.0, 1.0, 3.5, 4.0),
    start_team1=(4.0, 6.0, 9.0, 9.0),
    height=(0.0, 1.5),
    heading_team0=(-3.0, 3.0),
    heading_team1=(2.5, 4.0),
)
USER_PLAIN = MapSpec(name="user_plain", start_team0=(1.0, 6.0, 4.0, 9.0), heading_team0=(0, 1))
USER_EMPTY = MapSpec(name="user_empty")

CONFIGS = {
    "all": EnvConfig(
        map_set="all", limit_x=20.0, limit_y=15.0, obs_type="vector", max_health=SPECIAL_MAX_HEALTH
    ),
    "user": EnvConfig(
        teams=(0,) * 6 + (1,) * 4,
        maps=(USER_MAP, USER_PLAIN, USER_EMPTY),
        obs_type="vector",
        collision_altitude=0.3,
    ),
    "empty": EnvConfig(obs_type="vector"),
    # The most crowded start of the catalogue, with its default rounds: 20 agents in a band of
    # 8 x 2 (with 10 rounds, 9% of its games started with a close pair).
    "crowded": gigastep.make("identical_20_vs_5_fobs_vec_void_disc").config,
}
CONFIGS["user_first_draw"] = CONFIGS["user"].replace(reset_max_rounds=0)


@functools.cache
def resets(name: str, n_keys: int = N_KEYS, seed: int = 0):
    """The states of `v_reset` over n_keys keys, as NumPy arrays (one compile per config)."""
    keys = jax.random.split(jax.random.key(seed), n_keys)
    _, states = GigastepEnv(CONFIGS[name]).v_reset(keys)
    return jax.tree_util.tree_map(np.asarray, states)


def start_of(config: EnvConfig, spec_row, team: int):
    """(region, heading range) of a team from a rules §8.1 row, region scaled to the world."""
    _, start0, start1, _, heading0, heading1 = spec_row
    region = start0 if team == 0 else start1
    return scaled(region, config.limit_x, config.limit_y), (heading0 if team == 0 else heading1)


def inside(x, y, rect, margin=0.0):
    x1, y1, x2, y2 = rect
    return (x > x1 - margin) & (x < x2 + margin) & (y > y1 - margin) & (y < y2 + margin)


def in_closed(x, y, rect):
    x1, y1, x2, y2 = rect
    return (x >= x1 - TOL) & (x <= x2 + TOL) & (y >= y1 - TOL) & (y <= y2 + TOL)


def user_rows(config: EnvConfig):
    """The user maps as rows shaped like SPEC_MAPS'."""
    return [
        (m.boxes, m.start_team0, m.start_team1, m.height, m.heading_team0, m.heading_team1)
        for m in config.maps
    ]


def rows_of(name: str):
    config = CONFIGS[name]
    if name == "all":
        return config, [SPEC_MAPS[m.name] for m in config.maps]
    return config, user_rows(config)


def close_pairs(config: EnvConfig, a, margin: float):
    """(B, n, n) bool: pairs i != j closer than collision_range + margin in the plane and
    collision_altitude + margin in altitude (float64 from the float32 positions)."""
    x, y, z = (np.asarray(v, np.float64) for v in (a.x, a.y, a.z))
    d = np.hypot(x[:, :, None] - x[:, None, :], y[:, :, None] - y[:, None, :])
    dz = np.abs(z[:, :, None] - z[:, None, :])
    close = (d < config.collision_range + margin - TOL) & (
        dz < config.collision_altitude + margin - TOL
    )
    return close & ~np.eye(config.n_agents, dtype=bool)


def in_boxes(name: str, states, margin: float):
    """(B, n) bool: agents strictly inside a box of their game's map, enlarged by margin."""
    config, rows = rows_of(name)
    a, idx = states.agents, states.episode.map_idx
    hit = np.zeros(a.x.shape, bool)
    for k, row in enumerate(rows):
        for box in row[0]:
            rect = scaled(box, config.limit_x, config.limit_y)
            hit |= (idx == k)[:, None] & inside(a.x, a.y, rect, margin - TOL)
    return hit


# --- health and the other initial values (§6.4 with §15 row 23) ----------------------------


def test_agents_start_at_their_own_max_health():
    """§15 row 23: every agent starts at its own max_health (3, 0.5, 1, 3, 1 per team here),
    not at 1 and not at min(max_health, 1) as in 2023."""
    health = resets("all").agents.health
    assert len(set(SPECIAL_MAX_HEALTH)) == 3 and max(SPECIAL_MAX_HEALTH) > 1 > min(
        SPECIAL_MAX_HEALTH
    )
    np.testing.assert_array_equal(health, np.broadcast_to(SPECIAL_MAX_HEALTH, health.shape))


def test_agents_start_alive_at_speed_1_without_locks_and_the_episode_fresh():
    """§6.4: v = 1, alive, tracked = 0; no waypoint, aux factor 1, step 0, returns 0."""
    s = resets("all")
    assert (s.agents.v == 1.0).all() and s.agents.alive.all() and (s.agents.tracked == 0).all()
    ep = s.episode
    assert (ep.waypoint == 0).all() and (ep.waypoint_time == 0).all()
    assert (ep.aux_rewards_factor == 1).all() and (ep.step == 0).all() and (ep.returns == 0).all()


# --- start regions and headings (§6.2 with §15 rows 3, 22, 23) -------------------------------


@pytest.mark.parametrize("map_name", list(SPEC_MAPS))
def test_each_team_starts_inside_its_start_region_on_builtin_map(map_name):
    """Team 0 inside start_team0 and team 1 inside start_team1 (rules §8.1 values scaled to a
    20 x 15 world, §8.2), at the map's height (0 for every built-in map)."""
    config, rows = rows_of("all")
    s = resets("all")
    k = [m.name for m in config.maps].index(map_name)
    games = s.episode.map_idx == k
    assert games.sum() > 100
    a = jax.tree_util.tree_map(lambda v: v[games], s.agents)
    for team in (0, 1):
        members = np.asarray(config.teams) == team
        region, _ = start_of(config, rows[k], team)
        assert in_closed(a.x[:, members], a.y[:, members], region).all(), (map_name, team)
    assert (a.z == 0).all()


def test_each_team_starts_inside_its_start_region_on_a_user_map():
    config, rows = rows_of("user")
    s = resets("user")
    teams = np.asarray(config.teams)
    for k, row in enumerate(rows):
        games = s.episode.map_idx == k
        for team in (0, 1):
            region, _ = start_of(config, row, team)
            x, y = s.agents.x[games][:, teams == team], s.agents.y[games][:, teams == team]
            assert in_closed(x, y, region).all(), (config.maps[k].name, team)
        z = s.agents.z[games]
        assert ((z >= row[3][0]) & (z <= row[3][1])).all()


def heading_in_range(h, lo, hi):
    """h (wrapped into [-pi, pi)) is lo + t (hi - lo) for some t in [0, 1], modulo 2 pi."""
    offset = np.mod(np.asarray(h, np.float64) - lo + 1e-5, 2 * math.pi) - 1e-5
    return (offset <= hi - lo + 1e-5) & (h >= -math.pi) & (h < math.pi)


@pytest.mark.parametrize("name", ["all", "user"])
def test_headings_lie_in_the_start_heading_range_wrapped_into_minus_pi_pi(name):
    """Built-in maps face 0 or pi (stored as -pi: §15 row 3's wrap); the user map's ranges
    are [-3, 3] and [2.5, 4] (the latter wraps past pi)."""
    config, rows = rows_of(name)
    s = resets(name)
    teams = np.asarray(config.teams)
    for k, row in enumerate(rows):
        games = s.episode.map_idx == k
        for team in (0, 1):
            _, (lo, hi) = start_of(config, row, team)
            h = s.agents.heading[games][:, teams == team]
            assert heading_in_range(h, lo, hi).all(), (config.maps[k].name, team, lo, hi)


def test_headings_are_redrawn_with_positions():
    """§15 row 22: an agent whose start is redrawn gets a new heading from the same round; an
    agent that is not redrawn keeps its first heading (same keys with 0 and 10 rounds)."""
    first, final = resets("user_first_draw").agents, resets("user").agents
    # user_rooms (map 0) draws both teams' headings from ranges of positive width
    games = resets("user").episode.map_idx == 0
    moved = ((first.x != final.x) | (first.y != final.y))[games]
    assert moved.sum() > 100
    np.testing.assert_array_equal((first.heading != final.heading)[games], moved)


# --- conflicts after resampling (§6.3 with §15 row 22) ---------------------------------------


def test_first_draws_do_conflict_so_the_resampling_rules_are_exercised():
    s = resets("user_first_draw")
    config = CONFIGS["user_first_draw"]
    assert close_pairs(config, s.agents, MARGIN).any(axis=(1, 2)).sum() > 100
    assert in_boxes("user_first_draw", s, MARGIN).any(axis=1).sum() > 100


@pytest.mark.parametrize("name", ["all", "user", "empty", "crowded"])
def test_no_starting_pair_is_within_the_enlarged_collision_cylinder(name):
    """After resampling, every pair is at least collision_range + 0.1 apart in the plane or
    collision_altitude + 0.1 in altitude, so no pair collides on the first step."""
    s = resets(name)
    bad = close_pairs(CONFIGS[name], s.agents, MARGIN).any(axis=(1, 2))
    assert not bad.any(), f"{bad.sum()} of {len(bad)} games start with a close pair"


@pytest.mark.parametrize("name", ["all", "user"])
def test_no_agent_starts_inside_a_box_enlarged_by_a_tenth(name):
    """Built-in: four_rooms' vertical walls cut team start bands; user: a box in team 0's
    region."""
    bad = in_boxes(name, resets(name), MARGIN).any(axis=1)
    assert not bad.any(), f"{bad.sum()} games start with an agent in a box"


def test_padding_boxes_do_not_force_redraws():
    """§15 row 22: a map with fewer boxes than the set's largest count is padded with zero
    boxes, which are ignored: an agent starting within 0.1 of the origin is not redrawn."""
    corner = MapSpec(
        name="corner", start_team0=(0.0, 0.0, 0.05, 0.05), start_team1=(9.0, 9.0, 10.0, 10.0)
    )
    walls = MapSpec(name="walls", boxes=((4.0, 4.0, 5.0, 5.0), (6.0, 6.0, 7.0, 7.0)))
    config = EnvConfig(teams=(0, 1), maps=(corner, walls), obs_type="vector")
    keys = jax.random.split(jax.random.key(5), 64)

    @jax.jit
    def reset_and_first_draw(keys):
        states = jax.vmap(functools.partial(genv.reset_state, config))(keys)[0]
        k_place = jax.vmap(game_reset.reset_keys)(keys)[:, 1]
        u = jax.vmap(lambda k: game_reset.placement_uniforms(config, k, 0))(k_place)
        return states.agents.x[:, 0], states.episode.map_idx, u[:, 0, 0]

    x, map_idx, u = (np.asarray(v) for v in reset_and_first_draw(keys))
    games = map_idx == 0
    assert games.sum() > 10
    first = np.float32(0.0) + u * np.float32(0.05)  # §6.2: lo + u (hi - lo), region [0, 0.05]
    np.testing.assert_allclose(x[games], first[games], rtol=1e-6, atol=1e-8)


def test_exhausted_rounds_keep_the_last_draw_and_the_pair_collides_on_the_first_step():
    """Defined rule (gigastep.game.reset.reset_state_streamed): after reset_max_rounds redraws the
    game starts with the last round's positions, conflicts or not. Three team-0 agents in a
    0.05 x 0.05 region can never be 0.5 apart: the reset still returns a valid game inside the
    start regions, the agents are alive and close, and on the first step (computed by the NumPy
    reference) they collide and die; the team-1 agent, placed far away, lives on."""
    tiny = MapSpec(
        name="tiny", start_team0=(5.0, 5.0, 5.05, 5.05), start_team1=(1.0, 1.0, 2.0, 9.0)
    )
    config = EnvConfig(
        teams=(0, 0, 0, 1),
        maps=(tiny,),
        obs_type="vector",
        reset_max_rounds=3,
        stochastic_obs=False,
        stochastic_comm=False,
    )
    env = GigastepEnv(config)
    keys = jax.random.split(jax.random.key(6), 32)
    _, s = env.v_reset(keys)
    a = jax.tree_util.tree_map(np.asarray, s.agents)
    assert a.alive.all() and np.isfinite(a.x).all() and np.isfinite(a.y).all()
    assert in_closed(a.x[:, :3], a.y[:, :3], (5.0, 5.0, 5.05, 5.05)).all()
    assert close_pairs(config, a, 0.0)[:, :3, :3].sum(axis=(1, 2)).min() == 6
    noise = {
        "detection": np.zeros((4, 4), np.float32),
        "comm": np.zeros((4, 4), np.float32),
        "waypoint": np.full(4, 0.99, np.float32),
    }
    for b in range(len(keys)):  # the first step, by the NumPy reference (rules §4.4)
        game = ref.state_to_numpy(jax.tree_util.tree_map(lambda v, b=b: v[b], s))
        dones = ref.reference_step(config, game, np.zeros((4, 3), np.float32), noise)[3]
        assert dones[:3].all() and not dones[3], b


# --- the map choice (§15 row 4) --------------------------------------------------------------


@pytest.mark.parametrize("name, n_maps", [("all", 8), ("user", 3), ("empty", 2)])
def test_map_index_is_uniform_over_the_scenarios_map_set(name, n_maps):
    """Chi-square goodness of fit of the map_idx counts over N_KEYS games against uniform on
    the n_maps maps; it fails when p < 1e-4 (its false-alarm rate). The 2023 rules fail it:
    "all" never used two of the 8 maps; "empty" chose empty_flipped 5/6 of the time."""
    idx = resets(name).episode.map_idx
    assert len(CONFIGS[name].maps) == n_maps
    assert idx.min() >= 0 and idx.max() < n_maps
    counts = np.bincount(idx, minlength=n_maps)
    statistic = float(((counts - N_KEYS / n_maps) ** 2 / (N_KEYS / n_maps)).sum())
    p = stats.chi2.sf(statistic, n_maps - 1)
    assert p >= FALSE_ALARM, f"map counts {counts.tolist()}: chi2 {statistic:.1f}, p = {p:.2g}"


# --- waypoints (§4.2 with the documented defaults) -------------------------------------------


@functools.cache
def waypoint_step():
    """One no-op step from N_KEYS fresh games with waypoints enabled (default spawn settings)."""
    config = EnvConfig(teams=(0, 1), obs_type="vector", enable_waypoints=True)
    env = GigastepEnv(config)
    keys = jax.random.split(jax.random.key(7), N_KEYS)
    _, s = env.v_reset(keys)
    _, s1, *_ = env.v_step(s, jnp.zeros((N_KEYS, 2, 3)), jax.random.split(keys[0], N_KEYS))
    return config, jax.tree_util.tree_map(np.asarray, (s.episode, s1.episode))


def test_no_waypoint_is_active_at_reset():
    _, (ep, _) = waypoint_step()
    assert (ep.waypoint_time == 0).all() and (ep.waypoint == 0).all()


def test_waypoint_appears_with_probability_0_05_per_step():
    """§4.2 step 5: a 5% chance per step while none is active. Two-sided binomial test,
    false-alarm rate 1e-4."""
    _, (_, ep) = waypoint_step()
    spawned = int((ep.waypoint_time > 0).sum())
    p = stats.binomtest(spawned, N_KEYS, 0.05).pvalue
    assert p >= FALSE_ALARM, f"{spawned} of {N_KEYS} games spawned a waypoint (p = {p:.2g})"


def test_new_waypoint_lives_5_to_10_seconds_and_fits_in_the_world():
    """§4.2 steps 6-7: lifetime T ~ U[5, 10) seconds; square of side 0.6 with its corner in
    [0, limit - 0.6)^2. Uniformity of T: Kolmogorov-Smirnov, false-alarm rate 1e-4. Games
    without a new waypoint keep time 0 and the old (zero) location."""
    config, (_, ep) = waypoint_step()
    new = ep.waypoint_time > 0
    t = ep.waypoint_time[new]
    assert t.min() >= 5.0 and t.max() < 10.0
    assert stats.kstest(t, stats.uniform(loc=5.0, scale=5.0).cdf).pvalue >= FALSE_ALARM
    w = ep.waypoint[new]
    assert (w[:, :2] >= 0).all() and (w[:, 0] < 10 - 0.6).all() and (w[:, 1] < 10 - 0.6).all()
    np.testing.assert_allclose(w[:, 2:] - w[:, :2], 0.6, atol=1e-5)
    assert (ep.waypoint_time[~new] == 0).all() and (ep.waypoint[~new] == 0).all()
