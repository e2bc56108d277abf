"""The native hazards kernel (gigastep/game/_native/hazards.cc) against the JAX code it replaces.

On the CPU `interactions.hazards` (leaving the map, collisions, boxes) runs as one C++ kernel;
elsewhere `jax_hazards` runs. These tests hold the two to the same booleans on random states
built to hit every comparison's boundary (agents at the map's edges, exactly at the collision
radius and altitude, coincident, inside and on box edges) and on non-finite states, and check
the one machine fact the kernels depend on: whether XLA fuses multiply-adds here.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep import env as genv
from gigastep.game import _native, interactions
from gigastep.game.arena import map_arrays
from gigastep.types import EnvConfig

F32 = np.float32


CASES = {
    # name: EnvConfig keyword arguments
    "5v5 with boxes": dict(teams=(0,) * 5 + (1,) * 5, map_set="all", collision_range=0.5),
    "no collisions": dict(teams=(0, 0, 1, 1), collision_range=0.0, map_set="all"),
    "one agent": dict(teams=(0,)),
    "two agents, wide range": dict(teams=(0, 1), collision_range=3.0, collision_altitude=4.0),
    "20v20": dict(teams=(0,) * 20 + (1,) * 20, map_set="all"),
}


def _config(name: str) -> EnvConfig:
    return EnvConfig(obs_type="vector", **CASES[name])


def _states(config: EnvConfig, batch: int, seed: int, nonfinite: bool = False):
    """(agents, boxes, box_valid) of `batch` games: half crowded into a small square (many
    collisions), some agents on the map's edges, some coincident, some at exactly the
    collision radius or altitude from another, a few inside or on the edge of a box."""
    rng = np.random.default_rng(seed)
    n, lx, ly = config.n_agents, config.limit_x, config.limit_y
    _, states = genv.batched_reset(config, jax.random.split(jax.random.PRNGKey(seed), batch))
    x = rng.uniform(-0.05 * lx, 1.05 * lx, (batch, n)).astype(F32)
    y = rng.uniform(-0.05 * ly, 1.05 * ly, (batch, n)).astype(F32)
    crowd = rng.random((batch, 1)) < 0.5
    x = np.where(crowd, 0.4 * lx + 0.1 * x, x).astype(F32)
    y = np.where(crowd, 0.4 * ly + 0.1 * y, y).astype(F32)
    z = rng.uniform(0, config.z_max, (batch, n)).astype(F32)
    edge = rng.random((batch, n)) < 0.1
    x[edge] = rng.choice(np.asarray([0.0, lx, -0.0], F32), edge.sum())
    if n > 3:
        # agents 0-3 on a grid of 1/8, so that these offsets are exact: 1 on 0's position at
        # exactly the collision altitude above it, 2 exactly at the collision radius along x
        # (both radius and altitude are multiples of 1/8 in the cases that test this), 3 at a
        # distance whose square XLA's fused multiply-add and two roundings put on opposite
        # sides of the radius
        for a in (x, y, z):
            a[:, 0] = np.round(a[:, 0] * 8) / 8
        x[:, 1], y[:, 1] = x[:, 0], y[:, 0]
        z[:, 1] = z[:, 0] + F32(config.collision_altitude)
        x[:, 2], y[:, 2], z[:, 2] = x[:, 0] + F32(config.collision_range), y[:, 0], z[:, 0]
        x[:, 3], y[:, 3] = _straddling(x[:, 0], y[:, 0], F32(config.collision_range**2), rng)
        z[:, 3] = z[:, 0]
    maps = map_arrays(config)
    idx = rng.integers(0, maps.boxes.shape[0], batch)
    boxes, valid = maps.boxes[idx], maps.box_valid[idx]
    if valid.any():  # an agent on a box's left edge (not inside: the test is strict)
        b = np.argmax(valid, axis=1)
        x[:, -1] = boxes[np.arange(batch), b, 0]
        y[:, -1] = 0.5 * (boxes[np.arange(batch), b, 1] + boxes[np.arange(batch), b, 3])
    heading = rng.uniform(-4, 4, (batch, n)).astype(F32)
    if nonfinite:
        bad = np.asarray([np.nan, np.inf, -np.inf, 3e38, -3e38], F32)
        for a in (x, y, z):
            mask = rng.random((batch, n)) < 0.05
            a[mask] = rng.choice(bad, mask.sum())
    agents = states.agents.replace(
        x=jnp.asarray(x),
        y=jnp.asarray(y),
        z=jnp.asarray(z),
        heading=jnp.asarray(heading),
        alive=jnp.asarray(rng.random((batch, n)) < 0.85),
    )
    return agents, jnp.asarray(boxes), jnp.asarray(valid)


def _straddling(x0, y0, r2, rng):
    """Per game a float32 point (x1, y1) whose squared distance to (x0, y0), computed as
    fma(dx, dx, dy * dy) and as dx * dx + dy * dy with two roundings, lies on opposite sides
    of r2 (where such a point was found among 200 tries near the circle: two games in three;
    elsewhere (x0 + 1, y0))."""
    out = np.stack([x0 + 1, y0]).astype(F32)
    for g in range(x0.size):
        for _ in range(200):
            angle = rng.uniform(0, 2 * np.pi)
            r = np.sqrt(r2) * (1 + rng.uniform(-4e-7, 4e-7))
            x1 = F32(x0[g] + r * np.cos(angle))
            y1 = F32(y0[g] + r * np.sin(angle))
            dx, dy = np.float64(F32(x0[g] - x1)), np.float64(F32(y0[g] - y1))
            dy2 = np.float64(F32(dy * dy))
            fused = F32(dx * dx + dy2)
            apart = F32(np.float64(F32(dx * dx)) + dy2)
            if (fused < r2) != (apart < r2):
                out[:, g] = x1, y1
                break
    return out[0], out[1]


def _both(config: EnvConfig):
    def jax_fn(agents, boxes, valid):
        return interactions.jax_hazards(config, agents, interactions.geometry(agents), boxes, valid)

    def native_fn(agents, boxes, valid):
        return interactions.native_hazards(config, agents, boxes, valid)

    return jax.jit(jax.vmap(jax_fn)), jax.jit(jax.vmap(native_fn))


def _assert_equal(got, want):
    for field in ("oob", "collided", "in_box", "alive"):
        a, b = np.asarray(getattr(got, field)), np.asarray(getattr(want, field))
        assert a.dtype == b.dtype == np.bool_ and a.shape == b.shape, field
        differ = np.argwhere(a != b)
        assert differ.size == 0, f"{field} differs at {len(differ)} places, first {differ[0]}"


@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_the_jax_hazards(native, name):
    config = _config(name)
    jax_fn, native_fn = _both(config)
    inputs = _states(config, batch=400, seed=1)
    want = jax_fn(*inputs)
    _assert_equal(native_fn(*inputs), want)
    if config.n_agents > 2 and config.collision_range > 0:
        # the states do exercise the rules: collisions and out-of-bounds agents occur
        assert np.asarray(want.collided).any() and np.asarray(want.oob).any()


@pytest.mark.parametrize("name", ["5v5 with boxes", "20v20"])
def test_kernel_matches_the_jax_hazards_on_non_finite_states(native, name):
    config = _config(name)
    jax_fn, native_fn = _both(config)
    inputs = _states(config, batch=300, seed=2, nonfinite=True)
    _assert_equal(native_fn(*inputs), jax_fn(*inputs))


def test_kernel_under_nested_vmap_and_without_jit(native):
    config = _config("5v5 with boxes")
    inputs = _states(config, batch=6, seed=3)
    want = _both(config)[0](*inputs)

    def fn(agents, boxes, valid):
        return interactions.native_hazards(config, agents, boxes, valid)

    nested = jax.tree.map(lambda a: a.reshape(2, 3, *a.shape[1:]), inputs)
    got = jax.jit(jax.vmap(jax.vmap(fn)))(*nested)
    _assert_equal(jax.tree.map(lambda a: a.reshape(6, *a.shape[2:]), got), want)
    one = jax.tree.map(lambda a: a[4], inputs)
    _assert_equal(fn(*one), jax.tree.map(lambda a: a[4], want))  # eager, unbatched


def test_the_kernel_reports_a_wrong_operand_shape(native):
    """The handler checks every operand (called directly, bypassing the Python wrapper)."""
    call = jax.ffi.ffi_call("gigastep_hazards", jax.ShapeDtypeStruct((2, 4, 3), jnp.bool_))
    f = np.zeros((2, 4), F32)
    with pytest.raises(Exception, match=r"operand z has shape \(2, 3\), expected \(2, 4\)"):
        call(
            f,
            f,
            np.zeros((2, 3), F32),
            np.ones((2, 4), bool),
            np.zeros((2, 1, 4), F32),
            np.ones((2, 1), bool),
            collisions=True,
            limit_x=F32(10),
            limit_y=F32(10),
            coll_r2=F32(0.16),
            coll_alt=F32(0.5),
        )


def test_the_cpu_step_runs_the_kernel_and_the_switch_turns_it_off(native, monkeypatch):
    config = _config("5v5 with boxes")

    def step_hlo():
        env = genv.GigastepEnv(config)
        _, state = env.reset(jax.random.PRNGKey(0))
        actions = jnp.zeros((config.n_agents, 3), jnp.float32)
        step = jax.jit(lambda s, a, k: genv.step(config, s, a, k))
        return step.lower(state, actions, jax.random.PRNGKey(1)).as_text()

    assert "gigastep_hazards" in step_hlo()
    monkeypatch.setenv("GIGASTEP_NATIVE", "0")
    assert "gigastep_hazards" not in step_hlo()


def test_the_multiply_add_probe_describes_the_step_geometry(native):
    """`xla_fuses_multiply_add` says how XLA computes the geometry's squared distances here:
    fused, d2 = fma(dx, dx, dy * dy); or apart, dx * dx then + dy * dy (float64 gives both
    exactly: the products of floats are exact in it, and the one rounding is then to float32,
    which for the fused form is fma's single rounding on these values)."""
    fused = _native.xla_fuses_multiply_add()
    assert fused in (True, False)
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 10, (2000, 6)).astype(F32)
    y = rng.uniform(0, 10, (2000, 6)).astype(F32)

    @jax.jit
    def d2(x, y):
        dx = x[:, :, None] - x[:, None, :]
        dy = y[:, :, None] - y[:, None, :]
        return dx * dx + dy * dy

    got = np.asarray(d2(x, y))
    dx = (x[:, :, None] - x[:, None, :]).astype(np.float64)
    dy = (y[:, :, None] - y[:, None, :]).astype(np.float64)
    dy2 = (dy * dy).astype(F32).astype(np.float64)
    apart = ((dx * dx).astype(F32).astype(np.float64) + dy2).astype(F32)
    joined = (dx * dx + dy2).astype(F32)
    assert np.array_equal(got, joined if fused else apart)
    assert not np.array_equal(joined, apart)  # the two forms do differ on these values


