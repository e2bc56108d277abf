"""The native RGB kernel (`native_rgb_observations`, gigastep/game/_native/rgb_obs.cc).

The rules of the drawing are tested on both renderers in tests/game/test_rgb.py (hand-built
images and a NumPy reference). Here: the kernel gives the JAX drawing's bytes where no
reference reaches (non-finite states, integer wrap-around, nested vmaps with unbatched
operands, one game without vmap), the environment's step uses it on the CPU and gives the
same observations as with the kernel switched off, and bad operands are errors that name them.
"""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gigastep
from gigastep.game import _native
from gigastep.game.arena import prerender
from gigastep.game.observations import rgb
from gigastep.game.observations.rgb import native_rgb_observations, rgb_observations
from gigastep.types import EnvConfig, EnvState

pytestmark = pytest.mark.skipif(
    not _native.enabled(), reason="GIGASTEP_NATIVE=0 switches the native kernels off"
)

CFG = EnvConfig(
    teams=(0, 1, 1, 0, 1),
    sprites=(1, 3, 5, 7, 2),
    max_health=(1.0, 2.0, 1.0, 3.0, 1.0),
    map_set="all",
    resolution_x=14,
    resolution_y=11,
    enable_waypoints=True,
    waypoint_size=2.0,
)
SPECIAL = np.float32([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e9, -1e9, -0.0])


def _states(cfg: EnvConfig, batch: int, seed: int, special: float = 0.0):
    """`batch` random games; with `special` > 0 that share of x, y, z, heading, health and
    waypoint entries is NaN, +-inf or a float far outside the map."""
    rng = np.random.default_rng(seed)
    n = cfg.n_agents

    def field(low, high, shape):
        return rng.uniform(low, high, shape).astype(np.float32)

    built = [
        EnvState.create(
            cfg,
            x=field(-1, 11, n),
            y=field(-1, 11, n),
            z=field(0, 10, n),
            heading=field(-4, 4, n),
            health=field(0, 3, n),
            alive=rng.uniform(size=n) < 0.8,
            map_idx=int(rng.integers(-1, len(cfg.maps) + 1)),
            waypoint=field(-2, 11, 4),
            waypoint_time=float(rng.uniform() < 0.7),
        )
        for _ in range(batch)
    ]
    states = jax.tree.map(lambda *a: jnp.stack(a), *built)

    def spoil(x):  # EnvState.create refuses non-finite values: they are put in afterwards
        hit = rng.uniform(size=x.shape) < special
        return jnp.where(hit, rng.choice(SPECIAL, x.shape), x)

    spoilt = {
        name: spoil(getattr(states.agents, name)) for name in ("x", "y", "z", "heading", "health")
    }
    episode = states.episode.replace(waypoint=spoil(states.episode.waypoint))
    states = states.replace(agents=states.agents.replace(**spoilt), episode=episode)
    seen = jnp.asarray(rng.uniform(size=(batch, n, n)) < 0.6)
    damaged = jnp.asarray(rng.uniform(size=(batch, n)) < 0.4)
    return states, seen, damaged


def _both(cfg: EnvConfig, *args):
    bg = jnp.asarray(prerender(cfg))

    def run(fn):
        return np.asarray(jax.jit(jax.vmap(lambda a, e, s, d: fn(cfg, bg, a, e, s, d)))(*args))

    return run(rgb_observations), run(native_rgb_observations)


def _assert_same(a: np.ndarray, b: np.ndarray) -> None:
    diff = np.argwhere(a != b)
    assert diff.size == 0, f"{len(diff)} bytes differ, first at {diff[:4].tolist()}"


@pytest.mark.parametrize("special", [0.0, 0.3])
def test_same_bytes_as_the_jax_drawing(native, special):
    # Map indices -1 and K (out of range) are drawn as JAX indexes them (from the end,
    # clamped); NaN and huge floats become whatever int32 XLA converts them to, on both paths.
    states, seen, damaged = _states(CFG, batch=48, seed=int(special * 10), special=special)
    jax_images, native_images = _both(CFG, states.agents, states.episode, seen, damaged)
    assert jax_images.shape == (48, CFG.n_agents, 14, 11, 3)
    _assert_same(jax_images, native_images)


def test_other_configs_without_waypoints_one_map_and_one_agent(native):
    for cfg in (
        EnvConfig(teams=(0, 1, 0), map_set="empty", resolution_x=9, resolution_y=9),
        EnvConfig(teams=(1,), sprites=(7,), resolution_x=8, resolution_y=9),
    ):
        states, seen, damaged = _states(cfg, batch=16, seed=3, special=0.1)
        _assert_same(*_both(cfg, states.agents, states.episode, seen, damaged))


