"""Team draws: agent-steps per second of a drawn distribution against the fixed game of its
roster, counting present agents only.

The fixed game is the distribution's config without its draw (the whole roster plays every
episode, e.g. 8 vs 8 for `identical_5-8_vs_5-8`); the drawn game plays 5 to 8 of those slots
per team. Both run the same compiled rollout: a `lax.scan` over `steps` auto-resetting batched
steps (finished games restart with a new draw inside the step) with uniform random actions.
The agent-steps of a call are counted inside it: for every step, the present agents of every
game (dead or alive, as the fixed game counts all its agents). The two games are timed
alternately (A, B, A, B, ...) so that both see the same machine load; each row reports the
median and the range over the repeats, and the ratio drawn / fixed of the medians.

`--paths native jax` runs both observation/interaction paths: the native CPU kernels and the
pure-JAX path (`GIGASTEP_NATIVE=0`, set before the rollouts are traced).

Usage:
    python -m benchmarks.team_draws                                   # ~1 min on 2 CPU cores
    python -m benchmarks.team_draws --name identical_5-8_vs_5-8_pobs_vec_void_cont \\
        --batch 256 --steps 50 --repeats 5 --paths native jax
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any


def _rollout(config: Any, batch: int, steps: int) -> tuple[Any, Any]:
    """(compiled rollout, initial carry): `rollout(carry, key) -> (carry, agent_steps)`."""
    from functools import partial

    import jax
    import jax.numpy as jnp

    from gigastep import env as genv

    n = config.n_agents
    _, states = jax.jit(partial(genv.batched_reset, config))(
        jax.random.split(jax.random.PRNGKey(0), batch)
    )

    def body(carry: Any, key: jax.Array) -> tuple[Any, jax.Array]:
        states, ret = carry
        k_act, k_env = jax.random.split(key)
        present = states.episode.present
        count = jnp.sum(present, dtype=jnp.int32) if present is not None else batch * n
        actions = jax.random.uniform(k_act, (batch, n, 3), minval=-1.0, maxval=1.0)
        keys = jax.random.split(k_env, batch)
        _, states, rewards, *_ = genv.batched_step_autoreset(config, states, actions, keys, False)
        return (states, ret + jnp.sum(rewards)), count

    def rollout(carry: Any, key: jax.Array) -> tuple[Any, jax.Array]:
        carry, counts = jax.lax.scan(body, carry, jax.random.split(key, steps))
        return carry, jnp.sum(counts)

    return jax.jit(rollout), (states, jnp.zeros((), jnp.float32))


def measure(name: str, batch: int, steps: int, repeats: int) -> dict[str, Any]:
    """One row: agent-steps/s of the fixed and the drawn game (median, min, max), alternated."""
    import jax

    from gigastep.scenarios import make_config

    drawn = make_config(name)
    if drawn.team_draw is None:
        raise ValueError(f"{name!r} is not a distribution (it has no team draw)")
    games = {"fixed": drawn.replace(team_draw=None), "drawn": drawn}
    programs = {}
    for label, config in games.items():
        rollout, carry = _rollout(config, batch, steps)
        start = time.perf_counter()
        carry, _ = jax.block_until_ready(rollout(carry, jax.random.PRNGKey(1)))  # compile
        programs[label] = [rollout, carry, time.perf_counter() - start]
    rates: dict[str, list[float]] = {"fixed": [], "drawn": []}
    for r in range(repeats):
        for label in ("fixed", "drawn"):
            rollout, carry, _ = programs[label]
            start = time.perf_counter()
            carry, count = jax.block_until_ready(rollout(carry, jax.random.PRNGKey(2 + r)))
            rates[label].append(int(count) / (time.perf_counter() - start))
            programs[label][1] = carry
    row: dict[str, Any] = {"name": name, "batch": batch, "steps": steps, "repeats": repeats}
    for label, values in rates.items():
        row[f"{label}_median"] = statistics.median(values)
        row[f"{label}_range"] = (min(values), max(values))
        row[f"{label}_compile_s"] = programs[label][2]
    row["ratio"] = row["drawn_median"] / row["fixed_median"]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="identical_5-8_vs_5-8_pobs_vec_void_cont")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--paths", nargs="+", choices=("native", "jax"), default=["native", "jax"])
    args = parser.parse_args(argv)
    for path in args.paths:
        os.environ["GIGASTEP_NATIVE"] = "1" if path == "native" else "0"
        row = measure(args.name, args.batch, args.steps, args.repeats)
        fixed, drawn = row["fixed_range"], row["drawn_range"]
        print(
            f"{path:6s} {row['name']} B={row['batch']} x {row['steps']} steps: "
            f"fixed {row['fixed_median'] / 1e6:.3f} M agent-steps/s "
            f"[{fixed[0] / 1e6:.3f}, {fixed[1] / 1e6:.3f}], "
            f"drawn {row['drawn_median'] / 1e6:.3f} M present agent-steps/s "
            f"[{drawn[0] / 1e6:.3f}, {drawn[1] / 1e6:.3f}], ratio {row['ratio']:.2f} "
            f"(compile {row['fixed_compile_s']:.0f} s / {row['drawn_compile_s']:.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
