"""Scripted opponents (gigastep.opponents); the cooperative mode is in test_versus.py.

Hand-built states use the default physics: dt 0.1, heading rate 4 rad/s (one full-rate step
turns 0.4 rad), dive rate 5 (one full-rate step moves 0.5 in altitude), detection radius
cone_depth 3 x detection_range 1, detection half-angle 0.75 pi, very close depth 1.
Proportional control: control = error / (one full-rate step), clipped to [-1, 1].
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep import opponents
from gigastep.env import GigastepEnv
from gigastep.game.dynamics import ACTION_TABLE
from gigastep.opponents import get_policy, to_discrete
from gigastep.types import EnvConfig, EnvState
from gigastep.versus import VersusEnv

WIN_RATE_GAMES = 256
WIN_RATE_STEPS = 100  # games of pursuit vs random last ~30 steps (99th percentile ~65)


def _config(teams, **fields) -> EnvConfig:
    base = dict(
        teams=teams, obs_type="vector", map_set="empty", stochastic_obs=False, stochastic_comm=False
    )
    base.update(fields)
    return EnvConfig(**base)


@pytest.fixture(scope="module")
def small_configs():
    return {
        "cont": _config((0, 0, 1, 1)),
        "disc": _config((0, 0, 1, 1), discrete_actions=True),
    }


def _act(name: str, config: EnvConfig, state: EnvState, seed: int = 0) -> np.ndarray:
    """The named policy's actions, compiled (one compile per policy and config)."""
    return np.asarray(_compiled(name)(config, state, jax.random.PRNGKey(seed)))


_JITTED = {}


def _compiled(name: str):
    if name not in _JITTED:
        _JITTED[name] = jax.jit(get_policy(name), static_argnums=0)
    return _JITTED[name]


# ------------------------------------------------------------------------------------------
# Action format
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["cont", "disc"])
@pytest.mark.parametrize("name", sorted(opponents.POLICIES))
def test_each_policy_returns_actions_in_the_action_space(small_configs, name, mode):
    config = small_configs[mode]
    env = GigastepEnv(config)
    # Spread-out agents with varied headings (a hand-built state: no reset to compile).
    state = EnvState.create(
        config,
        x=[2.0, 4.0, 6.0, 8.0],
        y=[5.0, 3.0, 6.0, 9.5],
        z=[0.0, 2.0, 4.0, 1.0],
        heading=[0.0, 1.0, -2.0, 3.0],
    )
    actions = _act(name, config, state, seed=4)
    if mode == "disc":
        assert actions.shape == (4,) and actions.dtype == np.int32
        assert np.all((actions >= 0) & (actions <= 26))
    else:
        assert actions.shape == (4, 3) and actions.dtype == np.float32
        assert np.all(np.abs(actions) <= 1.0)
    assert all(env.action_space.contains(a) for a in actions)


def test_to_discrete_picks_the_action_table_row_with_the_same_signs():
    # Every row of the table is its own sign pattern; scaled controls round to it.
    for row, controls in enumerate(ACTION_TABLE):
        got = to_discrete(jnp.asarray(controls[None] * 0.8, jnp.float32))
        assert int(got[0]) == row
    # |c| <= 0.5 counts as 0: (0.4, -0.3, 0.2) is the no-op row (0, 0, 0).
    noop = int(np.flatnonzero(np.all(ACTION_TABLE == 0, axis=1))[0])
    assert int(to_discrete(jnp.asarray([[0.4, -0.3, 0.2]]))[0]) == noop


def test_circle_turns_at_full_rate_with_no_dive_or_throttle(small_configs):
    # rules §10.2: the circling policy is the constant (1, 0, 0); discrete table entry 16.
    state = EnvState.create(small_configs["cont"], x=5.0, y=5.0)
    cont = _act("circle", small_configs["cont"], state)
    np.testing.assert_array_equal(cont, np.tile([1.0, 0.0, 0.0], (4, 1)))
    disc = _act("circle", small_configs["disc"], state)
    np.testing.assert_array_equal(disc, [16] * 4)
    np.testing.assert_array_equal(ACTION_TABLE[16], [1.0, 0.0, 0.0])