def test_unbatched_and_nested_vmaps_with_shared_operands(native):
    # vmap leaves an operand it does not batch with a batch axis of size 1, which the kernel
    # broadcasts: here seen varies over the inner axis only, the state over the outer one.
    states, seen, damaged = _states(CFG, batch=6, seed=5)
    bg = jnp.asarray(prerender(CFG))
    one = jax.tree.map(lambda x: x[0], states)
    single = [
        np.asarray(fn(CFG, bg, one.agents, one.episode, seen[0], damaged[0]))
        for fn in (rgb_observations, native_rgb_observations)
    ]
    assert single[1].shape == (CFG.n_agents, 14, 11, 3)
    _assert_same(*single)

    def nested(fn):
        inner = jax.vmap(lambda a, e, s, d: fn(CFG, bg, a, e, s, d), in_axes=(None, None, 0, None))
        return np.asarray(
            jax.vmap(inner, in_axes=(0, 0, None, 0))(
                states.agents, states.episode, seen[:3], damaged
            )
        )

    out = nested(native_rgb_observations)
    assert out.shape == (6, 3, CFG.n_agents, 14, 11, 3)
    _assert_same(nested(rgb_observations), out)


def _rollout_digest(scenario: str, overrides: dict, steps: int = 12, batch: int = 6) -> str:
    env = gigastep.make(scenario, **overrides)
    step = jax.jit(env.v_step_autoreset)
    obs, state = jax.jit(env.v_reset)(jax.random.split(jax.random.key(0), batch))
    digest = hashlib.sha256()
    key = jax.random.key(1)
    for _ in range(steps):
        key, k_act, k_step = jax.random.split(key, 3)
        actions = jax.random.uniform(k_act, (batch, env.n_agents, 3), minval=-1, maxval=1)
        obs, state, *_ = step(state, actions, jax.random.split(k_step, batch))
        for leaf in jax.tree.leaves(obs):
            digest.update(np.asarray(leaf).tobytes())
    return digest.hexdigest()


@pytest.mark.slow  # two compilations of an auto-resetting RGB step each way: ~20 s
@pytest.mark.parametrize(
    ("scenario", "overrides"),
    [
        ("waypoint_5_vs_3_pobs_rgb_maps_cont", {}),
        ("identical_5_vs_5_fobs_rgb_maps_cont", {"obs_type": "rgb_vector"}),
    ],
)
def test_the_step_gives_the_same_images_with_the_kernel_off(
    native, monkeypatch, scenario, overrides
):
    with_kernel = _rollout_digest(scenario, overrides)
    monkeypatch.setattr(rgb, "native_rgb_supported", lambda config: False)
    jax.clear_caches()  # the step is compiled once per config: trace it again, kernel off
    try:
        assert _rollout_digest(scenario, overrides) == with_kernel
    finally:
        monkeypatch.undo()
        jax.clear_caches()  # later tests get the kernel again


def test_the_compiled_cpu_step_calls_the_kernel(native):
    env = gigastep.make("identical_5_vs_5_fobs_rgb_maps_cont")
    _, state = env.v_reset(jax.random.split(jax.random.key(0), 2))
    actions = jnp.zeros((2, env.n_agents, 3))
    text = jax.jit(env.v_step).lower(state, actions, jax.random.split(jax.random.key(1), 2))
    assert "gigastep_rgb_obs" in text.as_text()


