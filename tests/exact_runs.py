"""Shared by the tests that compare two compiled forms bit for bit in a fresh process.

XLA's CPU backend may contract a multiply and an add into one FMA differently in two programs,
so such comparisons run in a subprocess with XLA limited to AVX (no FMA) on x86-64 (`strict`),
and compare floats within 1e-5 elsewhere.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A JAX PPO run small enough to compile in seconds (tests of the update's compiled forms).
TINY_JAX_PPO = dict(
    scenario="identical_2_vs_2_fobs_vec_void_disc",
    framework="jax",
    num_envs=8,
    rollout_steps=4,
    hidden=8,
    s5_state_dim=4,
    epochs=1,
    minibatches=1,
    progress=False,
    tensorboard=False,
    plots=False,
)


def leaf_mismatches(got, want, strict: bool) -> list[str]:
    """Paths of the leaves where the pytree `got` differs from `want` (bit for bit when
    `strict` or for non-float leaves; else floats within 1e-5)."""
    import jax
    import numpy as np

    if jax.tree_util.tree_structure(got) != jax.tree_util.tree_structure(want):
        return ["<tree structure>"]
    bad = []
    for (path, w), g in zip(
        jax.tree_util.tree_leaves_with_path(want), jax.tree_util.tree_leaves(got), strict=True
    ):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype != w.dtype or g.shape != w.shape:
            same = False
        elif strict or not np.issubdtype(w.dtype, np.floating):
            same = np.array_equal(g, w, equal_nan=np.issubdtype(w.dtype, np.floating))
        else:
            same = np.allclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)
        if not same:
            bad.append(jax.tree_util.keystr(path))
    return bad


def run_script(script: str, *extra: str, timeout: float = 900) -> dict:
    """Run `script` (a test file whose `__main__` prints one JSON line) in a fresh process,
    with its first argument "strict" (x86-64: XLA limited to AVX) or "loose"; its JSON."""
    strict = platform.machine().lower() in ("x86_64", "amd64")
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=path)
    if strict:
        env["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_max_isa=AVX".strip()
    cmd = [sys.executable, os.path.abspath(script), "strict" if strict else "loose", *extra]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-5000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
