"""Every operand of the native observation kernel is checked before it is read.

Two layers, each tested per operand: `native_vector_observations` raises a ValueError naming
the operand before building the call, and the FFI handler itself (called here through
`jax.ffi.ffi_call`, bypassing the Python check) returns an error naming the operand, its shape
and the expected one, instead of reading out of bounds (issue 16: a (2,) waypoint was read past
its end). Run under AddressSanitizer by tools/sanitize_native.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.game import _native
from gigastep.game.observations.vector import native_attributes, native_vector_observations
from gigastep.types import EnvConfig, EnvState

N = 4
CONFIG = EnvConfig(teams=(0, 0, 1, 1), obs_type="vector", enable_waypoints=True, map_set="all")
B = 3  # games in the direct FFI calls

pytestmark = pytest.mark.skipif(
    not _native.enabled(), reason="GIGASTEP_NATIVE=0 switches the native kernel off"
)


def _operands(batch: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Well-formed operands of one kernel call, in the handler's order, for `batch` games;
    and "dist", which `native_vector_observations` takes but the handler does not (it
    computes the distances itself)."""
    rng = np.random.default_rng(0)
    f = np.float32
    ops = {name: rng.uniform(0, 10, (*batch, N)).astype(f) for name in ("x", "y", "z")}
    ops["heading"] = rng.uniform(-3, 3, (*batch, N)).astype(f)
    ops["v"] = rng.uniform(0, 2, (*batch, N)).astype(f)
    ops["health"] = np.ones((*batch, N), f)
    ops["alive"] = np.ones((*batch, N), bool)
    dx = ops["x"][..., :, None] - ops["x"][..., None, :]
    dy = ops["y"][..., :, None] - ops["y"][..., None, :]
    ops["dist"] = np.sqrt(dx * dx + dy * dy).astype(f)
    ops["detected"] = rng.random((*batch, N, N)) < 0.5
    ops["comm"] = rng.random((*batch, N, N)).astype(f)
    ops["boxes"] = rng.uniform(0, 10, (*batch, CONFIG.max_boxes, 4)).astype(f)
    ops["waypoint"] = rng.uniform(0, 10, (*batch, 4)).astype(f)
    ops["waypoint_time"] = np.ones(batch, f)
    return ops


def _ffi(ops: dict, out_shape=None):
    """The registered target called directly: no Python-side check."""
    shape = out_shape or (*np.shape(ops["x"]), CONFIG.vector_size)
    call = jax.ffi.ffi_call("gigastep_vector_obs", jax.ShapeDtypeStruct(shape, jnp.float32))
    return np.asarray(call(*_handler_operands(ops), **native_attributes(CONFIG)))


def _handler_operands(ops: dict) -> list[np.ndarray]:
    return [value for name, value in ops.items() if name != "dist"]


# operand -> a wrong (per-game) shape. The batch axis is prepended for the FFI calls.
WRONG = {
    "y": (N - 1,),
    "z": (N + 1,),
    "heading": (3,),
    "v": (N, 1),
    "health": (1,),
    "alive": (3,),
    "detected": (2, 2),
    "comm": (N, 2),
    "boxes": (CONFIG.max_boxes, 3),
    "waypoint": (2,),
    "waypoint_time": (0,),
}
# ... and for the Python check, which also checks the distances the handler does not take
WRONG_PYTHON = {**WRONG, "dist": (N, N - 1)}


def _wrong(name: str, batch: tuple[int, ...]) -> np.ndarray:
    good = _operands(batch)[name]
    return np.zeros((*batch, *WRONG_PYTHON[name]), good.dtype)


def test_well_formed_operands_are_accepted_by_the_handler(native):
    obs = _ffi(_operands((B,)))
    assert obs.shape == (B, N, CONFIG.vector_size) and np.isfinite(obs).all()
    assert (obs[:, :, 0] == 1).all()  # every ego alive: its own row's seen flag


@pytest.mark.parametrize("name", list(WRONG))
def test_the_handler_refuses_an_operand_of_the_wrong_shape(native, name):
    ops = _operands((B,))
    ops[name] = _wrong(name, (B,))
    given = ", ".join(str(d) for d in ops[name].shape)
    with pytest.raises(jax.errors.JaxRuntimeError, match=rf"operand {name}\b.* shape \({given}\)"):
        _ffi(ops)


@pytest.mark.parametrize("name", ["y", "detected", "comm", "waypoint", "waypoint_time", "boxes"])
def test_the_handler_refuses_an_operand_of_another_batch(native, name):
    ops = _operands((B,))
    ops[name] = _operands((B + 1,))[name]
    with pytest.raises(jax.errors.JaxRuntimeError, match=rf"operand {name}\b.*expected \({B},"):
        _ffi(ops)


def test_the_handler_refuses_too_few_boxes(native):
    ops = _operands((B,))
    ops["boxes"] = ops["boxes"][:, : CONFIG.max_boxes - 1]
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"operand boxes .*expected \(3, 4, 4\)"):
        _ffi(ops)


def test_the_handler_refuses_a_stream_of_the_wrong_shape(native):
    ops = _operands((B,))
    ops["comm"] = np.zeros((B, 2), np.uint32)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"comm \(uint32 stream\) has shape"):
        _ffi(ops)