def test_random_policy_differs_across_keys_and_repeats_for_a_key(small_configs):
    config = small_configs["cont"]
    state = EnvState.create(config, x=5.0, y=5.0)
    a = _act("random", config, state, seed=0)
    b = _act("random", config, state, seed=0)
    c = _act("random", config, state, seed=1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


# ------------------------------------------------------------------------------------------
# Pursuit
# ------------------------------------------------------------------------------------------


def test_pursuit_targets_a_seen_enemy_before_a_nearer_unseen_one():
    # Agent 0 (team 0) at (5, 5, z 5) heading east. Enemy 1 at (7, 6, z 5.2): distance 2.24 < 3,
    # bearing atan2(1, 2) = 0.464 rad inside the cone -> seen. Enemy 2 at (3.5, 4.5): distance
    # 1.58 (nearer, not very close), bearing -161.6 deg outside the cone -> unseen.
    # Turn = 0.464 / 0.4 -> clipped 1 (toward enemy 1; enemy 2 would give -1);
    # dive = (5.2 - 5) / 0.5 = 0.4; throttle 1.
    config = _config((0, 1, 1))
    state = EnvState.create(
        config,
        x=[5.0, 7.0, 3.5],
        y=[5.0, 6.0, 4.5],
        z=[5.0, 5.2, 5.0],
        heading=[0.0, math.pi / 2, 0.0],
    )
    actions = _act("pursuit", config, state)
    np.testing.assert_allclose(actions[0], [1.0, 0.4, 1.0], atol=1e-5)


def test_pursuit_chases_the_nearest_alive_enemy_when_it_sees_none():
    # Agent 0 at (5, 5) heading east. Enemy 1 at (3, 5.2): distance 2.01, bearing 174.3 deg,
    # outside the cone. Enemy 2 at (5, 1): distance 4 > 3 (out of range), bearing -90 deg.
    # Enemy 3 at (5.5, 5) straight ahead is dead and must be ignored.
    # Nearest alive = enemy 1: error 3.042 rad -> turn +1 (enemy 2 would give -1).
    config = _config((0, 1, 1, 1))
    state = EnvState.create(
        config, x=[5.0, 3.0, 5.0, 5.5], y=[5.0, 5.2, 1.0, 5.0], alive=[True, True, True, False]
    )
    actions = _act("pursuit", config, state)
    np.testing.assert_allclose(actions[0], [1.0, 0.0, 1.0], atol=1e-6)


def test_pursuit_turns_proportionally_to_a_small_heading_error():
    # Enemy at (8, 5.3) from (5, 5) heading 0: bearing atan2(0.3, 3) = 0.09967 rad, distance
    # 3.015 > 3 -> not seen, but the only alive enemy. Turn = 0.09967 / 0.4 = 0.24917.
    config = _config((0, 1))
    state = EnvState.create(config, x=[5.0, 8.0], y=[5.0, 5.3])
    actions = _act("pursuit", config, state)
    np.testing.assert_allclose(actions[0], [math.atan2(0.3, 3.0) / 0.4, 0.0, 1.0], atol=1e-5)


# ------------------------------------------------------------------------------------------
# Evade
# ------------------------------------------------------------------------------------------


def test_evade_flees_the_enemy_whose_detection_zone_holds_it():
    # Agent 0 at (5, 5) heading east; enemy 1 at (5, 4) heading north (pi/2): agent 0 is 1
    # straight ahead of it -> threatened. Away = north, error pi/2 -> turn +1, throttle 1.
    config = _config((0, 1))
    state = EnvState.create(config, x=[5.0, 5.0], y=[5.0, 4.0], heading=[0.0, math.pi / 2])
    actions = _act("evade", config, state)
    np.testing.assert_allclose(actions[0], [1.0, 0.0, 1.0], atol=1e-6)


def test_evade_ignores_an_enemy_that_cannot_detect_it():
    # Enemy at (5, 3.5) heading south (-pi/2): agent 0 is 1.5 behind it (outside its cone,
    # beyond very close depth 1) -> no threat, no wall near -> fly straight at full throttle.
    config = _config((0, 1))
    state = EnvState.create(config, x=[5.0, 5.0], y=[5.0, 3.5], heading=[0.0, -math.pi / 2])
    actions = _act("evade", config, state)
    np.testing.assert_allclose(actions[0], [0.0, 0.0, 1.0], atol=1e-6)


def test_evade_turns_back_from_a_map_edge():
    # Agent 0 at (9.8, 5) heading 0.3 rad, 0.2 from the east edge (margin 0.15 x 10 = 1.5):
    # the wall pushes west (angle pi), error wrap(pi - 0.3) = 2.84 -> turn +1.
    # The enemy far away at (1, 1) heading 0 does not threaten (distance 9.2 > 3).
    config = _config((0, 1))
    state = EnvState.create(config, x=[9.8, 1.0], y=[5.0, 1.0], heading=[0.3, 0.0])
    actions = _act("evade", config, state)
    np.testing.assert_allclose(actions[0], [1.0, 0.0, 1.0], atol=1e-6)


# ------------------------------------------------------------------------------------------
# Names
# ------------------------------------------------------------------------------------------


def test_unknown_policy_name_lists_the_closest_names():
    with pytest.raises(ValueError, match="pursuit"):
        get_policy("persuit")


def test_get_policy_returns_a_callable_unchanged():
    def mine(config, state, key):
        return opponents.circle(config, state, key)

    assert get_policy(mine) is mine


# ------------------------------------------------------------------------------------------
# Strength
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pursuit_beats_random_in_most_games_of_identical_5_vs_5():
    # The learner seat (team 1) plays uniform random actions; the scripted opponent (team 0)
    # plays pursuit. A game is won by the team with more survivors when it ends (or after
    # WIN_RATE_STEPS steps). Measured ~0.8 for pursuit (ties ~0.04).
    from gigastep.registry import make

    versus = VersusEnv(make("identical_5_vs_5_fobs_vec_void_cont"), "pursuit", opponent_team=0)
    teams = np.asarray(versus.config.teams)

    def play(key):
        k_reset, k_run = jax.random.split(key)
        _, state = versus.reset(k_reset)

        def body(carry, k):
            state, over, alive = carry
            k_act, k_step = jax.random.split(k)
            actions = jax.random.uniform(k_act, (5, 3), minval=-1.0, maxval=1.0)
            _, new, _, _, done = versus.step(state, actions, k_step)
            alive = jnp.where(over, alive, new.agents.alive)
            return (new, over | done, alive), None

        init = (state, jnp.zeros((), bool), state.agents.alive)
        (_, _, alive), _ = jax.lax.scan(body, init, jax.random.split(k_run, WIN_RATE_STEPS))
        return alive

    keys = jax.random.split(jax.random.PRNGKey(2024), WIN_RATE_GAMES)
    alive = np.asarray(jax.jit(jax.vmap(play))(keys))
    pursuit_left, random_left = alive[:, teams == 0].sum(1), alive[:, teams == 1].sum(1)
    rate = float(np.mean(pursuit_left > random_left))
    print(
        f"pursuit win rate vs random over {WIN_RATE_GAMES} games: {rate:.3f} "
        f"(random wins {np.mean(random_left > pursuit_left):.3f})"
    )
    assert rate > 0.6
