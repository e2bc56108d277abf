"""Conformance of the public API over a representative set of scenarios.

For every scenario below (vector / rgb / rgb_vector, fobs / pobs, maps / void, continuous /
discrete, waypoints, hide-and-seek, heterogeneous agents, a non-square image) a batch of games is
reset and stepped 20 times with actions drawn from `env.action_space`, through the compiled
batched API (`v_reset`, `v_step`). The tests then check the rollout against the spaces and the
output contract (the API contract: pure functions, fixed shapes and dtypes):

* observations match `env.observation_space` (shape, dtype, `contains`) for every agent;
* rewards float32 (n,), dones bool (n,) equal to ~alive, episode_done bool ();
* every value stays finite; the state keeps its structure, shapes and dtypes across steps;
* the same keys give bit-identical rollouts, different keys give different start positions.

Each scenario compiles `v_reset` and `v_step` once (module-scoped, shared by all its tests).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from gigastep.registry import make
from gigastep.spaces import Box, Discrete, Tuple

BATCH = 2
STEPS = 20
SEED = 7

# name -> overrides. RGB resolutions are small: these tests check types, not pictures.
SCENARIOS = {
    "identical_5_vs_5_fobs_vec_void_disc": {},
    "identical_2_vs_2_pobs_rgb_maps_cont": {"resolution_x": 16, "resolution_y": 16},
    "waypoint_5_vs_3_fobs_vec_maps_cont": {},
    "hide_and_seek_5_vs_5_pobs_vec_maps_disc": {},
    # heterogeneous agent types, both observation kinds, a non-square image (rules §15 row 15)
    "special_5_vs_1_pobs_rgb_maps_disc": {
        "obs_type": "rgb_vector",
        "resolution_x": 16,
        "resolution_y": 12,
    },
}

# dtype of every state field (gigastep/game/types.py, API contract: alive is bool)
STATE_DTYPES = {
    "x": np.float32,
    "y": np.float32,
    "z": np.float32,
    "v": np.float32,
    "heading": np.float32,
    "health": np.float32,
    "alive": np.bool_,
    "tracked": np.int32,
    "map_idx": np.int32,
    "waypoint": np.float32,
    "waypoint_time": np.float32,
    "aux_rewards_factor": np.float32,
    "step": np.int32,
    "returns": np.float32,
}


@functools.cache
def _env(name):
    return make(name, **SCENARIOS[name])


@functools.cache
def _sampler(name):
    """Compiled: key -> actions (BATCH, n, *action shape) drawn with `action_space.sample`."""
    env = _env(name)
    space, n = env.action_space, env.n_agents

    def sample(key):
        keys = jax.random.split(key, BATCH * n).reshape(BATCH, n)
        return jax.vmap(jax.vmap(space.sample))(keys)

    return jax.jit(sample)


def _rollout(name, seed):
    """Reset BATCH games and take STEPS random steps; every output kept as host arrays."""
    env = _env(name)
    key = jax.random.key(seed)
    k_reset, k_run = jax.random.split(key)
    obs, states = env.v_reset(jax.random.split(k_reset, BATCH))
    out = {
        "obs": [obs],
        "states": [states],
        "actions": [],
        "rewards": [],
        "dones": [],
        "ep_done": [],
    }
    for t in range(STEPS):
        k_act, k_step = jax.random.split(jax.random.fold_in(k_run, t))
        actions = _sampler(name)(k_act)
        obs, states, rewards, dones, ep_done = env.v_step(
            states, actions, jax.random.split(k_step, BATCH)
        )
        step_out = {
            "obs": obs,
            "states": states,
            "actions": actions,
            "rewards": rewards,
            "dones": dones,
            "ep_done": ep_done,
        }
        for field, value in step_out.items():
            out[field].append(value)
    return jax.device_get(out)


# The fast tier checks the vector game and the heterogeneous rgb_vector one; CI all five.
FAST = ("identical_5_vs_5_fobs_vec_void_disc", "special_5_vs_1_pobs_rgb_maps_disc")


@pytest.fixture(
    scope="module",
    params=[n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in SCENARIOS],
)
def scenario(request):
    name = request.param
    return name, _env(name), _rollout(name, SEED)


def _agent_obs(obs, b, i):
    """Observation of agent i of game b (a tuple for rgb_vector)."""
    if isinstance(obs, tuple):
        return tuple(np.asarray(o[b, i]) for o in obs)
    return np.asarray(obs[b, i])


def _check_obs_in_space(env, obs):
    space = env.observation_space
    parts = obs if isinstance(obs, tuple) else (obs,)
    boxes = space.spaces if isinstance(space, Tuple) else (space,)
    assert len(parts) == len(boxes)
    for part, box in zip(parts, boxes, strict=True):
        assert part.shape == (BATCH, env.n_agents, *box.shape)
        assert part.dtype == box.dtype
    for b in range(BATCH):
        for i in range(env.n_agents):
            assert space.contains(_agent_obs(obs, b, i)), (b, i)


def _float_leaves(tree):
    return [
        np.asarray(x)
        for x in jax.tree_util.tree_leaves(tree)
        if np.issubdtype(np.asarray(x).dtype, np.floating)
    ]


# ------------------------------------------------------------------------------------------
# Spaces
# ------------------------------------------------------------------------------------------


def test_observation_space_matches_obs_type(scenario):
    name, env, _ = scenario
    space, c = env.observation_space, env.config
    rgb_shape = (c.resolution_x, c.resolution_y, 3)
    if c.obs_type == "rgb_vector":
        assert isinstance(space, Tuple) and len(space) == 2
        assert space[0].shape == rgb_shape and space[0].dtype == np.uint8
        assert space[1].shape == (c.vector_size,) and space[1].dtype == np.float32
    elif c.obs_type == "rgb":
        assert isinstance(space, Box)
        assert space.shape == rgb_shape and space.dtype == np.uint8
    else:
        assert isinstance(space, Box)
        assert space.shape == (c.vector_size,) and space.dtype == np.float32


def test_action_space_matches_action_mode(scenario):
    _, env, _ = scenario
    space = env.action_space
    if env.discrete_actions:
        assert isinstance(space, Discrete) and space.n == 27 and space.shape == ()
    else:
        assert isinstance(space, Box) and space.shape == (3,) and space.dtype == np.float32
        np.testing.assert_array_equal(space.low, -1.0)
        np.testing.assert_array_equal(space.high, 1.0)


def test_action_space_contains_its_samples(scenario):
    _, env, _ = scenario
    space = env.action_space
    for seed in range(5):
        assert space.contains(np.asarray(space.sample(jax.random.key(seed))))


def test_env_accepts_batched_action_samples(scenario):
    _, env, run = scenario
    space = env.action_space
    assert len(run["actions"]) == STEPS
    for actions in run["actions"]:
        assert actions.shape == (BATCH, env.n_agents, *space.shape)
        for b in range(BATCH):
            assert all(space.contains(a) for a in actions[b])
    assert run["rewards"][-1].shape[0] == BATCH


# ------------------------------------------------------------------------------------------
# Outputs of reset and step
# ------------------------------------------------------------------------------------------


def test_reset_observation_matches_observation_space(scenario):
    _, env, run = scenario
    _check_obs_in_space(env, run["obs"][0])


def test_step_observations_match_observation_space(scenario):
    _, env, run = scenario
    for obs in run["obs"][1:]:
        _check_obs_in_space(env, obs)


def test_rewards_are_float32_per_agent(scenario):
    _, env, run = scenario
    for rewards in run["rewards"]:
        assert rewards.shape == (BATCH, env.n_agents)
        assert rewards.dtype == np.float32


def test_dones_are_bool_per_agent_and_equal_not_alive(scenario):
    _, env, run = scenario
    for dones, states in zip(run["dones"], run["states"][1:], strict=True):
        assert dones.shape == (BATCH, env.n_agents)
        assert dones.dtype == np.bool_
        np.testing.assert_array_equal(dones, ~states.agents.alive)


def test_episode_done_is_a_bool_scalar_per_game(scenario):
    _, _, run = scenario
    for ep_done in run["ep_done"]:
        assert ep_done.shape == (BATCH,)
        assert ep_done.dtype == np.bool_


def test_values_stay_finite_over_random_steps(scenario):
    _, _, run = scenario
    for field in ("obs", "states", "rewards"):
        for t, tree in enumerate(run[field]):
            for leaf in _float_leaves(tree):
                assert np.all(np.isfinite(leaf)), (field, t)


def test_state_fields_have_documented_shapes_and_dtypes(scenario):
    _, env, run = scenario
    n = env.n_agents
    shapes = {
        "tracked": (n, n),
        "waypoint": (4,),
        "map_idx": (),
        "waypoint_time": (),
        "aux_rewards_factor": (),
        "step": (),
    }
    for t, states in enumerate(run["states"]):
        fields = {**dict(states.agents.items()), **dict(states.episode.items())}
        # a fixed game leaves the fields of team draws and map generators empty
        assert all(fields.pop(k) is None for k in ("present", "boxes", "box_valid")), t
        assert set(fields) == set(STATE_DTYPES), t
        for field, value in fields.items():
            assert value.dtype == STATE_DTYPES[field], (t, field, value.dtype)
            assert value.shape == (BATCH, *shapes.get(field, (n,))), (t, field, value.shape)


def test_step_counter_counts_steps(scenario):
    _, _, run = scenario
    for t, states in enumerate(run["states"]):
        np.testing.assert_array_equal(states.episode.step, np.full(BATCH, t, np.int32))


# ------------------------------------------------------------------------------------------
# Determinism
# ------------------------------------------------------------------------------------------


def test_same_keys_give_bit_identical_rollouts(scenario):
    name, _, run = scenario
    again = _rollout(name, SEED)
    leaves, tree = jax.tree_util.tree_flatten(run)
    leaves2, tree2 = jax.tree_util.tree_flatten(again)
    assert tree == tree2
    for a, b in zip(leaves, leaves2, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_different_keys_give_different_start_positions(scenario):
    name, env, run = scenario
    agents = run["states"][0].agents
    # two games of one batch (different keys)
    assert not np.array_equal(agents.x[0], agents.x[1])
    assert not np.array_equal(agents.y[0], agents.y[1])
    # another seed
    _, other = env.v_reset(jax.random.split(jax.random.key(SEED + 1000), BATCH))
    assert not np.array_equal(np.asarray(other.agents.x), agents.x)
