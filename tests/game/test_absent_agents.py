"""Team draws and absent agents (rules "Absent agents"), one rule per test.

The rule tests build hand-made states with `EnvState.create(..., present=...)` on a small
roster (3 slots per team, vector observations, no obstacles); the draw tests reset many games
with one compiled `v_reset` per config.
"""

from __future__ import annotations

import functools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gigastep
from gigastep import EnvConfig, EnvState
from gigastep import env as genv
from gigastep.game import reset as game_reset
from gigastep.game.arena import map_arrays
from gigastep.game.observations.global_state import STATE_AGENT_FEATURES, state_vector
from gigastep.game.rosters import TeamDraw
from tests.exact_runs import leaf_mismatches

KEY = jax.random.key(0)
N_KEYS = 2048
# 3 slots per team, every reward term off but an idle reward of 1 per step
SMALL = EnvConfig(
    teams=(0, 0, 0, 1, 1, 1),
    obs_type="vector",
    stochastic_obs=False,
    stochastic_comm=False,
    cone_depth=100.0,
    cone_angle=3.14159,
    reward_game_won=0.0,
    reward_defeat_one_opponent=0.0,
    idle_reward=(1.0,) * 6,
    damage_range=(0.0,) * 6,
    max_episode_length=50,
    team_draw=TeamDraw(sizes=((1, 3), (1, 3))),
)
FAR = dict(x=[1.0, 2.0, 3.0, 7.0, 8.0, 9.0], y=[5.0] * 6, heading=[0.0, 0, 0, np.pi, np.pi, np.pi])
STILL = jnp.zeros((6, 3), jnp.float32)


def _step(config, state, actions=STILL, key=KEY):
    return jax.jit(partial(genv.step, config))(state, actions, key)


@functools.cache
def _resets(config: EnvConfig):
    keys = jax.random.split(jax.random.key(7), N_KEYS)
    return jax.jit(partial(genv.batched_reset, config))(keys)[1]


def _roster(team0: dict[str, int], team1: dict[str, int], **fields) -> EnvConfig:
    builder = gigastep.ScenarioBuilder("roster")
    for team, members in enumerate((team0, team1)):
        for name, count in members.items():
            builder.add_type(team, name, count)
    return builder.set(obs_type="vector", **fields).config()


# --- equality with the fixed game ----------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["identical_5_vs_5_pobs_vec_maps_cont", pytest.param("special_5_vs_5", marks=pytest.mark.slow)],
)
def test_a_draw_of_the_whole_roster_plays_the_fixed_game_bit_for_bit(name):
    """min = max = the roster's slots: every agent present, so the game is the fixed
    scenario's from the same keys (every leaf of reset and 4 steps; `present` all True)."""
    fixed = gigastep.make_config(name)
    n0, n1 = fixed.team_sizes
    types = sorted(set(fixed.type_names))
    weights = tuple((t, 1.0 + i) for i, t in enumerate(types))
    drawn = fixed.replace(team_draw=TeamDraw(sizes=((n0, n0), (n1, n1)), weights=(weights, ())))

    def run(config, key):
        k_reset, k_act, k_step = jax.random.split(key, 3)
        obs, state = genv.reset(config, k_reset)

        def one(state, t):
            acts = jax.random.uniform(jax.random.fold_in(k_act, t), (config.n_agents, 3))
            result = genv.step_autoreset(config, state, acts * 2 - 1, jax.random.fold_in(k_step, t))
            return result[1], result

        return (obs, state), jax.lax.scan(one, state, jnp.arange(4))

    def strip(tree):  # the drawn game's `present` leaf, checked below, is its only extra leaf
        return jax.tree.map(
            lambda s: (
                s.replace(episode=s.episode.replace(present=None)) if isinstance(s, EnvState) else s
            ),
            tree,
            is_leaf=lambda v: isinstance(v, EnvState),
        )

    keys = jax.random.split(jax.random.key(0), 3)
    want = jax.jit(jax.vmap(partial(run, fixed)))(keys)
    got = jax.jit(jax.vmap(partial(run, drawn)))(keys)
    assert bool(np.all(got[0][1].episode.present))
    assert leaf_mismatches(strip(got), want, strict=True) == []


# --- the draw ------------------------------------------------------------------------------


def test_team_sizes_are_uniform_over_the_size_range():
    present = np.asarray(_resets(SMALL).episode.present)
    for cols in (slice(0, 3), slice(3, 6)):
        sizes = present[:, cols].sum(1)
        counts = np.bincount(sizes, minlength=4)
        assert counts[0] == 0
        # each of 1..3 has probability 1/3: 2048 games, 5 standard deviations (~107)
        assert np.all(np.abs(counts[1:] - N_KEYS / 3) < 5 * np.sqrt(N_KEYS * 2 / 9)), counts


