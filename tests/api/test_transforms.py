"""`reset` and `step` under JAX transformations (the API contract: pure functions, the
same inputs give the same outputs bit for bit, under jit or not, vmapped or not).

* jit versus eager (no jit): bit-identical reset and step;
* `vmap` (`v_reset`, `v_step`) equals a Python loop over the batch;
* `pmap` over two CPU devices, `jit` over a sharded batch and `shard_map` equal `vmap` (in a
  subprocess, since the device count must be set before JAX starts);
* a jitted step traces once for every state and key of the same shape;
* `lax.scan` over 10 steps equals 10 Python-loop steps;
* `reset_done_episodes` resets exactly the masked games;
* `step_autoreset` equals `step` for games that do not finish, and for a finishing game returns
  the finished step's rewards / dones / final observation and a fresh game.

The main config (VEC) is a 2-vs-2 partially observed game on the obstacle maps with waypoints
that appear often, so that stochastic detection, communication, boxes and waypoints all take
part. The same game with `rgb_vector` observations (RGB) is checked in the slow tests; DET is it
with deterministic detection and communication and no waypoints, whose step does not depend on
the key (for the auto-reset comparisons). States are hand built to be crowded (locks, damage,
a waypoint on an agent, an agent leaving the map), plus the states that `reset` gives.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
import textwrap

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.env import GigastepEnv
from gigastep.scenarios import make_config
from gigastep.types import EnvState

VEC = make_config(
    "identical_2_vs_2_pobs_vec_maps_cont", enable_waypoints=True, waypoint_spawn_prob=0.5
)
RGB = VEC.replace(obs_type="rgb_vector", resolution_x=16, resolution_y=16)
# the same game with deterministic detection and communication and no waypoints: its step
# does not depend on the key
DET = VEC.replace(stochastic_obs=False, stochastic_comm=False, enable_waypoints=False)
N = 4  # teams (0, 0, 1, 1)
BATCH = 8
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------------------------------
# Shared compiled functions (one compile per config and function)
# ------------------------------------------------------------------------------------------


@functools.cache
def _env(config) -> GigastepEnv:
    return GigastepEnv(config)


@functools.cache
def _jit_reset(config):
    return jax.jit(_env(config).reset)


@functools.cache
def _jit_step(config):
    # every call in this module has the same shapes and dtypes: a second trace is a bug
    return jax.jit(chex.assert_max_traces(_env(config).step, n=1))


def crowded_state(config) -> EnvState:
    """A hand-built 2-vs-2 state where most phases of a step do something.

    Agents 0 (team 0) and 2 (team 1) face each other 1 apart at (5, 5) / (6, 5) with locks of
    5 steps both ways (damage); agent 1 sits inside the active waypoint at (2, 2); agent 3 is
    0.05 from the right edge heading out of the map.
    """
    tracked = np.zeros((N, N), np.int32)
    tracked[2, 0] = tracked[0, 2] = 5  # [target, shooter]
    return EnvState.create(
        config,
        x=np.array([5.0, 2.0, 6.0, 9.95], np.float32),
        y=np.array([5.0, 2.0, 5.0, 8.0], np.float32),
        z=np.array([1.0, 2.0, 1.0, 3.0], np.float32),
        v=np.array([1.0, 1.5, 1.3, 2.0], np.float32),
        heading=np.array([0.0, 1.0, -math.pi, 0.0], np.float32),
        health=np.array([0.6, 1.0, 0.35, 1.0], np.float32),
        tracked=tracked,
        map_idx=0,
        waypoint=np.array([1.8, 1.8, 2.4, 2.4], np.float32),
        waypoint_time=3.0,
        step=7,
    )


def random_actions(key, n=N):
    return jax.random.uniform(key, (n, 3), jnp.float32, -1.0, 1.0)


def assert_trees_identical(a, b):
    """Same structure, dtypes, shapes and bits."""
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(a)[0]]
    for path, x, y in zip(paths, leaves_a, leaves_b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype, path
        assert x.shape == y.shape, path
        if not np.array_equal(x, y):
            where = np.argwhere(x != y)
            first = tuple(int(i) for i in where[0])
            diff = np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))
            raise AssertionError(
                f"{path} differs at {len(where)} entries, first {first}: {x[first]!r} != "
                f"{y[first]!r} (max abs difference {diff:.3g})"
            )


def _step_inputs(config, count=3):
    """(state, actions, key) triples: the crowded state, then reset states; new keys each."""
    out = []
    for seed in range(count):
        k_state, k_act, k_step = jax.random.split(jax.random.key(100 + seed), 3)
        state = crowded_state(config) if seed == 0 else _jit_reset(config)(k_state)[1]
        out.append((state, random_actions(k_act), k_step))
    return out


def _batch(trees):
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)


def _unbatch(tree, b):
    return jax.tree_util.tree_map(lambda x: x[b], tree)


# ------------------------------------------------------------------------------------------
# jit versus no jit
# ------------------------------------------------------------------------------------------


def _check_jit_matches_eager_reset(config):
    env = _env(config)
    key = jax.random.key(11)
    with jax.disable_jit():
        eager = env.reset(key)
    assert_trees_identical(_jit_reset(config)(key), eager)


def assert_trees_within_ulp(a, b, maxulp):
    """Same structure, dtypes and shapes; integers and booleans bit for bit, floats within
    `maxulp` units in the last place."""
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_array_max_ulp(x, y, maxulp=maxulp)
        else:
            np.testing.assert_array_equal(x, y)


def _check_jit_matches_eager_step(config):
    # XLA on CPU contracts a - b * c into one fused multiply-add inside compiled fusions and
    # rounds the product separately op by op (openxla/xla#41579), so compiled and eager
    # float results may differ in the last bit; everything discrete must match exactly.
    env = _env(config)
    state, actions, key = _step_inputs(config)[0]  # the crowded state
    with jax.disable_jit():
        eager = env.step(state, actions, key)
    assert_trees_within_ulp(_jit_step(config)(state, actions, key), eager, maxulp=2)


@pytest.mark.slow
def test_jit_reset_is_bit_identical_to_eager_reset():
    _check_jit_matches_eager_reset(VEC)


@pytest.mark.slow
def test_jit_step_matches_eager_step_up_to_fma_rounding():
    _check_jit_matches_eager_step(VEC)


@pytest.mark.slow
def test_jit_reset_is_bit_identical_to_eager_reset_rgb():
    _check_jit_matches_eager_reset(RGB)


@pytest.mark.slow
def test_jit_step_matches_eager_step_up_to_fma_rounding_rgb():
    _check_jit_matches_eager_step(RGB)


# ------------------------------------------------------------------------------------------
# vmap versus a Python loop
# ------------------------------------------------------------------------------------------


def test_v_reset_equals_a_loop_of_reset():
    keys = jax.random.split(jax.random.key(5), BATCH)
    batched = _env(VEC).v_reset(keys)
    for b in range(BATCH):
        assert_trees_identical(_unbatch(batched, b), _jit_reset(VEC)(keys[b]))


def test_v_step_equals_a_loop_of_step():
    # the crowded state and reset states; waypoints appear in some of these games
    inputs = _step_inputs(VEC, BATCH)
    states, actions, keys = (_batch(list(x)) for x in zip(*inputs, strict=True))
    batched = _env(VEC).v_step(states, actions, keys)
    for b, (state, action, key) in enumerate(inputs):
        assert_trees_identical(_unbatch(batched, b), _jit_step(VEC)(state, action, key))


# ------------------------------------------------------------------------------------------
# pmap / sharding over two CPU devices (subprocess: the device count is fixed at JAX start)
# ------------------------------------------------------------------------------------------

_MULTI_DEVICE_SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from gigastep.env import GigastepEnv
    from gigastep.scenarios import make_config

    assert jax.device_count() == 2, jax.devices()
    env = GigastepEnv(make_config("identical_2_vs_2_pobs_vec_maps_cont",
                                  enable_waypoints=True, waypoint_spawn_prob=0.5))
    n = env.n_agents

    def check(a, b, what):
        la, ta = jax.tree_util.tree_flatten_with_path(a)
        lb, tb = jax.tree_util.tree_flatten(b)
        assert ta == tb, what
        for (path, x), y in zip(la, lb):
            x, y = np.asarray(x), np.asarray(y)
            where = jax.tree_util.keystr(path)
            assert x.dtype == y.dtype, (what, where, x.dtype, y.dtype)
            if not np.array_equal(x, y):
                bad = np.argwhere(x != y)
                first = tuple(int(i) for i in bad[0])
                raise AssertionError(f"{what} {where}: {len(bad)} entries differ, first "
                                     f"{first}: {x[first]!r} != {y[first]!r}")

    keys = jax.random.split(jax.random.PRNGKey(0), 2)  # one game per device
    actions = jax.random.uniform(jax.random.PRNGKey(1), (2, n, 3), minval=-1, maxval=1)
    fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))

    # vmap reference
    v_obs, v_states = env.v_reset(keys)
    ref = env.v_step(v_states, actions, fold(keys, 0))

    # pmap: one game per device
    p_obs, p_states = jax.pmap(env.reset)(keys)
    check((p_obs, p_states), (v_obs, v_states), "pmap reset")
    p_out = jax.pmap(env.step)(p_states, actions, fold(keys, 0))
    check(p_out, ref, "pmap step")

    # jit over a batch sharded along the game axis
    mesh = Mesh(np.array(jax.devices()), ("games",))
    shard = NamedSharding(mesh, P("games"))
    s_keys, s_actions = jax.device_put(keys, shard), jax.device_put(actions, shard)
    s_obs, s_states = jax.jit(jax.vmap(env.reset))(s_keys)
    check((s_obs, s_states), (v_obs, v_states), "sharded reset")
    s_out = jax.jit(jax.vmap(env.step))(s_states, s_actions, fold(s_keys, 0))
    assert len(s_out[1].agents.x.sharding.device_set) == 2, s_out[1].agents.x.sharding
    check(s_out, ref, "sharded step")

    # shard_map: each device steps its own slice of the batch
    spec = P("games")
    sm_step = jax.jit(jax.shard_map(jax.vmap(env.step), mesh=mesh, in_specs=spec,
                                    out_specs=spec))
    check(sm_step(s_states, s_actions, fold(s_keys, 0)), ref, "shard_map step")

    # shard_map of the batched auto-reset step, two games per device (its conditional's
    # branches must vary over the same mesh axes; the all-zeros one once did not): each
    # device's half equals the batched auto-reset of that half alone
    from functools import partial
    from gigastep import env as genv
    keys4 = jax.random.split(jax.random.PRNGKey(2), 4)
    actions4 = jax.random.uniform(jax.random.PRNGKey(3), (4, n, 3), minval=-1, maxval=1)
    _, states4 = env.v_reset(keys4)
    states4 = states4.replace(agents=states4.agents.replace(  # game 1 ends in this step
        alive=states4.agents.alive.at[1].set(env.config.teams == 0)))
    autoreset = partial(genv.batched_step_autoreset, env.config)
    sm_autoreset = jax.jit(jax.shard_map(autoreset, mesh=mesh, in_specs=spec, out_specs=spec))
    put = lambda tree: jax.device_put(tree, shard)
    got = sm_autoreset(put(states4), put(actions4), put(fold(keys4, 0)))
    halves = [autoreset(*jax.tree_util.tree_map(lambda x: x[i:i + 2],
                                                (states4, actions4, fold(keys4, 0))))
              for i in (0, 2)]
    check(got, jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *halves),
          "shard_map step_autoreset")
    print("MULTI-DEVICE OK")
    """
)