def test_the_handler_refuses_a_wrong_output_shape(native):
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"operand out .*expected \(3, 4, "):
        _ffi(_operands((B,)), out_shape=(B, N, CONFIG.vector_size + 1))


@pytest.mark.parametrize("name,dtype", [("y", np.int32), ("alive", np.float32), ("comm", np.int32)])
def test_the_handler_refuses_an_operand_of_the_wrong_dtype(native, name, dtype):
    ops = _operands((B,))
    ops[name] = ops[name].astype(dtype)
    with pytest.raises(
        jax.errors.JaxRuntimeError,
        match=r"Wrong buffer dtype: expected (F32|PRED)|comm must be float32",
    ):
        _ffi(ops)


def test_the_handler_refuses_inconsistent_agent_counts(native):
    ops = _operands((B,))
    attrs = native_attributes(CONFIG)
    attrs["teams"] = attrs["teams"][:-1]
    call = jax.ffi.ffi_call(
        "gigastep_vector_obs", jax.ShapeDtypeStruct((B, N, CONFIG.vector_size), jnp.float32)
    )
    with pytest.raises(jax.errors.JaxRuntimeError, match="n = 4 agents .* teams 3"):
        np.asarray(call(*_handler_operands(ops), **attrs))


# ------------------------------------------------------------------------------------------
# The Python-side check, before any call
# ------------------------------------------------------------------------------------------


def _python_args(ops: dict):
    fields = ("x", "y", "z", "v", "heading", "health", "alive", "waypoint", "waypoint_time")
    state = EnvState.create(CONFIG, **{k: ops[k] for k in fields})
    return state.agents, state.episode, ops["dist"], ops["detected"], ops["comm"], ops["boxes"]


PYTHON_NAME = {
    "comm": "comm_noise",
    "waypoint": "episode.waypoint",
    "waypoint_time": "episode.waypoint_time",
    "dist": "dist",
    "detected": "detected",
    "boxes": "boxes",
}


def test_well_formed_operands_pass_the_python_check(native):
    agents, episode, dist, detected, comm, boxes = _python_args(_operands(()))
    obs = native_vector_observations(CONFIG, agents, episode, dist, detected, comm, boxes)
    np.testing.assert_array_equal(obs, _ffi(_operands(())))


@pytest.mark.parametrize("name", list(WRONG_PYTHON))
def test_the_python_check_refuses_an_operand_of_the_wrong_shape(name):
    agents, episode, dist, detected, comm, boxes = _python_args(_operands(()))
    args = {"dist": dist, "detected": detected, "comm": comm, "boxes": boxes}
    wrong = jnp.asarray(_wrong(name, ()))
    if name in args:
        args[name] = wrong
    elif name.startswith("waypoint"):
        episode = episode.replace(**{name: wrong})
    else:
        agents = agents.replace(**{name: wrong})
    label = PYTHON_NAME.get(name, f"agents.{name}")
    shape = tuple(WRONG_PYTHON[name])
    with pytest.raises(
        ValueError, match=rf"{label} has shape {shape!r}".replace("(", r"\(").replace(")", r"\)")
    ):
        native_vector_observations(
            CONFIG, agents, episode, args["dist"], args["detected"], args["comm"], args["boxes"]
        )


@pytest.mark.parametrize("name", ["alive", "detected", "dist"])
def test_the_python_check_refuses_an_operand_of_the_wrong_dtype(name):
    agents, episode, dist, detected, comm, boxes = _python_args(_operands(()))
    if name == "alive":
        agents = agents.replace(alive=agents.alive.astype(jnp.float32))
    elif name == "detected":
        detected = detected.astype(np.float32)
    else:
        dist = dist.astype(np.int32)
    with pytest.raises(ValueError, match=rf"{name} has shape .* dtype (float32|int32); expected"):
        native_vector_observations(CONFIG, agents, episode, dist, detected, comm, boxes)


def test_the_python_check_refuses_a_stream_of_the_wrong_shape_or_dtype():
    args = _python_args(_operands(()))
    for stream in (np.zeros(2, np.uint32), np.zeros(3, np.float32)):
        with pytest.raises(ValueError, match=r"comm_stream has shape .*expected shape \(3,\)"):
            native_vector_observations(CONFIG, *args, comm_stream=jnp.asarray(stream))


def test_the_python_check_applies_per_game_under_vmap(native):
    """Inside `jax.vmap` the per-game shapes are checked (the batch axis is not a game's)."""
    agents, episode, dist, detected, comm, boxes = _python_args(_operands(()))
    stack = jax.tree.map(lambda a: jnp.stack([a, a]), (agents, episode, dist, detected, comm))

    def fn(a, e, d, det, c, b):
        return native_vector_observations(CONFIG, a, e, d, det, c, b)

    good = jax.vmap(fn, in_axes=(0, 0, 0, 0, 0, None))(*stack, boxes)
    assert good.shape == (2, N, CONFIG.vector_size)
    with pytest.raises(ValueError, match=r"boxes has shape \(4, 3\)"):
        jax.vmap(fn, in_axes=(0, 0, 0, 0, 0, None))(*stack, boxes[:, :3])
