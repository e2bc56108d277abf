"""Rollouts over every device of a mesh, in one process or across processes.

`sharded_rollout(env, num_envs, num_steps, key, policy=None, trajectory=False, mesh=None)`
takes the arguments of `gigastep.rollout.rollout` and returns a `RolloutResult` of the same
structure, with the games split evenly over the devices of `mesh` (default: every device,
a 1-D mesh). Each device resets and plays its own games with `shard_map`: nothing is
communicated while the games run, and the native CPU observation kernel stays per device
(a sharded `jit` would gather the batch to run that kernel).

Same key, same per-game results as `gigastep.rollout.rollout`, bit for bit: the games'
keys are split from `key` up front (`jax.random.split(key, num_envs)`, see
`gigastep.rollout`) and sharded with the games, so game b's randomness does not depend on
the device it runs on nor on how many devices there are. On CPU both compile with the same
XLA options (`gigastep.rollout.compiler_options`), under which a game's arithmetic does not
depend on the batch it is part of; tested on 2 and 4 CPU devices and on 2 processes. (GPUs
are not tested here: there, floats could differ in the last bit between the two programs.)

Several processes (one per host or per GPU): call `jax.distributed.initialize(...)` first,
then `sharded_rollout` with the same arguments in every process; `jax.devices()` (the
default mesh) then spans every process's devices. Each process holds the shards of its own
devices (`result.total_reward.addressable_shards`); `gather(result)` brings the whole result
to every process (or to process 0) as NumPy arrays.

On CPU, N devices per process come from `XLA_FLAGS=--xla_force_host_platform_device_count=N`
(set before JAX starts): one device per core spreads the parts of the step that XLA runs on
one thread over every core.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any, TypeVar, overload

import jax
import numpy as np
from jax import shard_map
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jax.typing import ArrayLike

from gigastep.game.types import EnvConfig
from gigastep.opponents import Policy
from gigastep.rollout import (
    _TRACES,
    PolicyLike,
    RolloutResult,
    Trajectory,
    check_arguments,
    check_policy,
    compiler_options,
    game_keys,
    play_games,
)
from gigastep.versus import EnvLike

_NO_CHECK = {"check_vma": False}

_T = TypeVar("_T")

__all__ = ["default_mesh", "gather", "sharded_rollout"]


def default_mesh() -> Mesh:
    """A 1-D mesh ("games",) of every device of every process (`jax.devices()`)."""
    return Mesh(np.asarray(jax.devices()), ("games",))


def _check_mesh(mesh: Mesh | None, num_envs: int) -> Mesh:
    if mesh is None:
        mesh = default_mesh()
    elif not isinstance(mesh, Mesh):
        raise TypeError(
            f"mesh must be a jax.sharding.Mesh (or None for every device); got "
            f"{type(mesh).__name__}"
        )
    d = mesh.size
    if num_envs % d:
        lo, hi = (num_envs // d) * d, (num_envs // d + 1) * d
        near = f"{lo} or {hi}" if lo else f"{hi}"
        raise ValueError(
            f"num_envs={num_envs} does not split evenly over the {d} devices of the mesh; "
            f"use a multiple of {d} (e.g. {near})"
        )
    return mesh


def _specs(mesh: Mesh, trajectory: bool) -> Any:
    """The `shard_map` out_specs of a RolloutResult (a RolloutResult of PartitionSpecs, so
    typed Any): the game axis over every mesh axis (axis 0 of the totals, states and obs;
    axis 1 of the (T, B, ...) trajectory)."""
    games = PartitionSpec(mesh.axis_names)
    per_step: Any = PartitionSpec(None, mesh.axis_names)  # in place of the arrays: Any
    record = None
    if trajectory:
        record = Trajectory(
            obs=per_step, actions=per_step, rewards=per_step, dones=per_step, episode_done=per_step
        )
    fields: dict[str, Any] = dict(
        total_reward=games,
        episodes=games,
        episode_steps=games,
        episode_return_sum=games,
        wins=games,
        draws=games,
        final_state=games,
        final_obs=games,
        trajectory=record,
    )
    return RolloutResult(**fields)


@lru_cache(maxsize=32)
def _compiled(
    config: EnvConfig,
    policy: Policy,
    num_envs: int,
    num_steps: int,
    trajectory: bool,
    impl: str,
    mesh: Mesh,
) -> Callable[[ArrayLike], RolloutResult]:
    """The jitted sharded rollout `key data -> RolloutResult` (one per argument tuple)."""
    check_policy(config, policy)
    platform = mesh.devices.flat[0].platform
    games = PartitionSpec(mesh.axis_names)
    local = partial(play_games, config, policy, num_steps, trajectory, platform == "cpu", impl)
    # Unchecked: no step communicates, and the auto-reset's conditional has a branch of
    # constants (no game to reset) that the varying-axes check would reject.
    no_check: Any = _NO_CHECK
    sharded = shard_map(
        local, mesh=mesh, in_specs=games, out_specs=_specs(mesh, trajectory), **no_check
    )

    def run(key_data: jax.Array) -> RolloutResult:
        _TRACES["sharded_rollout"] += 1
        keys = jax.lax.with_sharding_constraint(
            game_keys(key_data, impl, num_envs), NamedSharding(mesh, games)
        )
        return sharded(keys)

    return jax.jit(
        run,
        in_shardings=NamedSharding(mesh, PartitionSpec()),
        compiler_options=compiler_options(platform),
    )


def _same_everywhere(key_data: np.ndarray, num_envs: int, num_steps: int) -> None:
    """On several processes, check that every process passed the same key and sizes (else
    the games would silently not be the ones `gigastep.rollout.rollout` plays)."""
    from jax.experimental import multihost_utils

    words = np.concatenate(
        [np.asarray(key_data, np.uint32).ravel(), np.asarray([num_envs, num_steps], np.uint32)]
    )
    multihost_utils.assert_equal(
        words, "sharded_rollout needs the same key, num_envs and num_steps in every process"
    )


def sharded_rollout(
    env: EnvLike,
    num_envs: int,
    num_steps: int,
    key: jax.Array,
    policy: PolicyLike = None,
    trajectory: bool = False,
    mesh: Mesh | None = None,
) -> RolloutResult:
    """`gigastep.rollout.rollout` with the games split over the devices of `mesh`.

    Args:
        env, num_envs, num_steps, key, policy, trajectory: as for
            `gigastep.rollout.rollout` (`num_envs` must be a multiple of the mesh's device
            count). With several processes, pass the same values in every process.
        mesh: a `jax.sharding.Mesh`; the games are split over all of its axes. Default: every
            device of every process, as a 1-D mesh ("games",).

    Returns:
        A `RolloutResult` of global arrays sharded along the game axis (axis 1 of the
        trajectory); game b's values equal `gigastep.rollout.rollout(...)`'s bit for bit.
        With several processes each holds only its devices' shards: use `gather` to read
        them all.

    Raises:
        TypeError / ValueError: bad arguments, or `num_envs` not divisible by the device
            count (before any compute); `multihost_utils.assert_equal`'s error if the
            processes disagree on the key or the sizes.
    """
    data: jax.Array | np.ndarray  # the key's data: a host copy unless traced
    genv, num_envs, num_steps, data, impl, policy, trajectory = check_arguments(
        env, num_envs, num_steps, key, policy, trajectory
    )
    mesh = _check_mesh(mesh, num_envs)
    run = _compiled(genv.config, policy, num_envs, num_steps, trajectory, impl, mesh)
    if not isinstance(data, jax.core.Tracer):
        # host data: every process contributes its own (identical) copy of the key
        data = np.asarray(data)
        if jax.process_count() > 1:
            _same_everywhere(data, num_envs, num_steps)
    return run(data)


@overload
def gather(tree: _T, process: None = None) -> _T: ...
@overload
def gather(tree: _T, process: int) -> _T | None: ...
def gather(tree: _T, process: int | None = None) -> _T | None:
    """A pytree of (possibly sharded, possibly multi-process) arrays as NumPy arrays.

    Args:
        tree: e.g. a `RolloutResult` from `sharded_rollout`.
        process: None: every process gets the whole tree. An index (e.g. 0): that process
            gets it, the others get None. It is a collective either way: call it in every
            process (`jax.experimental.multihost_utils.process_allgather`, which copies every
            array to every device; mind the memory with big trajectories).

    Returns:
        The same structure with `np.ndarray` leaves of the global shapes, or None.
    """
    bad = isinstance(process, bool) or not isinstance(process, (int, np.integer))
    if process is not None and (bad or not 0 <= process < jax.process_count()):
        raise ValueError(f"process must be None or in 0..{jax.process_count() - 1}, got {process}")
    if jax.process_count() == 1:
        return jax.tree_util.tree_map(np.asarray, tree)
    from jax.experimental import multihost_utils

    out = multihost_utils.process_allgather(tree, tiled=True)
    return out if process is None or process == jax.process_index() else None