@pytest.mark.subprocess
@pytest.mark.slow
def test_pmap_and_sharded_jit_over_two_cpu_devices_equal_vmap():
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", _MULTI_DEVICE_SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "MULTI-DEVICE OK" in result.stdout


# ------------------------------------------------------------------------------------------
# One compile
# ------------------------------------------------------------------------------------------


def test_jitted_step_traces_once_for_new_states_and_keys():
    step = _jit_step(VEC)  # wrapped in chex.assert_max_traces(n=1)
    state, actions, key = _step_inputs(VEC)[1]
    for t in range(4):  # stepped states, a reset state, a hand-built state, new keys
        _, state, *_ = step(state, actions, jax.random.fold_in(key, t))
    step(_jit_reset(VEC)(jax.random.key(9))[1], actions, key)
    step(crowded_state(VEC), actions * 0.5, jax.random.key(123))


# ------------------------------------------------------------------------------------------
# scan versus a Python loop
# ------------------------------------------------------------------------------------------

SCAN_STEPS = 10


@functools.cache
def _scan_rollout(config):
    env = _env(config)

    def body(state, xs):
        actions, key = xs
        obs, state, rewards, dones, ep_done = env.step(state, actions, key)
        return state, (obs, state, rewards, dones, ep_done)

    return jax.jit(lambda state, actions, keys: jax.lax.scan(body, state, (actions, keys)))


