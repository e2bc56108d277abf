"""Invariants of the game that hold for any actions (hypothesis).

Each example draws a crowded start state (from a seed: agents packed in the middle of the map,
some near an edge, locks already running between enemies), a step key and a sequence of
continuous actions (out-of-range values included: they saturate), then runs one pre-compiled
`lax.scan` of `STEPS` steps. The config is a small 3-vs-3 game with heterogeneous agents
(health caps 0.5 / 1 / 3, a long-range observer, one agent that cannot shoot), stochastic
detection and communication, the obstacle maps and frequent waypoints, and `rgb_vector`
observations at 16 x 16 so that the dead-agent rule is checked for both observation kinds.

Invariants (API contract, gigastep/game/types.py, rules §15 rows 3 and 19):
* health in [0, max_health]; alive never returns to True within an episode;
* alive agents are inside the map [0, limit_x] x [0, limit_y]; altitude in [0, z_max];
* rewards finite; headings in [-pi, pi);
* tracked counts >= 0, and non-zero only where shooter and target are enemies;
* a dead agent's observation is all zeros (vector and RGB).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gigastep.env import GigastepEnv
from gigastep.types import EnvConfig, EnvState

TEAMS = (0, 0, 0, 1, 1, 1)
N = len(TEAMS)
STEPS = 12
CONFIG = EnvConfig(
    teams=TEAMS,
    max_health=(1.0, 3.0, 0.5, 1.0, 3.0, 0.5),
    detection_range=(1.0, 1.0, 2.0, 1.0, 1.0, 2.0),
    damage_range=(1.0, 1.0, 1.0, 1.0, 0.0, 1.0),  # agent 4 never shoots
    thrust=(1.0, 0.8, 2.0, 1.0, 0.8, 2.0),
    sprites=(1, 7, 3, 1, 7, 3),
    map_set="all",
    enable_waypoints=True,
    waypoint_spawn_prob=0.3,
    damage_per_second=3.0,  # deaths within a short rollout
    reward_detection=1.0,
    reward_damage=1.0,
    reward_idle=1.0,
    reward_agent_disabled=1.0,
    reward_collision_agent=1.0,
    reward_collision_obstacle=1.0,
    reward_hit_waypoint=1.0,
    obs_type="rgb_vector",
    resolution_x=16,
    resolution_y=16,
)
MAX_HEALTH = np.asarray(CONFIG.max_health, np.float32)
ENEMIES = np.asarray(TEAMS)[:, None] != np.asarray(TEAMS)[None, :]
PI32 = np.float32(math.pi)
# start headings on or next to the ends of [-pi, pi) (in float32)
EDGE_HEADINGS = np.array(
    [-PI32, np.nextafter(-PI32, np.float32(0)), np.nextafter(PI32, np.float32(0))], np.float32
)
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)

seeds = st.integers(0, 2**31 - 1)
action_sequences = hnp.arrays(
    np.float32,
    (STEPS, N, 3),
    elements=st.floats(-1.5, 1.5, width=32, allow_nan=False),
)


@functools.cache
def _rollout_fn():
    env = GigastepEnv(CONFIG)

    def body(state, xs):
        actions, key = xs
        obs, state, rewards, dones, ep_done = env.step(state, actions, key)
        return state, (obs, state, rewards, dones)

    def rollout(state, actions, key):
        _, out = jax.lax.scan(body, state, (actions, jax.random.split(key, STEPS)))
        return out

    return jax.jit(rollout)


def crowded_state(seed: int) -> EnvState:
    """A start state from a seed: a tight cluster in the middle, one agent near an edge,
    random headings (the whole circle, some at its ends), altitudes 0..2, health in
    (0, max], locks of 0..10 steps between enemies only, on a random map of the set, maybe
    with an active waypoint."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(3.5, 6.5, N).astype(np.float32)
    y = rng.uniform(3.5, 6.5, N).astype(np.float32)
    edge = rng.integers(N)
    x[edge] = rng.choice([rng.uniform(0.0, 0.2), rng.uniform(9.8, 10.0)])
    tracked = rng.integers(0, 11, (N, N)) * ENEMIES * (rng.random((N, N)) < 0.5)
    return EnvState.create(
        CONFIG,
        x=x,
        y=y,
        z=rng.choice([0.0, 0.3, 1.0, 2.0], N).astype(np.float32),
        v=rng.uniform(1.0, 3.0, N).astype(np.float32),
        heading=np.where(
            rng.random(N) < 0.3, rng.choice(EDGE_HEADINGS, N), rng.uniform(-math.pi, math.pi, N)
        ).astype(np.float32),
        health=(MAX_HEALTH * rng.uniform(0.05, 1.0, N)).astype(np.float32),
        tracked=tracked.astype(np.int32),
        map_idx=int(rng.integers(len(CONFIG.maps))),
        waypoint=np.array([4.5, 4.5, 5.1, 5.1], np.float32),
        waypoint_time=float(rng.choice([0.0, 3.0])),
    )


