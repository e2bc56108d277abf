"""`gigastep.parallel.sharded_rollout` equals `gigastep.rollout.rollout` game for game, bit for bit:
on 2 and 4 CPU devices of one process, and on 2 processes joined by `jax.distributed` (a
local coordinator). Each runs in subprocesses, since the device count and the distributed
runtime are fixed when JAX starts. Errors that need no devices are checked here directly.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from gigastep.parallel import sharded_rollout
from gigastep.rollout import joint_policy, rollout
from gigastep.scenarios import make_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The game of test_rollout.py's loop comparison (2 vs 2, stochastic detection and
# communication, obstacle maps, episodes of at most 6 steps so that games restart), its joint
# policy and sizes: when both files run in one process the reference rollout is compiled once.
CONFIG = make_config("identical_2_vs_2_pobs_vec_maps_cont", max_episode_length=6)
POLICY = joint_policy("pursuit", None)
GAMES, STEPS = 4, 14
KEY_SEED = 7

# Each subprocess plays the sharded rollout and saves the gathered result (flattened, one
# npz entry per leaf in tree order) for the parent to compare with its one-device rollout.
_COMMON = textwrap.dedent(
    f"""
    import sys
    import jax, numpy as np
    import gigastep
    from gigastep.parallel import gather, sharded_rollout
    from gigastep.rollout import joint_policy

    ENV = gigastep.make("identical_2_vs_2_pobs_vec_maps_cont", max_episode_length=6)
    POLICY = joint_policy("pursuit", None)
    GAMES, STEPS, SEED = {GAMES}, {STEPS}, {KEY_SEED}  # the key is made after JAX starts

    def save(path, tree):
        leaves = jax.tree_util.tree_leaves(tree)
        np.savez(path, **{{f"leaf{{i:03d}}": np.asarray(x) for i, x in enumerate(leaves)}})
    """
)

_DEVICES_SCRIPT = _COMMON + textwrap.dedent(
    """
    from jax.sharding import Mesh
    assert jax.device_count() == 4, jax.devices()
    KEY = jax.random.key(SEED)
    for d in (2, 4):
        mesh = Mesh(np.array(jax.devices()[:2]), ("games",)) if d == 2 else None  # 4: default
        out = sharded_rollout(ENV, GAMES, STEPS, KEY, POLICY, trajectory=True, mesh=mesh)
        assert len(out.total_reward.sharding.device_set) == d
        assert len(out.trajectory.rewards.sharding.device_set) == d
        save(f"{sys.argv[1]}/devices{d}.npz", gather(out))
    try:
        sharded_rollout(ENV, 6, STEPS, KEY, POLICY)
    except ValueError as e:
        assert "num_envs=6 does not split evenly over the 4 devices" in str(e), e
        assert "4 or 8" in str(e), e
    else:
        raise AssertionError("num_envs=6 on 4 devices did not fail")
    print("DEVICES OK")
    """
)

_PROCESS_SCRIPT = _COMMON + textwrap.dedent(
    """
    folder, port, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    assert jax.process_count() == 2 and jax.device_count() == 4, jax.devices()
    out = sharded_rollout(ENV, GAMES, STEPS, jax.random.key(SEED), POLICY, trajectory=True)
    assert not out.total_reward.is_fully_addressable
    mine = sorted(s.index[0].start for s in out.total_reward.addressable_shards)
    assert mine == [2 * pid, 2 * pid + 1], mine  # the games of this process's two devices
    save(f"{folder}/process{pid}_all.npz", gather(out))
    on_zero = gather(out, process=0)
    assert (on_zero is None) == (pid == 1)
    if pid == 0:
        save(f"{folder}/process0_root.npz", on_zero)
    print(f"PROCESS {pid} OK")
    """
)


def _env(devices: int) -> dict[str, str]:
    return {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def reference():
    """The one-device rollout of the subprocesses' arguments, flattened."""
    out = rollout(CONFIG, GAMES, STEPS, jax.random.key(KEY_SEED), POLICY, trajectory=True)
    return jax.tree_util.tree_flatten_with_path(out)[0]


def assert_saved_equals(path, reference):
    with np.load(path, allow_pickle=False) as saved:
        assert len(saved.files) == len(reference), (path, len(saved.files))
        for i, (keypath, want) in enumerate(reference):
            got, want = saved[f"leaf{i:03d}"], np.asarray(want)
            where = f"{os.path.basename(path)}{jax.tree_util.keystr(keypath)}"
            assert got.dtype == want.dtype and got.shape == want.shape, where
            if not np.array_equal(got, want):
                bad = np.argwhere(got != want)
                raise AssertionError(f"{where}: {len(bad)} entries differ, first at {bad[0]}")


@pytest.mark.subprocess
def test_sharded_rollout_on_2_and_4_cpu_devices_equals_the_one_device_rollout(reference, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _DEVICES_SCRIPT, str(tmp_path)],
        env=_env(4),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "DEVICES OK" in result.stdout
    for d in (2, 4):
        assert_saved_equals(tmp_path / f"devices{d}.npz", reference)


@pytest.mark.subprocess
def test_two_process_sharded_rollout_equals_the_one_process_rollout(reference, tmp_path):
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS_SCRIPT, str(tmp_path), port, str(pid)],
            env=_env(2),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=600)
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for pid, (code, out, err) in enumerate(outputs):
        assert code == 0, f"process {pid}:\n{out[-2000:]}\n{err[-3000:]}"
        assert f"PROCESS {pid} OK" in out
    for name in ("process0_all", "process1_all", "process0_root"):
        assert_saved_equals(tmp_path / f"{name}.npz", reference)


# ------------------------------------------------------------------------------------------
# Errors (this process's single device is enough)
# ------------------------------------------------------------------------------------------


def test_a_mesh_that_is_not_a_mesh_is_refused():
    with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh"):
        sharded_rollout(CONFIG, 2, 3, jax.random.key(0), mesh=jax.devices())


def test_sharded_rollout_checks_its_arguments_like_rollout():
    with pytest.raises(ValueError, match="num_steps must be a positive integer, got 0"):
        sharded_rollout(CONFIG, 2, 0, jax.random.key(0))
    with pytest.raises(TypeError, match="key must be a PRNG key"):
        sharded_rollout(CONFIG, 2, 3, 42)


def test_gather_names_the_valid_process_indices():
    from gigastep.parallel import gather

    with pytest.raises(ValueError, match=r"process must be None or in 0\.\.0, got 3"):
        gather(np.zeros(2), process=3)
    np.testing.assert_array_equal(gather({"a": np.arange(3)})["a"], [0, 1, 2])