@pytest.mark.slow
def test_scan_of_ten_steps_equals_ten_loop_steps():
    state = crowded_state(VEC)
    actions = jax.random.uniform(jax.random.key(1), (SCAN_STEPS, N, 3), jnp.float32, -1, 1)
    keys = jax.random.split(jax.random.key(2), SCAN_STEPS)
    final, per_step = _scan_rollout(VEC)(state, actions, keys)
    loop_state = state
    for t in range(SCAN_STEPS):
        out = _jit_step(VEC)(loop_state, actions[t], keys[t])
        loop_state = out[1]
        assert_trees_identical(_unbatch(per_step, t), out)
    assert_trees_identical(final, loop_state)


# ------------------------------------------------------------------------------------------
# Batched resets
# ------------------------------------------------------------------------------------------


def _played_batch(batch=BATCH, steps=3):
    """A batch of games played a few steps, with agent 0 of every game killed by hand."""
    env = _env(VEC)
    keys = jax.random.split(jax.random.key(21), batch)
    obs, states = env.v_reset(keys)
    for t in range(steps):
        actions = jax.random.uniform(jax.random.key(t), (batch, N, 3), jnp.float32, -1, 1)
        obs, states, *_ = env.v_step(states, actions, jax.random.split(keys[t], batch))
    agents = states.agents
    agents = agents.replace(
        alive=agents.alive.at[:, 0].set(False), health=agents.health.at[:, 0].set(0.0)
    )
    states = states.replace(agents=agents)
    return obs, states


