"""One side of `benchmarks.against_2023`, run as a script in a fresh process.

    python benchmarks/_against_2023_worker.py '{"side": "2023", "root": ..., ...}'

It builds the scenario, compiles the rollout, makes one call and prints a JSON line (its
setup); then it makes one timed call for each line "call" on stdin, printing its wall and CPU
seconds, until a line "end", when it prints its peak RSS and exits.

It imports nothing from this repository by module name: run as a script, its own folder
(benchmarks/) heads `sys.path`, and `root` is put before everything else, so `import gigastep`
finds this library (side "ours") or the 2023 library (side "2023") and never the other. Both
sides are timed by the same code below.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import sys
import time
import types
from typing import Any


def _make_function(side: str, root: str) -> Any:
    """`gigastep.make` (ours) or `gigastep.make_scenario` (2023), imported from `root`."""
    sys.path.insert(0, root)
    if side == "2023":
        # As published (6288d65), the 2023 library needs two things a bare install of today's
        # jax lacks: `jax.tree_map` (removed in jax 0.6; `jax.tree.map` is the same function)
        # and the `type_enforced` package, whose `Enforcer` only checks annotations at call
        # time (an identity decorator changes no computation).
        import jax

        if not hasattr(jax, "tree_map"):
            jax.tree_map = jax.tree.map  # type: ignore[attr-defined]
        try:
            import type_enforced  # noqa: F401
        except ModuleNotFoundError:
            stub = types.ModuleType("type_enforced")
            stub.Enforcer = lambda function: function  # type: ignore[attr-defined]
            sys.modules["type_enforced"] = stub
    import gigastep

    where = os.path.realpath(gigastep.__file__)
    if not where.startswith(os.path.realpath(root) + os.sep):
        raise SystemExit(f"side {side!r}: imported gigastep from {where}, not from {root}")
    return gigastep.make_scenario if side == "2023" else gigastep.make


def run(case: dict[str, Any]) -> None:
    make = _make_function(case["side"], case["root"])
    import jax
    import jax.numpy as jnp

    env = make(case["scenario"])
    b, s, n = case["batch"], case["steps"], env.n_agents
    discrete = bool(env.discrete_actions)

    def body(carry: Any, _: Any) -> tuple[Any, None]:
        obs, states, key = carry
        key, k_act, k_step = jax.random.split(key, 3)
        if discrete:
            actions = jax.random.randint(k_act, (b, n), 0, 27)
        else:
            actions = jax.random.uniform(k_act, (b, n, 3), jnp.float32, -1.0, 1.0)
        out = env.v_step(states, actions, jax.random.split(k_step, b))
        return (out[0], out[1], key), None

    # The observations and states are donated (unless `donate` is false): each call writes
    # the next into the buffers of the last, as a long rollout would (at a million agents one
    # copy of the observations is ~0.4 GB). Every step's observations are written; the last
    # are returned.
    rollout = jax.jit(
        lambda obs, states, key: jax.lax.scan(body, (obs, states, key), None, length=s)[0],
        donate_argnums=(0, 1) if case["donate"] else (),
    )
    key = jax.random.PRNGKey(case["seed"])
    key, k_reset = jax.random.split(key)
    start = time.perf_counter()
    carry = jax.block_until_ready(env.v_reset(jax.random.split(k_reset, b)))
    reset_s = time.perf_counter() - start
    start = time.perf_counter()
    carry = jax.block_until_ready(rollout(*carry, key))
    first_call_s = time.perf_counter() - start
    _reply(
        {
            "n_agents": n,
            "gigastep_file": sys.modules["gigastep"].__file__,
            "native": os.environ.get("GIGASTEP_NATIVE", ""),
            "jax_version": jax.__version__,
            "reset_s": reset_s,
            "compile_and_first_call_s": first_call_s,
        }
    )
    # Then one timed call per "call" line on stdin, so that the parent can alternate the calls
    # of several live processes one by one; "end" reports the peak RSS and exits.
    for call in itertools.count(1):
        line = sys.stdin.readline()
        if line.strip() != "call":
            break
        if case.get("warm", False):
            # One untimed call first, so the timed one runs in steady state (threads awake,
            # caches holding this process's data), as a long rollout does; otherwise it starts
            # right after another side's call.
            carry = jax.block_until_ready(rollout(*carry))
        if case.get("fresh", False):
            # Every game restarts before the call (not timed): its S steps play live games, not
            # games that ended earlier in the process (random play ends most games within 50
            # steps, and a finished game costs either library less).
            key = carry[2]
            del carry  # the last observations are freed before the reset makes new ones
            obs_states = env.v_reset(jax.random.split(jax.random.fold_in(k_reset, call), b))
            carry = jax.block_until_ready((*obs_states, key))
        w0, c0 = time.perf_counter(), time.process_time()
        carry = jax.block_until_ready(rollout(*carry))
        _reply({"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0})
    _reply({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def _reply(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
