"""The native CPU observation kernel (gigastep/game/_native) against the JAX code it replaces.

On the CPU the environment computes visibility + the vector observation with one compiled C++
kernel; elsewhere (GPU, or GIGASTEP_NATIVE=0, or no compiler) the JAX functions
`visibility` + `vector_observations` run. The rule and reference tests exercise whichever the
CPU uses (the kernel); these tests hold the two paths to the same bits on random inputs
chosen to hit every branch: distance ties, unseen and dead agents, wrapped headings, signed
zeros, fewer rows than agents, waypoints, boxes, both communication modes, zero
communication range, the counting-sort and insertion paths (n <= 16 and n > 16).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep import env as genv
from gigastep.game import _native
from gigastep.game import random as grandom
from gigastep.game.observations.vector import (
    jax_vector_observations,
    native_supported,
    native_vector_observations,
)
from gigastep.types import EnvConfig, EnvState

F32 = np.float32


def _teams(n, rng):
    return tuple(int(t) for t in rng.permutation(np.arange(n) % 2))


CASES = {
    # name: (n, EnvConfig overrides)
    "5v5": (10, {}),
    "5v1 waypoints": (6, {"enable_waypoints": True}),
    "4v4 deterministic comm": (8, {"stochastic_comm": False}),
    "3v3 zero comm range": (6, {"communication_range": 0.0}),
    "7 agents, 3 rows": (7, {"max_agents_in_vec_obs": 3}),
    "2 agents": (2, {}),
    "16 agents (largest counting sort)": (16, {}),
    "17 agents (insertion path)": (17, {"max_agents_in_vec_obs": 6}),
    "20v20": (40, {"map_set": "all"}),
    "64 agents, waypoints, deterministic": (
        64,
        {"enable_waypoints": True, "stochastic_comm": False},
    ),
}


def _config(name):
    n, overrides = CASES[name]
    rng = np.random.default_rng(len(name))
    return EnvConfig(teams=_teams(n, rng), obs_type="vector", **overrides)


def _random_inputs(config: EnvConfig, batch: int, seed: int):
    """A batch of random observation inputs. Positions on a coarse grid make distance ties
    common; headings span several turns; some values are -0.0."""
    n = config.n_agents
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, (batch, n)).astype(F32) * F32(1.5)
    y = rng.integers(0, 6, (batch, n)).astype(F32) * F32(1.5)
    x[:, 0] = -0.0
    z = rng.uniform(-1, 5, (batch, n)).astype(F32)
    heading = rng.uniform(-12, 12, (batch, n)).astype(F32)
    v = rng.uniform(0, 3, (batch, n)).astype(F32)
    health = rng.uniform(0, 2, (batch, n)).astype(F32)
    alive = rng.random((batch, n)) < 0.8
    dx, dy = x[:, :, None] - x[:, None, :], y[:, :, None] - y[:, None, :]
    dist = np.sqrt(dx * dx + dy * dy).astype(F32)
    detected = rng.random((batch, n, n)) < 0.3
    comm = rng.random((batch, n, n)).astype(F32)
    comm[:, :, : n // 3] = 0.0  # a uniform of exactly 0 shares only at ratio 0
    boxes = rng.uniform(-5, 15, (batch, max(config.max_boxes, 1), 4)).astype(F32)
    waypoint = rng.uniform(0, 10, (batch, 4)).astype(F32)
    waypoint_time = rng.choice(np.asarray([0.0, 1.5, -0.0], F32), batch)
    states = []
    for b in range(batch):
        s = EnvState.create(
            config,
            x=x[b],
            y=y[b],
            z=z[b],
            v=v[b],
            heading=heading[b],
            health=health[b],
            alive=alive[b],
            waypoint=waypoint[b],
            waypoint_time=waypoint_time[b],
        )
        states.append(s)
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *states)
    return stacked.agents, stacked.episode, dist, detected, comm, boxes


@functools.cache
def _paths(config: EnvConfig):
    def jax_path(agents, episode, dist, detected, comm, boxes):
        return jax_vector_observations(config, agents, episode, dist, detected, comm, boxes)

    def native_path(agents, episode, dist, detected, comm, boxes):
        return native_vector_observations(config, agents, episode, dist, detected, comm, boxes)

    return jax.jit(jax.vmap(jax_path)), jax.jit(jax.vmap(native_path))


def _assert_same_bits(got, want):
    """Every value identical: the same float32 bits (signed zeros included), except that two
    NaNs count as equal whatever their sign and payload bits."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        where = tuple(int(i) for i in np.argwhere(~same)[0])
        raise AssertionError(
            f"{int((~same).sum())} values differ; first at {where}: "
            f"native {got[where]!r} vs JAX {want[where]!r}"
        )


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_the_jax_path_bit_for_bit(native, name):
    config = _config(name)
    jax_fn, native_fn = _paths(config)
    inputs = _random_inputs(config, batch=24, seed=7)
    want = jax_fn(*inputs)
    _assert_same_bits(native_fn(*inputs), want)
    # The inputs exercise what they should: someone sees someone, some egos are dead.
    obs = np.asarray(want)
    assert (obs[:, :, 9::9][..., : config.vec_agents - 1] == 1).any()
    assert (obs == 0).all(axis=-1).any()