def rollout(state_seed, key_seed, actions):
    """STEPS steps from `crowded_state(state_seed)`; (obs, states, rewards, dones) as NumPy,
    each with a leading time axis."""
    out = _rollout_fn()(crowded_state(state_seed), jnp.asarray(actions), jax.random.key(key_seed))
    return jax.device_get(out)


@SETTINGS
@given(seeds, seeds, action_sequences)
def test_health_stays_between_zero_and_max_health(state_seed, key_seed, actions):
    _, states, _, _ = rollout(state_seed, key_seed, actions)
    health = states.agents.health
    assert np.all(health >= 0.0)
    assert np.all(health <= MAX_HEALTH[None, :])


@SETTINGS
@given(seeds, seeds, action_sequences)
def test_dead_agents_never_come_back_to_life(state_seed, key_seed, actions):
    _, states, _, _ = rollout(state_seed, key_seed, actions)
    alive = states.agents.alive
    assert not np.any(alive[1:] & ~alive[:-1])


@SETTINGS
@given(seeds, seeds, action_sequences)
def test_alive_agents_stay_inside_the_map(state_seed, key_seed, actions):
    _, states, _, _ = rollout(state_seed, key_seed, actions)
    a = states.agents
    alive = a.alive
    assert np.all((a.x >= 0.0) & (a.x <= CONFIG.limit_x) | ~alive)
    assert np.all((a.y >= 0.0) & (a.y <= CONFIG.limit_y) | ~alive)
    assert np.all((a.z >= 0.0) & (a.z <= CONFIG.z_max))


@SETTINGS
@given(seeds, seeds, action_sequences)
def test_rewards_are_finite(state_seed, key_seed, actions):
    _, states, rewards, _ = rollout(state_seed, key_seed, actions)
    assert np.all(np.isfinite(rewards))
    assert np.all(np.isfinite(states.episode.returns))


@SETTINGS
@given(seeds, seeds, action_sequences)
def test_headings_stay_in_minus_pi_to_pi(state_seed, key_seed, actions):
    _, states, _, _ = rollout(state_seed, key_seed, actions)
    heading = states.agents.heading
    assert np.all(heading >= -PI32), heading.min()
    assert np.all(heading < PI32), heading.max()


@SETTINGS
@given(seeds, seeds, action_sequences)
def test_tracked_counts_are_non_negative_and_only_between_enemies(state_seed, key_seed, actions):
    _, states, _, _ = rollout(state_seed, key_seed, actions)
    tracked = states.agents.tracked  # (T, n, n) [target, shooter]
    assert np.all(tracked >= 0)
    assert not np.any((tracked > 0) & ~ENEMIES[None])
    assert np.all(tracked[:, :, 4] == 0)  # agent 4 cannot shoot, so it never locks


@SETTINGS
@given(seeds, seeds, action_sequences)
def test_dead_agents_observe_all_zeros(state_seed, key_seed, actions):
    (rgb, vec), states, _, _ = rollout(state_seed, key_seed, actions)
    dead = ~states.agents.alive  # (T, n)
    assert np.all(rgb[dead] == 0)
    assert np.all(vec[dead] == 0.0)


def test_the_start_states_make_things_happen():
    # not an env rule: guards the properties above against rollouts where nothing happens
    actions = np.random.default_rng(0).uniform(-1, 1, (STEPS, N, 3)).astype(np.float32)
    deaths = locks = hurt = 0
    for seed in range(10):
        _, states, _, _ = rollout(seed, seed, actions)
        a = states.agents
        deaths += int(np.sum(~a.alive[-1]))
        locks += int(np.sum(a.tracked > 0))
        hurt += int(np.sum(np.diff(a.health, axis=0) < 0))
    assert deaths > 0 and locks > 0 and hurt > 0, (deaths, locks, hurt)