def test_the_first_slots_of_a_team_are_present():
    """One type per team: the present agents are the team's first k slots."""
    present = np.asarray(_resets(SMALL).episode.present)
    for cols in (slice(0, 3), slice(3, 6)):
        p = present[:, cols]
        k = p.sum(1)
        assert np.array_equal(p, np.arange(3)[None, :] < k[:, None])


def test_type_mix_follows_the_weights_and_the_first_slots_of_each_type_are_present():
    """Team 0: 4 slots of default, 4 of faster, 2 of super, weights 3 : 1 : 0, size 2. The
    first agent is default with probability 3/4; super (weight 0) is never drawn; the present
    agents of a type are that type's first slots."""
    config = _roster(
        {"default": 4, "faster": 4, "super": 2},
        {"default": 2},
        team_draw=TeamDraw(
            sizes=((2, 2), (1, 2)), weights=((("default", 3), ("faster", 1), ("super", 0)), ())
        ),
    )
    present = np.asarray(_resets(config).episode.present)
    default, faster, superb = present[:, 0:4], present[:, 4:8], present[:, 8:10]
    assert not superb.any()
    assert np.all(default.sum(1) + faster.sum(1) == 2)
    for block in (default, faster):
        k = block.sum(1)
        assert np.array_equal(block, np.arange(4)[None, :] < k[:, None])
    # P(2 default) = 9/16, P(1 each) = 6/16, P(2 faster) = 1/16 (two independent picks)
    counts = np.bincount(default.sum(1), minlength=3)[::-1] / N_KEYS
    expected = np.array([9, 6, 1]) / 16
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected * (1 - expected) / N_KEYS))


def test_type_caps_bound_the_mix():
    """Team 0: 1 slot of super (weight 100) and 3 of default (weight 1), size 3: super is
    almost always drawn first, and the other picks fill the default slots."""
    config = _roster(
        {"super": 1, "default": 3},
        {"default": 1},
        team_draw=TeamDraw(sizes=((3, 3), (1, 1)), weights=((("super", 100), ("default", 1)), ())),
    )
    present = np.asarray(_resets(config).episode.present)
    assert np.all(present[:, :4].sum(1) == 3)
    assert present[:, 0].mean() > 0.95  # 1 - (1/101)^3 ... at least the first pick's 100/101


def test_the_draw_leaves_the_map_and_placement_draws_unchanged():
    """The composition comes from a key of its own (fold_in): map and the present agents'
    start positions are those of the config without a draw (no conflicts: collisions off;
    on maps with boxes an absent agent in a box is not redrawn, a fixed game's agent is)."""
    fixed = SMALL.replace(team_draw=None, collision_range=0.0, map_set="all")
    drawn = fixed.replace(team_draw=SMALL.team_draw)
    a, b = _resets(fixed), _resets(drawn)
    present = np.asarray(b.episode.present)
    assert np.array_equal(a.episode.map_idx, b.episode.map_idx)
    for field in ("x", "y", "z", "heading"):
        got, want = getattr(b.agents, field), getattr(a.agents, field)
        assert np.array_equal(np.asarray(got)[present], np.asarray(want)[present]), field


def test_auto_reset_draws_a_new_composition_per_episode():
    """A finished game restarts with the composition of its fresh reset's key."""
    config = SMALL.replace(max_episode_length=1)
    states = jax.tree.map(lambda v: v[:64], _resets(SMALL))
    step_keys = jax.random.split(jax.random.key(1), 64)
    step = jax.vmap(partial(genv.step_autoreset, config, final_obs=False))
    _, nxt, *_ = jax.jit(step)(states, jnp.zeros((64, 6, 3)), step_keys)
    k_reset = jax.vmap(lambda k: jax.random.split(k)[1])(step_keys)
    want = jax.jit(jax.vmap(partial(game_reset.reset_state, config)))(k_reset)[0]
    assert np.array_equal(nxt.episode.present, want.episode.present)
    assert np.array_equal(nxt.agents.alive, want.episode.present)
    assert not np.array_equal(nxt.episode.present, states.episode.present)


# --- absent agents at reset ----------------------------------------------------------------


def test_absent_agents_start_dead_at_zero_health():
    states = _resets(SMALL)
    present = np.asarray(states.episode.present)
    assert np.array_equal(np.asarray(states.agents.alive), present)
    assert np.all(np.asarray(states.agents.health)[~present] == 0)
    assert np.all(np.asarray(states.agents.health)[present] == 1)