# Values that break naive code: NaN and infinities, and finite values whose differences or
# squares overflow (distances of +inf between finite positions).
SPECIALS = np.asarray([np.nan, np.inf, -np.inf, 1e30, -1e30, 3e38, -3e38, -0.0], F32)


def _nonfinite_inputs(config: EnvConfig, batch: int, seed: int):
    """`_random_inputs` with about one value in six of every agent field replaced by one of
    SPECIALS (as `dataclasses.replace` or a diverged step could leave them), and the
    distances recomputed from the positions as `interactions.geometry` does (NaN, +inf)."""
    agents, episode, _, detected, comm, boxes = _random_inputs(config, batch, seed)
    rng = np.random.default_rng(seed + 1)
    fields = {}
    for name in ("x", "y", "z", "heading", "v", "health"):
        value = np.array(getattr(agents, name))
        spoil = rng.random(value.shape) < 1 / 6
        value[spoil] = rng.choice(SPECIALS, int(spoil.sum()))
        fields[name] = value
    with np.errstate(over="ignore", invalid="ignore"):
        dx = fields["x"][:, :, None] - fields["x"][:, None, :]
        dy = fields["y"][:, :, None] - fields["y"][:, None, :]
        dist = np.sqrt(dx * dx + dy * dy).astype(F32)
    agents = agents.replace(**{k: jnp.asarray(v) for k, v in fields.items()})
    return agents, episode, dist, detected, comm, boxes


@pytest.mark.parametrize(
    "name",
    ["5v5", "4v4 deterministic comm", "7 agents, 3 rows", "17 agents (insertion path)", "20v20"],
)
def test_kernel_matches_the_jax_path_on_non_finite_states(native, name):
    """Same bits (NaNs aside) where agents hold NaN, infinite or overflowing values; and no
    NaN or infinity reaches an observation from an agent that is not finite."""
    config = _config(name)
    jax_fn, native_fn = _paths(config)
    inputs = _nonfinite_inputs(config, batch=24, seed=5)
    want = jax_fn(*inputs)
    _assert_same_bits(native_fn(*inputs), want)
    agents = inputs[0]
    finite = np.all(
        [np.isfinite(np.asarray(getattr(agents, k))) for k in ("x", "y", "z", "heading", "v")],
        axis=0,
    )
    obs = np.asarray(want)
    assert (~finite).any() and (obs[~finite] == 0).all()  # non-finite egos observe zeros
    assert (~np.isfinite(obs)).any()  # overflowing features do reach the observations


