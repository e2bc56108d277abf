"""Shared fixtures for the rule tests: small configs and one compiled step per config.

The rule tests (test_rules.py, test_dynamics.py, test_vector_obs.py) build states by hand with
`EnvState.create`, step them once with `env.transition(state, actions, noise)` and a
hand-built `StepNoise`, and compare with values computed by hand from docs/rules.md (§15 overrides
§0-§14). Every config is compiled once per session: `_compiled` is a `functools.cache` keyed by the
(frozen, hashable) `EnvConfig`.

Helpers are reached through the session fixture `gs` (a `Harness`), so test modules never import
this file (pytest imports it under its own name).
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.types import EnvConfig, EnvState, StepNoise


def _jax_cache_folder(root: Path) -> str | None:
    """The first writable folder of: $GIGASTEP_TEST_JAX_CACHE_DIR, the user's cache
    ($XDG_CACHE_HOME or ~/.cache, then gigastep/jax-tests: shared by every clone of the
    project on the machine), the run's .pytest_cache/jax."""
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    candidates = [user / "gigastep" / "jax-tests", root / ".pytest_cache" / "jax"]
    if os.environ.get("GIGASTEP_TEST_JAX_CACHE_DIR"):
        candidates.insert(0, Path(os.environ["GIGASTEP_TEST_JAX_CACHE_DIR"]))
    for folder in candidates:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder):
                return str(folder)
        except OSError:
            continue
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Keep JAX's compiled programs on disk (at most 2 GiB, least recently used first out):
    most of a test run's time is XLA compiling the games, so a later run, in this clone or
    another, loads them instead. The folder is the user's cache (`_jax_cache_folder`).
    The cache key is the program (without source locations), the JAX version and the
    compiler flags, so an edit of the library compiles anew. GIGASTEP_TEST_JAX_CACHE=0 turns
    it off; processes that the tests start get the same folder and settings through the
    environment.

    Every process sharing the folder must use the same size limit: a process without one
    (JAX's default) writes entries without the access-time files that a process with one
    reads when it evicts, and that process then fails with FileNotFoundError."""
    if os.environ.get("GIGASTEP_TEST_JAX_CACHE") == "0":
        return
    folder = _jax_cache_folder(config.rootpath)
    if folder is None:
        return
    settings = {  # name: (value, type); set over any of the user's own
        "jax_compilation_cache_dir": (folder, str),
        "jax_persistent_cache_min_compile_time_secs": ("0.2", float),
        "jax_compilation_cache_max_size": (str(2 * 1024**3), int),
    }
    for name, (value, kind) in settings.items():
        os.environ[name.upper()] = value
        jax.config.update(name, kind(value))


def _cuda_available() -> bool:
    """A CUDA device for torch (the GPU tests compare torch on CUDA with the CPU)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.fixture(scope="session")
def torch_device():
    """The torch device of the device-aware tests (the bridge's, TorchVecEnv's, S5's):
    $GIGASTEP_TEST_DEVICE, "cpu" by default; `.ci/gpu` sets "cuda". Asking for CUDA where
    torch sees none is an error, not a skip: the GPU run must not pass on the CPU."""
    import torch

    device = torch.device(os.environ.get("GIGASTEP_TEST_DEVICE") or "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        pytest.fail(f"GIGASTEP_TEST_DEVICE={device} but torch sees no CUDA device")
    if device.type not in ("cpu", "cuda"):
        pytest.fail(f"GIGASTEP_TEST_DEVICE must be cpu or cuda[:k], got {device}")
    return device


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `gpu` run only where CUDA is available; elsewhere they are skipped."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu and not _cuda_available():
        skip = pytest.mark.skip(reason="gpu: needs a CUDA device")
        for item in gpu:
            item.add_marker(skip)


DT = 0.1
DRAG = 0.4
V_MIN = 1.3


class Step(NamedTuple):
    """One step's outputs as NumPy arrays (agent fields flattened for readability)."""

    obs: np.ndarray  # (n, L) float32
    state: EnvState  # the JAX state, to step again
    rewards: np.ndarray  # (n,) float32
    dones: np.ndarray  # (n,) bool
    ep_done: bool
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray
    v: np.ndarray
    heading: np.ndarray
    health: np.ndarray
    alive: np.ndarray
    tracked: np.ndarray  # (n, n), [target, shooter]


class _Compiled(NamedTuple):
    env: object  # GigastepEnv
    transition: object
    step_autoreset: object


@functools.cache
def _compiled(config: EnvConfig) -> _Compiled:
    # Imported here so that a broken env fails these tests, not the collection of every file.
    from gigastep.env import GigastepEnv

    env = GigastepEnv(config)
    return _Compiled(env, jax.jit(env.transition), jax.jit(env.step_autoreset))


def _unpack(out) -> Step:
    obs, state, rewards, dones, ep_done = out[:5]
    a = state.agents
    return Step(
        obs=np.asarray(obs),
        state=state,
        rewards=np.asarray(rewards),
        dones=np.asarray(dones),
        ep_done=bool(ep_done),
        x=np.asarray(a.x),
        y=np.asarray(a.y),
        z=np.asarray(a.z),
        v=np.asarray(a.v),
        heading=np.asarray(a.heading),
        health=np.asarray(a.health),
        alive=np.asarray(a.alive),
        tracked=np.asarray(a.tracked),
    )


class Harness:
    """Config factory, state builder, noise builder and the cached compiled step."""

    def config(self, **fields) -> EnvConfig:
        """A deterministic 1-vs-1 vector config on the empty map, with `fields` overriding."""
        base = dict(
            teams=(0, 1),
            obs_type="vector",
            map_set="empty",
            stochastic_obs=False,
            stochastic_comm=False,
        )
        base.update(fields)
        return EnvConfig(**base)

    def reward_config(self, **fields) -> EnvConfig:
        """Like `config` but every reward weight 0 unless given (game won/defeat default != 0)."""
        base = dict(reward_game_won=0.0, reward_defeat_one_opponent=0.0)
        base.update(fields)
        return self.config(**base)

    def env(self, config: EnvConfig):
        return _compiled(config).env

    def state(self, config: EnvConfig, **fields) -> EnvState:
        return EnvState.create(config, **fields)

    def noise(
        self, config: EnvConfig, detection=0.0, comm=0.0, waypoint=(0.99, 0.5, 0.5, 0.5), **entries
    ) -> StepNoise:
        """Hand-built noise. Scalars broadcast; `det_I_J=u` / `comm_E_J=u` set single entries.

        Defaults: detection 0 (the stochastic test `q < u` never fires), comm 0 (only the ego
        itself communicates), waypoint appear draw 0.99 (no waypoint appears).
        """
        n = config.n_agents
        det = np.broadcast_to(np.asarray(detection, np.float32), (n, n)).copy()
        com = np.broadcast_to(np.asarray(comm, np.float32), (n, n)).copy()
        for key, u in entries.items():
            kind, i, j = key.split("_")
            target = {"det": det, "comm": com}[kind]
            target[int(i), int(j)] = u
        return StepNoise(
            detection=jnp.asarray(det),
            comm=jnp.asarray(com),
            waypoint=jnp.asarray(waypoint, jnp.float32),
        )

    def noop(self, config: EnvConfig):
        n = config.n_agents
        if config.discrete_actions:
            return jnp.full((n,), 13, jnp.int32)
        return jnp.zeros((n, 3), jnp.float32)

    def step(self, config: EnvConfig, state: EnvState, actions=None, noise=None) -> Step:
        """One `env.transition` (compiled once per config); no-op actions and default noise."""
        actions = self.noop(config) if actions is None else jnp.asarray(actions)
        noise = self.noise(config) if noise is None else noise
        return _unpack(_compiled(config).transition(state, actions, noise))

    def autoreset(self, config: EnvConfig, state: EnvState, actions=None, seed: int = 0):
        """`env.step_autoreset` (compiled once per config): returns (Step, info)."""
        actions = self.noop(config) if actions is None else jnp.asarray(actions)
        out = _compiled(config).step_autoreset(state, actions, jax.random.PRNGKey(seed))
        return _unpack(out), out[5]

    @staticmethod
    def before_noop(x, y, heading, v):
        """Independent reference (rules §3.3, no-op action, float64): the pre-step x, y, v
        from which one no-op step of an alive agent lands on (x, y, v). z and heading do not
        change under a no-op (headings given inside [-pi, pi)).

        With u = 0: v2 = v_pre - dt drag v_pre^2, x' = x + dt v2 cos h, y' = y + dt v2 sin h,
        v' = sqrt(max(v2^2, 1.3^2)). For v' = 1.3 use v_pre = 1.3 (v2 = 1.2324 < 1.3);
        for v' > 1.3 solve v2 = v' for the smaller root.
        """
        x, y, heading, v = (np.asarray(a, np.float64) for a in (x, y, heading, v))
        c = DT * DRAG
        v_pre = np.where(
            np.isclose(v, V_MIN), V_MIN, (1.0 - np.sqrt(np.maximum(1.0 - 4.0 * c * v, 0))) / (2 * c)
        )
        v2 = v_pre - c * v_pre**2
        return x - DT * v2 * np.cos(heading), y - DT * v2 * np.sin(heading), v_pre


@pytest.fixture(scope="session")
def gs() -> Harness:
    return Harness()


@pytest.fixture(scope="session")
def native():
    """The native CPU kernels, built and registered: skips where they may not or cannot run
    (GIGASTEP_NATIVE=0, as the CI's JAX-path run sets; no C++ compiler; a non-CPU default
    backend); with a compiler, a failed build is a failure."""
    from gigastep.game import _native

    if not _native.enabled():
        pytest.skip("GIGASTEP_NATIVE=0 switches the native kernels off")
    if _native._compiler() is None:
        pytest.skip("no C++ compiler: the native kernels cannot be built here")
    if jax.default_backend() != "cpu":
        pytest.skip("the native kernels run on the CPU only")
    ok, detail = _native._load_cached()
    assert ok, detail
    return True