def test_an_absent_agent_never_puts_a_present_agent_in_conflict():
    """Agents 0 and 1 at the same place: agent 1 conflicts with 0 only while both are present."""
    config = SMALL
    agents = EnvState.create(config, x=[5.0, 5.0, 1, 7, 8, 9], y=[5.0, 5.0, 1, 1, 1, 1]).agents
    maps = map_arrays(config)
    boxes, valid = jnp.asarray(maps.boxes)[0], jnp.asarray(maps.box_valid)[0]

    def conflicts(present):
        p = jnp.asarray(present)
        return np.asarray(game_reset.placement_conflicts(config, agents, boxes, valid, 0.1, p))

    assert conflicts([True] * 6)[1]
    assert not conflicts([False, True, True, True, True, True]).any()
    assert not conflicts([True, False, True, True, True, True]).any()


# --- absent agents in a step ---------------------------------------------------------------


def test_rewards_divide_by_the_present_team_size():
    """Idle reward 1 per step, divided by the team size: 1/2 in a team with 2 present agents,
    1/1 with 1, and 0 for absent agents."""
    present = [True, True, False, True, False, False]
    state = EnvState.create(SMALL, **FAR, present=present)
    rewards = np.asarray(_step(SMALL, state)[2])
    np.testing.assert_array_equal(rewards, [0.5, 0.5, 0.0, 1.0, 0.0, 0.0])


def test_the_actions_of_absent_agents_change_nothing():
    """Two steps whose actions differ only in the absent agents' rows give the same results."""
    present = [True, False, True, True, True, False]
    state = EnvState.create(SMALL, **FAR, present=present)
    actions = jax.random.uniform(jax.random.key(3), (6, 3), minval=-1, maxval=1)
    other = actions.at[1].set(1.0).at[5].set(-1.0)
    assert leaf_mismatches(_step(SMALL, state, other), _step(SMALL, state, actions), True) == []


def test_absent_agents_never_collide():
    """A present agent on top of an absent one stays alive, without a collision penalty."""
    config = SMALL.replace(reward_collision_agent=1.0, idle_reward=(0.0,) * 6)
    x = [5.0, 5.0, 1.0, 8.0, 9.0, 9.5]
    state = EnvState.create(config, x=x, y=[5.0] * 6, present=[True, False, True, True, True, True])
    _, nxt, rewards, *_ = _step(config, state)
    assert bool(nxt.agents.alive[0])
    assert float(rewards[0]) == 0.0


def test_absent_agents_neither_lock_nor_are_locked():
    """Shooters aimed at each other at close range: locks grow only between present agents."""
    config = SMALL.replace(damage_range=(1.0,) * 6, idle_reward=(0.0,) * 6)
    # 0 (present) and 3 (absent) face each other 1.5 units apart; 1 and 4 (present) too
    x = [4.25, 4.25, 1.0, 5.75, 5.75, 9.0]
    y = [2.0, 6.0, 9.0, 2.0, 6.0, 9.0]
    heading = [0.0, 0.0, 0.0, np.pi, np.pi, np.pi]
    present = [True, True, True, False, True, True]
    state = EnvState.create(config, x=x, y=y, heading=heading, present=present)
    for t in range(3):
        state = _step(config, state, key=jax.random.key(t))[1]
    tracked = np.asarray(state.agents.tracked)
    assert tracked[3].sum() == 0 and tracked[:, 3].sum() == 0
    assert tracked[4, 1] > 0 and tracked[1, 4] > 0


def test_a_team_whose_present_agents_are_all_dead_is_eliminated():
    """Team 1's only present agent leaves the map: the episode ends, team 0 wins."""
    config = SMALL.replace(reward_game_won=10.0, idle_reward=(0.0,) * 6)
    x = [1.0, 2.0, 3.0, 9.95, 8.0, 9.0]
    state = EnvState.create(
        config, x=x, y=[5.0] * 6, present=[True, True, False, True, False, False]
    )
    _, nxt, rewards, dones, done = _step(config, state, jnp.tile(jnp.asarray([0, 0, 1.0]), (6, 1)))
    assert bool(done)
    assert np.asarray(dones).tolist() == [False, False, True, True, True, True]
    np.testing.assert_allclose(np.asarray(rewards)[:2], 10.0 / 2)  # 2 present agents