@pytest.mark.slow
def test_a_non_finite_state_steps_the_same_with_the_kernel_and_without(native, monkeypatch):
    """Whole steps from states made non-finite with `replace` (EnvState.create refuses them):
    every output equal, kernel or not."""
    config = EnvConfig(teams=(0, 0, 0, 1, 1), obs_type="vector", enable_waypoints=True)
    _, states = genv.batched_reset(config, jax.random.split(jax.random.PRNGKey(2), 6))
    x, heading = np.array(states.agents.x), np.array(states.agents.heading)
    x[0, 1], x[1, 3], x[2, 0], heading[3, 2], heading[4, 4] = np.nan, np.inf, 3e38, np.nan, -np.inf
    states = states.replace(
        agents=states.agents.replace(x=jnp.asarray(x), heading=jnp.asarray(heading))
    )
    keys = jax.random.split(jax.random.PRNGKey(3), 6)
    actions = jax.random.uniform(jax.random.PRNGKey(4), (6, 5, 3), minval=-1, maxval=1)

    def run(states, actions, keys):
        return genv.batched_step(config, states, actions, keys)

    with_kernel = jax.jit(run)(states, actions, keys)
    monkeypatch.setenv("GIGASTEP_NATIVE", "0")
    without = jax.jit(lambda *a: run(*a))(states, actions, keys)
    for got, want in zip(jax.tree.leaves(with_kernel), jax.tree.leaves(without), strict=True):
        if np.asarray(got).dtype == np.float32:
            _assert_same_bits(got, want)
        else:
            np.testing.assert_array_equal(got, want)
    assert np.isnan(np.asarray(with_kernel[1].agents.x)).any()  # the spoilt games went on


def test_kernel_under_nested_vmap_and_without_jit(native):
    config = _config("5v5")
    inputs = _random_inputs(config, batch=6, seed=3)
    want = _paths(config)[0](*inputs)

    def fn(agents, episode, dist, detected, comm, boxes):
        return native_vector_observations(config, agents, episode, dist, detected, comm, boxes)

    nested = jax.tree.map(lambda a: a.reshape(2, 3, *a.shape[1:]), inputs)
    got = jax.jit(jax.vmap(jax.vmap(fn)))(*nested)
    _assert_same_bits(np.asarray(got).reshape(np.shape(want)), want)
    one = jax.tree.map(lambda a: a[4], inputs)
    _assert_same_bits(fn(*one), np.asarray(want)[4])  # eager, unbatched


def _step_hlo(config):
    env = genv.GigastepEnv(config)
    obs, state = env.reset(jax.random.PRNGKey(0))
    actions = jnp.zeros((config.n_agents, 3), jnp.float32)
    # The unjitted step in a fresh lambda: traced now, so the current GIGASTEP_NATIVE applies
    # (the env's own compiled step keeps the choice made at its first trace).
    lowered = jax.jit(lambda s, a, k: genv.step(config, s, a, k)).lower(
        state, actions, jax.random.PRNGKey(1)
    )
    return lowered.as_text()


def test_the_cpu_step_uses_the_kernel_and_the_switch_turns_it_off(native, monkeypatch):
    config = _config("5v5")
    assert "gigastep_vector_obs" in _step_hlo(config)
    monkeypatch.setenv("GIGASTEP_NATIVE", "0")
    assert not native_supported(config)
    assert "gigastep_vector_obs" not in _step_hlo(config)


def test_rgb_vector_configs_use_the_kernel_for_their_vector_part(native):
    config = EnvConfig(teams=(0, 1), obs_type="rgb_vector", resolution_x=16, resolution_y=16)
    text = _step_hlo(config)
    assert "gigastep_vector_obs" in text and "gigastep_rgb_obs" in text


def test_rgb_and_oversized_configs_use_the_jax_path(native):
    rgb = EnvConfig(teams=(0, 1), obs_type="rgb", resolution_x=16, resolution_y=16)
    assert "gigastep_vector_obs" not in _step_hlo(rgb)
    big = EnvConfig(teams=tuple(i % 2 for i in range(66)), obs_type="vector")
    assert not native_supported(big)