def test_reset_done_episodes_resets_exactly_the_masked_games():
    env = _env(VEC)
    obs, states = _played_batch()
    mask = np.arange(BATCH) % 3 == 0
    new_obs, new_states = env.reset_done_episodes(obs, states, jnp.asarray(mask), jax.random.key(4))
    for b in np.flatnonzero(~mask):  # untouched, bit for bit
        assert_trees_identical(_unbatch((new_obs, new_states), b), _unbatch((obs, states), b))
    for b in np.flatnonzero(mask):  # fresh games
        fresh = _unbatch(new_states, b)
        assert int(fresh.episode.step) == 0
        assert bool(jnp.all(fresh.agents.alive))
        np.testing.assert_array_equal(np.asarray(fresh.agents.health), np.float32(1.0))
        np.testing.assert_array_equal(np.asarray(fresh.agents.tracked), 0)
        np.testing.assert_array_equal(np.asarray(fresh.episode.returns), 0.0)
        assert not np.array_equal(np.asarray(fresh.agents.x), np.asarray(states.agents.x[b]))


def test_reset_done_episodes_gives_the_masked_games_a_fresh_observation():
    # agent 0 is dead in every game (all-zero observation); in a reset game it is alive again
    env = _env(VEC)
    obs, states = _played_batch()
    obs = obs.at[:, 0].set(0.0)
    mask = np.arange(BATCH) < BATCH // 2
    new_obs, _ = env.reset_done_episodes(obs, states, jnp.asarray(mask), jax.random.key(4))
    for b in np.flatnonzero(mask):
        assert np.any(np.asarray(new_obs[b, 0]) != 0.0), b
    for b in np.flatnonzero(~mask):
        np.testing.assert_array_equal(np.asarray(new_obs[b, 0]), 0.0)


# ------------------------------------------------------------------------------------------
# Auto-reset step
# ------------------------------------------------------------------------------------------


@functools.cache
def _jit_step_autoreset(config):
    return jax.jit(_env(config).step_autoreset)


# The step of DET does not depend on its key, so these comparisons do not depend on how
# `step_autoreset` derives the key of its step from the key it is given.


def test_step_autoreset_equals_step_for_games_that_do_not_finish():
    for state, actions, key in _step_inputs(DET):
        stepped = _jit_step(DET)(state, actions, key)
        auto = _jit_step_autoreset(DET)(state, actions, key)
        assert not bool(stepped[4])  # the game goes on
        assert_trees_identical(auto[:5], stepped)


def test_step_autoreset_info_of_an_unfinished_game():
    state, actions, key = _step_inputs(DET)[0]
    obs, nxt, _, _, _, info = _jit_step_autoreset(DET)(state, actions, key)
    assert not bool(info.terminated) and not bool(info.truncated)
    assert_trees_identical(info.final_obs, obs)
    assert int(info.episode_length) == int(nxt.episode.step) == 8
    np.testing.assert_array_equal(np.asarray(info.episode_return), np.asarray(nxt.episode.returns))


def test_step_autoreset_replaces_a_finished_game_and_keeps_the_last_step():
    # the crowded state at step max_episode_length - 1: this step truncates the game
    state = crowded_state(DET)
    state = state.replace(episode=state.episode.replace(step=jnp.int32(DET.max_episode_length - 1)))
    actions, key = random_actions(jax.random.key(3)), jax.random.key(4)
    stepped = _jit_step(DET)(state, actions, key)
    obs, nxt, rewards, dones, ep_done, info = _jit_step_autoreset(DET)(state, actions, key)
    assert bool(stepped[4]) and bool(ep_done)
    assert bool(info.truncated) and not bool(info.terminated)
    assert_trees_identical((rewards, dones, ep_done), stepped[2:])
    assert_trees_identical(info.final_obs, stepped[0])
    assert int(info.episode_length) == DET.max_episode_length
    assert int(nxt.episode.step) == 0  # a fresh game ...
    assert bool(jnp.all(nxt.agents.alive))
    np.testing.assert_array_equal(np.asarray(nxt.episode.returns), 0.0)
    assert np.any(np.asarray(obs) != np.asarray(stepped[0]))  # ... observed from its start