def test_other_backends_neither_build_nor_use_the_kernel(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(_native, "load", lambda: pytest.fail("built on a GPU backend"))
    assert not rgb.native_rgb_supported(CFG)


def test_switched_off_kernels_are_a_clear_error(monkeypatch):
    monkeypatch.setattr(_native, "load", lambda: False)
    states, seen, damaged = _states(CFG, batch=1, seed=0)
    one = jax.tree.map(lambda x: x[0], states)
    bg = jnp.asarray(prerender(CFG))
    with pytest.raises(RuntimeError, match="native CPU kernels are unavailable.*rgb_observations"):
        native_rgb_observations(CFG, bg, one.agents, one.episode, seen[0], damaged[0])


@pytest.mark.parametrize(
    ("name", "change", "match"),
    [
        (
            "seen",
            lambda a: a | {"seen": a["seen"][:, :-1]},
            r"seen has shape \(5, 4\); expected \(5, 5\)",
        ),
        (
            "took_damage",
            lambda a: a | {"took_damage": a["took_damage"][:2]},
            r"took_damage has shape \(2,\)",
        ),
        (
            "background",
            lambda a: a | {"background": a["background"][0]},
            r"background has shape \(14, 11, 3\)",
        ),
    ],
)
def test_a_bad_argument_is_named_before_any_call(native, name, change, match):
    states, seen, damaged = _states(CFG, batch=1, seed=0)
    one = jax.tree.map(lambda x: x[0], states)
    args = change(
        {"background": jnp.asarray(prerender(CFG)), "seen": seen[0], "took_damage": damaged[0]}
    )
    with pytest.raises(ValueError, match=match):
        native_rgb_observations(
            CFG, args["background"], one.agents, one.episode, args["seen"], args["took_damage"]
        )


def _ffi_operands(batch: int = 2, n: int = 3, rx: int = 6, ry: int = 5) -> dict[str, np.ndarray]:
    """Well-formed operands of a direct kernel call, in the handler's order."""
    rng = np.random.default_rng(0)
    i32 = np.int32
    return {
        "templates": rng.integers(0, 256, (1, 2, 2, rx * ry * 3)).astype(np.uint8),
        "map_idx": np.zeros(batch, i32),
        "alive": np.ones((batch, n), bool),
        "damaged": np.zeros((batch, n), bool),
        "bar_cut": np.full((batch, n), 3, i32),
        "waypoint": np.ones((batch, 3), i32),
        "px": rng.integers(-2, rx + 2, (batch, n)).astype(i32),
        "py": rng.integers(-2, ry + 2, (batch, n)).astype(i32),
        "pz": rng.integers(0, 256, (batch, n)).astype(i32),
        "tails": rng.integers(-1, 6, (batch, 2, 4, n)).astype(i32),
        "seen": np.ones((batch, n, n), bool),
    }


def _ffi(ops: dict, batch: int = 2, n: int = 3, rx: int = 6, ry: int = 5):
    call = jax.ffi.ffi_call(
        "gigastep_rgb_obs", jax.ShapeDtypeStruct((batch, n, rx, ry, 3), jnp.uint8)
    )
    attrs = dict(
        res_x=np.int64(rx),
        res_y=np.int64(ry),
        waypoint_nx=np.int64(2),
        waypoint_ny=np.int64(2),
        waypoints=True,
        teams=np.zeros(n, np.int64),
        sprites=np.full(n, 7, np.int64),
    )
    return np.asarray(call(*ops.values(), **attrs))


def test_well_formed_direct_call_runs(native):
    assert _ffi(_ffi_operands()).shape == (2, 3, 6, 5, 3)


@pytest.mark.parametrize(
    ("operand", "bad"),
    [
        ("templates", np.zeros((1, 2, 2, 6 * 5 * 3 - 1), np.uint8)),  # one byte short
        ("map_idx", np.zeros((3,), np.int32)),  # batch of 3, not 2 or 1
        ("damaged", np.zeros((2, 4), bool)),
        ("bar_cut", np.zeros((2, 2), np.int32)),
        ("waypoint", np.zeros((2, 2), np.int32)),  # the (2,) waypoint of issue 16, here
        ("px", np.zeros((2, 3, 1), np.int32)),
        ("tails", np.zeros((2, 2, 3, 3), np.int32)),
        ("seen", np.zeros((2, 3, 2), bool)),
    ],
)
def test_the_kernel_names_a_misshapen_operand(native, operand, bad):
    ops = _ffi_operands()
    ops[operand] = bad
    with pytest.raises(Exception, match=rf"gigastep_rgb_obs: operand {operand} has shape"):
        _ffi(ops)


def test_the_kernel_rejects_inconsistent_attributes(native):
    call = jax.ffi.ffi_call("gigastep_rgb_obs", jax.ShapeDtypeStruct((2, 3, 6, 5, 3), jnp.uint8))
    with pytest.raises(Exception, match="gigastep_rgb_obs: inconsistent attributes.*teams 2"):
        np.asarray(
            call(
                *_ffi_operands().values(),
                res_x=np.int64(6),
                res_y=np.int64(5),
                waypoint_nx=np.int64(2),
                waypoint_ny=np.int64(2),
                waypoints=True,
                teams=np.zeros(2, np.int64),
                sprites=np.full(3, 7, np.int64),
            )
        )