@pytest.mark.slow
@pytest.mark.parametrize("obs_type", ["vector", "rgb_vector"])
def test_steps_resets_and_autoresets_with_the_kernel_equal_those_without(
    native, monkeypatch, obs_type
):
    """Whole steps (noise, dynamics, combat, then observations; the kernel hashing the
    communication noise itself) agree bit for bit, through resets and auto-resets (episodes
    of 2 steps: fresh games' noise streams are taken where games end). With rgb_vector the
    images come from the JAX visibility (the RGB kernel with the kernels on) and the vectors
    from the kernel."""
    config = EnvConfig(
        teams=(0, 0, 0, 1, 1),
        obs_type=obs_type,
        enable_waypoints=True,
        max_episode_length=2,
        resolution_x=16,
        resolution_y=12,
    )
    keys = jax.random.split(jax.random.PRNGKey(5), 16)
    actions = jax.random.uniform(jax.random.PRNGKey(6), (16, 5, 3), minval=-1, maxval=1)

    def rollout(keys, actions):
        # Every output of the steps is returned, as a caller would use them: XLA on CPU may
        # fuse a dead-code-free producer (say the new positions) into the observation and
        # contract it into multiply-adds there, which changes last bits of the JAX path's
        # observation depending on which other outputs the program keeps.
        obs, states = genv.batched_reset(config, keys)
        out = [obs, states]
        for t in range(2):
            k = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, t)
            out += genv.batched_step(config, states, actions, k)
            obs, states, _, _, done, info = genv.batched_step_autoreset(config, states, actions, k)
            out += [obs, states, info.final_obs]
        return out, done

    with_kernel, done = jax.jit(lambda k, a: rollout(k, a))(keys, actions)
    assert np.asarray(done).all()  # every game ended and was replaced in the last step
    monkeypatch.setenv("GIGASTEP_NATIVE", "0")
    without, _ = jax.jit(lambda k, a: rollout(k, a))(keys, actions)
    for got, want in zip(jax.tree.leaves(with_kernel), jax.tree.leaves(without), strict=True):
        if np.asarray(got).dtype == np.float32:
            _assert_same_bits(got, want)
        else:
            np.testing.assert_array_equal(got, want)


def test_gradients_through_a_step_with_the_kernel_equal_those_without(native, monkeypatch):
    """The kernel has no derivative of its own; its derivative rule differentiates the JAX
    code (the same function), so gradients through the observation are unchanged."""
    config = EnvConfig(teams=(0, 0, 1, 1), obs_type="vector", stochastic_comm=True)
    env = genv.GigastepEnv(config)
    _, state = env.reset(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)

    def loss(actions):
        obs, new, rewards, _, _ = genv.step(config, state, actions, key)
        return jnp.sum(obs * obs) + jnp.sum(rewards) + jnp.sum(new.agents.x)

    actions = jnp.full((4, 3), 0.3, jnp.float32)
    with_kernel = jax.jit(jax.grad(lambda a: loss(a)))(actions)
    monkeypatch.setenv("GIGASTEP_NATIVE", "0")
    without = jax.jit(jax.grad(lambda a: loss(a)))(actions)
    np.testing.assert_array_equal(with_kernel, without)
    assert np.abs(np.asarray(with_kernel)).sum() > 0