def test_without_a_cpu_backend_the_probe_answers_none_and_no_kernel_is_built(monkeypatch):
    """A process without XLA's CPU backend (JAX_PLATFORMS=cuda) cannot be asked: the probe
    says None and building the kernels fails with a BuildError naming why (which `load`
    turns into a warning and the pure JAX path), not a crash."""

    def no_cpu(backend=None):
        raise RuntimeError(f"Unknown backend {backend}")

    monkeypatch.setattr(jax, "local_devices", no_cpu)
    probe = _native.xla_fuses_multiply_add.__wrapped__
    assert probe() is None
    monkeypatch.setattr(_native, "xla_fuses_multiply_add", probe)
    with pytest.raises(_native.BuildError, match="neither as one fused multiply-add"):
        _native._flags()


_SEPARATE_ROUNDINGS = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from gigastep.game import _native
    from tests.game import test_native_hazards as t
    from tests.game import test_native_vector_obs as v
    assert _native.xla_fuses_multiply_add() is False, _native.xla_fuses_multiply_add()
    ok, detail = _native._load_cached()
    assert ok, detail
    for name in ("5v5 with boxes", "20v20"):
        config = t._config(name)
        jax_fn, native_fn = t._both(config)
        inputs = t._states(config, batch=200, seed=5, nonfinite=True)
        t._assert_equal(native_fn(*inputs), jax_fn(*inputs))
    config = v._config("5v5")
    jax_fn, native_fn = v._paths(config)
    inputs = v._random_inputs(config, batch=64, seed=6)
    v._assert_same_bits(native_fn(*inputs), jax_fn(*inputs))
    print("ok")
""")


@pytest.mark.slow
@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"),
    reason="--xla_cpu_max_isa names x86 instruction sets",
)
def test_kernels_match_an_xla_that_rounds_products_apart(native, tmp_path):
    """On a host without fused multiply-adds XLA rounds a * b + c * d twice. XLA limited to
    SSE4.2 does so here: the probe must say so, and the kernels built for it (in a fresh
    cache) must still match the JAX code bit for bit, the hazards and the vector observation
    (whose heading differences depend on it)."""
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_cpu_max_isa=SSE4_2",
        GIGASTEP_CACHE_DIR=str(tmp_path),
        JAX_PLATFORMS="cpu",
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run(
        [sys.executable, "-c", _SEPARATE_ROUNDINGS],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
        result.stdout[-2000:] + result.stderr[-4000:]
    )