def _obs(config, state):
    return _step(config, state)[0]  # a step's observation: after detection


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("obs_type", ["vector", "rgb", "entity"])
def test_absent_agents_are_never_observed(monkeypatch, native, obs_type):
    """Every observation is the same wherever an absent agent is (full sight, no noise), in
    the native kernels and in the pure-JAX path."""
    monkeypatch.setenv("GIGASTEP_NATIVE", native)
    config = SMALL.replace(obs_type=obs_type, resolution_x=32, resolution_y=32)
    present = [True, True, True, True, False, True]
    a = EnvState.create(config, **FAR, present=present)
    moved = {**FAR, "x": [1.0, 2.0, 3.0, 7.0, 2.5, 9.0], "y": [5.0, 5, 5, 5, 5.5, 5]}
    b = EnvState.create(config, **moved, present=present)
    assert np.array_equal(np.asarray(_obs(config, a)), np.asarray(_obs(config, b)))
    if obs_type == "vector":
        obs = np.asarray(_obs(config, a))
        # full sight: each present agent's rows hold the 5 present agents, then zeros
        assert np.all(np.abs(obs[0, 9 * 5 : 9 * 6]) == 0)
        assert np.all(np.abs(obs[0, 9 * 4 : 9 * 5]).sum() > 0)


def test_absent_agents_rows_of_the_global_state_are_zero():
    present = [True, False, True, True, True, True]
    state = EnvState.create(SMALL, **FAR, present=present)
    vec = np.asarray(state_vector(SMALL, state, 0))
    rows = vec[: 6 * STATE_AGENT_FEATURES].reshape(6, STATE_AGENT_FEATURES)
    assert np.all(rows[1] == 0)
    assert np.all(rows[[0, 2, 3, 4, 5], 1:].any(1) | (rows[[0, 2, 3, 4, 5], 0] == 1))


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "draw, message",
    [
        (dict(sizes=((1, 4), (1, 3))), "up to 4 agents but its roster has 3 slots"),
        (dict(sizes=((0, 2), (1, 3))), "1 <= min <= max"),
        (dict(sizes=((3, 2), (1, 3))), "1 <= min <= max"),
        (dict(sizes=((1, 3), (1, 3)), weights=((("defualt", 1.0),), ())), "closest: ['default'"),
        (dict(sizes=((1, 3), (1, 3)), weights=((("default", 0.0),), ())), "positive sum"),
        (dict(sizes=((1, 3), (1, 3)), weights=((("default", -1.0),), ())), "must be >= 0"),
    ],
)
def test_a_team_draw_that_does_not_fit_the_roster_is_refused(draw, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        SMALL.replace(team_draw=TeamDraw(**draw))


def test_a_draw_needs_enough_slots_of_positive_weight():
    with pytest.raises(ValueError, match="only 2 of its slots have a type of positive weight"):
        _roster(
            {"default": 2, "super": 2},
            {"default": 1},
            team_draw=TeamDraw(
                sizes=((1, 3), (1, 1)), weights=((("default", 1), ("super", 0)), ())
            ),
        )


def test_present_needs_a_team_draw():
    with pytest.raises(ValueError, match="only for configs with a team_draw"):
        EnvState.create(SMALL.replace(team_draw=None), **FAR, present=[True] * 6)


def test_a_drawn_reset_lowers_for_a_gpu_without_data_dependent_control_flow():
    """The draw is fixed compute: the batched reset of a heterogeneous draw lowered for CUDA
    has no data-dependent conditional or loop (tests/game/test_gpu_lowering.py's analysis)."""
    from tests.game.test_gpu_lowering import assert_gpu_clean, lower

    config = _roster(
        {"default": 3, "faster": 3},
        {"default": 3},
        team_draw=TeamDraw(sizes=((2, 5), (1, 3)), weights=((("default", 2), ("faster", 1)), ())),
    )
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    assert_gpu_clean(lower(genv._v_reset, config, keys))


@pytest.mark.slow
def test_the_batched_auto_reset_draws_as_the_one_game_auto_reset():
    """`batched_step_autoreset` (which resets only the finished games) gives, bit for bit, the
    vmapped one-game `step_autoreset`, draws of the restarted games included."""
    config = SMALL.replace(max_episode_length=2)
    states = jax.tree.map(lambda v: v[:8], _resets(SMALL))
    actions = jax.random.uniform(jax.random.key(5), (8, 6, 3), minval=-1, maxval=1)

    def run(step):
        s, out = states, []
        for t in range(3):
            result = step(s, actions, jax.random.split(jax.random.key(10 + t), 8))
            s = result[1]
            out.append(result)
        return out

    one = jax.jit(jax.vmap(partial(genv.step_autoreset, config)))
    batched = jax.jit(partial(genv.batched_step_autoreset, config))
    got, want = run(batched), run(one)
    assert leaf_mismatches(got, want, strict=True) == []
    assert bool(got[1][4].all())  # every game restarted at step 2 with a new draw