def test_the_kernel_draws_the_communication_noise_of_a_stream_exactly(native):
    """Given the counter stream instead of the noise array, the kernel hashes the same
    uniforms: its observations equal those computed from the array."""
    config = _config("5v5")
    n = config.n_agents
    inputs = list(_random_inputs(config, batch=8, seed=11))
    keys = jax.random.split(jax.random.PRNGKey(3), 8)
    shapes = [(n, n), (n, n), (4,)]
    inputs[4] = jax.vmap(lambda k: grandom.uniforms(k, shapes)[1])(keys)
    streams = jax.vmap(lambda k: grandom.stream(k, shapes, 1))(keys)

    def fn(agents, episode, dist, detected, comm, boxes, stream):
        return native_vector_observations(
            config, agents, episode, dist, detected, comm, boxes, comm_stream=stream
        )

    from_array = jax.jit(jax.vmap(fn))(*inputs, None)
    from_stream = jax.jit(jax.vmap(fn))(*inputs, streams)
    _assert_same_bits(from_stream, from_array)
    assert not np.array_equal(from_array, jax.jit(jax.vmap(fn))(*inputs, streams + 1))


def test_stream_describes_the_uniforms_it_names():
    """`random.stream` = (the key's two seed words, the array's first counter); hashing its
    counters with a NumPy lowbias32 gives `uniforms(key, shapes)[index]`."""

    def lowbias32(x):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7FEB352D)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(0x846CA68B)
        return x ^ (x >> np.uint32(16))

    key = jax.random.PRNGKey(42)
    shapes = [(3, 4), (2, 5), (7,)]
    for index in range(3):
        seed0, seed1, start = (int(v) for v in np.asarray(grandom.stream(key, shapes, index)))
        assert start == [0, 12, 22][index]
        counter = np.arange(start, start + np.prod(shapes[index]), dtype=np.uint32)
        with np.errstate(over="ignore"):
            bits = lowbias32(
                lowbias32((counter * np.uint32(0x9E3779B9)) ^ np.uint32(seed0)) + np.uint32(seed1)
            )
        want = (bits >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)
        got = np.asarray(grandom.uniforms(key, shapes)[index]).reshape(-1)
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------------------
# Building and loading
# ------------------------------------------------------------------------------------------


def test_a_failed_build_names_the_command_and_the_compiler_output(tmp_path, monkeypatch):
    if _native._compiler() is None:
        pytest.skip("no C++ compiler")
    broken = tmp_path / "broken.cc"
    broken.write_text("this is not C++;\n")
    monkeypatch.setattr(_native, "_SOURCES", [broken])
    monkeypatch.setenv("GIGASTEP_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(_native.BuildError, match=r"compiling the native kernels failed: .*broken"):
        _native.build_library()
    assert not list((tmp_path / "cache").glob("*.so"))  # no half-written library left behind


def test_no_compiler_is_a_clear_build_error(monkeypatch):
    monkeypatch.setattr(_native, "_compiler", lambda: None)
    with pytest.raises(_native.BuildError, match="no C.. compiler found"):
        _native.build_library()


def test_other_backends_neither_build_nor_use_the_kernel(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(_native, "load", lambda: pytest.fail("built on a GPU backend"))
    assert not native_supported(_config("5v5"))


def test_an_unavailable_kernel_warns_once_and_falls_back(monkeypatch):
    monkeypatch.setenv("GIGASTEP_NATIVE", "1")  # enabled, but the build failed
    monkeypatch.setattr(_native, "_load_cached", lambda: (False, "no C++ compiler found"))
    monkeypatch.setattr(_native, "_warned", [])
    with pytest.warns(RuntimeWarning, match="no C.. compiler found.*GIGASTEP_NATIVE=0"):
        assert _native.load() is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native.load() is False  # no second warning
    assert not native_supported(_config("5v5"))


@pytest.mark.slow
def test_the_build_is_cached_by_content(native, tmp_path, monkeypatch):
    monkeypatch.setenv("GIGASTEP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_native, "_FLAGS", [*_native._FLAGS, "-O2"])  # a different key
    first = _native.build_library()
    stamp = first.stat().st_mtime_ns
    assert _native.build_library() == first and first.stat().st_mtime_ns == stamp
    assert _native.status()["native"] is True
    monkeypatch.setenv("GIGASTEP_NATIVE_FLAGS", "-O1 -DGIGASTEP_TEST_FLAG")  # extra flags
    other = _native.build_library()
    assert other != first and other.exists()
