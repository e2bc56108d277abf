"""Per-phase cost of one batched environment step, PRNG alternatives, and an HLO audit.

Each phase of `gigastep.env.step` is compiled alone as `jit(vmap(phase))` over a batch of
realistic inputs (states after a few random steps) and timed per call (median of repeats,
blocking on the result). Isolated phases pay for materialising their inputs and outputs,
which the fused step avoids, so their sum exceeds the whole step; their ratios still show
where the time goes. The whole step is also timed inside a `lax.scan` (no dispatch cost).

Usage:
    python -m tools.profile_step                       # 5v5 @1024 and 20v20 @256
    python -m tools.profile_step --case identical_5_vs_5_fobs_rgb_maps_cont:64
    python -m tools.profile_step --prng --hlo-dir /tmp/hlo --json profile.json

Sections:
    phases  µs per batched call of each phase, % of the whole step, ns per environment.
    prng    the step's random numbers drawn different ways (threefry / rbg / unsafe_rbg,
            float32 uniforms vs uint8/uint16 bits, one draw per batch vs per environment).
    hlo     opcode census of the optimised HLO of the step (random-bit generation, sorts,
            gathers, scatters, while loops, transposes, float64), text dumped to --hlo-dir.
    thunks  (--thunks) the compiled step in a scan under `jax.profiler`: time per step of each
            fused kernel (thunk) as XLA runs it, with its output size and what it recomputes
            per element (`fusion_census`). The sharpest view of where the fused step goes.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks._common import (
    Column,
    add_options,
    config_hash,
    format_number,
    markdown_table,
    option,
    options_from_args,
    run_info,
    time_interleaved,
    write_json,
)

__all__ = [
    "Options",
    "hlo_census",
    "main",
    "profile_phases",
    "profile_prng",
    "profile_thunks",
    "thunk_times",
]

DEFAULT_CASES = [
    "identical_5_vs_5_pobs_vec_maps_cont:1024",
    "identical_20_vs_20_pobs_vec_maps_cont:256",
]


@dataclass
class Options:
    """Command-line options (each field is one `--flag`)."""

    case: list = option(list(DEFAULT_CASES), "SCENARIO:BATCH pairs to profile", type=str)
    repeats: int = option(15, "timed calls per phase (median reported)")
    scan_steps: int = option(20, "steps of the in-scan timing of the whole step")
    phases: bool = option(True, "time every phase in isolation")
    prng: bool = option(True, "compare ways of drawing the step's random numbers")
    ablations: bool = option(True, "time the step in a scan with parts removed")
    hlo: bool = option(True, "opcode census of the optimised HLO of the batched step")
    hlo_dir: str = option(None, "write the optimised HLO text of the step here")
    thunks: bool = option(False, "time each compiled kernel of the step under jax.profiler")
    top: int = option(15, "kernels listed by --thunks (the slowest)")
    json: str = option(None, "write all results as JSON to this path")


def _parse_case(text: str) -> tuple[str, int]:
    name, _, batch = text.rpartition(":")
    if not name or not batch.isdigit():
        raise ValueError(f"--case takes SCENARIO:BATCH (e.g. identical_5_vs_5:1024), got {text!r}")
    return name, int(batch)


def _config(name: str):
    from gigastep import scenarios

    return scenarios.make_config(name)


# ------------------------------------------------------------------------------------------
# Inputs: a batch of realistic states and every intermediate value of one step
# ------------------------------------------------------------------------------------------


def _inputs(config, batch: int, seed: int = 0) -> dict[str, Any]:
    """Batched inputs of every phase: states after 3 random steps and the intermediates of
    the next step, each computed by its own jit(vmap)."""
    import jax
    import jax.numpy as jnp

    from gigastep import env as genv
    from gigastep.game import dynamics, interactions
    from gigastep.game.arena import map_arrays

    n = config.n_agents
    key = jax.random.PRNGKey(seed)
    k_reset, k_act, k_step = jax.random.split(key, 3)
    vstep = jax.jit(jax.vmap(lambda s, a, k: genv.step(config, s, a, k)))
    _, states = jax.jit(jax.vmap(lambda k: genv.reset(config, k)))(jax.random.split(k_reset, batch))

    def actions_of(k):
        if config.discrete_actions:
            return jax.random.randint(k, (batch, n), 0, 27)
        return jax.random.uniform(k, (batch, n, 3), minval=-1.0, maxval=1.0)

    for i in range(3):
        ka, ks = jax.random.split(jax.random.fold_in(k_step, i))
        states = vstep(states, actions_of(ka), jax.random.split(ks, batch))[1]
    keys = jax.random.split(k_step, batch)
    actions = actions_of(k_act)
    maps = map_arrays(config)
    boxes = jnp.asarray(maps.boxes)[states.episode.map_idx]
    box_valid = jnp.asarray(maps.box_valid)[states.episode.map_idx]

    def vm(f):
        return jax.jit(jax.vmap(f))

    noise = vm(lambda k: genv.sample_noise(config, k))(keys)
    controls = vm(lambda a: dynamics.decode_actions(config, a))(actions)
    moved = vm(lambda ag, c: dynamics.move(config, ag, c))(states.agents, controls)
    geo = vm(interactions.geometry)(moved)
    hz = vm(lambda m, g, b, v: interactions.hazards(config, m, g, b, v))(
        moved, geo, boxes, box_valid
    )
    fight = vm(lambda m, g, a, u: interactions.combat(config, m, g, a, u))(
        moved, geo, hz.alive, noise.detection
    )
    return dict(
        states=states,
        keys=keys,
        actions=actions,
        noise=noise,
        controls=controls,
        moved=moved,
        geo=geo,
        boxes=boxes,
        box_valid=box_valid,
        hz=hz,
        fight=fight,
    )


def _phase_functions(config, x: dict[str, Any]) -> list[tuple[str, Callable, tuple]]:
    """(name, per-game function, batched arguments) of every phase, in step order."""
    import jax
    import jax.numpy as jnp

    from gigastep import env as genv
    from gigastep.game import dynamics, interactions, rewards
    from gigastep.game.arena import background
    from gigastep.game.observations.vector import (
        native_supported,
        native_vector_observations,
        vector_observations,
    )
    from gigastep.game.observations.visibility import visibility

    c = config
    n = c.n_agents
    s, fight, hz = x["states"], x["fight"], x["hz"]
    phases: list[tuple[str, Callable, tuple]] = [
        ("batch key split (caller)", None, ()),
        ("sample_noise (split + uniforms)", lambda k: genv.sample_noise(c, k), (x["keys"],)),
        (
            "decode_actions + move",
            lambda ag, a: dynamics.move(c, ag, dynamics.decode_actions(c, a)),
            (s.agents, x["actions"]),
        ),
        ("geometry (pairwise)", interactions.geometry, (x["moved"],)),
        (
            "hazards (oob, collisions, boxes)",
            lambda m, g, b, v: interactions.hazards(c, m, g, b, v),
            (x["moved"], x["geo"], x["boxes"], x["box_valid"]),
        ),
        (
            "combat (detection, tracking, damage)",
            lambda m, g, a, u: interactions.combat(c, m, g, a, u),
            (x["moved"], x["geo"], hz.alive, x["noise"].detection),
        ),
    ]

    def reward_fn(alive_pre, alive, collided, oob, in_box, detected, damage, aux):
        inputs = rewards.RewardInputs(
            alive_pre=alive_pre,
            alive=alive,
            hit_waypoint=jnp.zeros(n, bool),
            collided=collided,
            hazard_death=alive_pre & (oob | in_box),
            detected=detected,
            damage=damage,
        )
        return rewards.total_reward(c, inputs, aux)

    phases.append(
        (
            "rewards",
            reward_fn,
            (
                s.agents.alive,
                hz.alive,
                hz.collided,
                hz.oob,
                hz.in_box,
                fight.detected,
                fight.damage,
                s.episode.aux_rewards_factor,
            ),
        )
    )
    phases.append(
        (
            "visibility (seen)",
            lambda a, d, det, u: visibility(c, a, d, det, u),
            (hz.alive, x["geo"].dist, fight.detected, x["noise"].comm),
        )
    )
    seen = jax.jit(jax.vmap(lambda a, d, det, u: visibility(c, a, d, det, u)))(
        hz.alive, x["geo"].dist, fight.detected, x["noise"].comm
    )
    moved_alive = x["moved"].replace(alive=hz.alive)
    if c.obs_type in ("vector", "rgb_vector"):
        phases.append(
            (
                "vector observation",
                lambda ag, ep, d, sn, b: vector_observations(c, ag, ep, d, sn, b),
                (moved_alive, s.episode, x["geo"].dist, seen, x["boxes"]),
            )
        )
        if native_supported(c):
            phases.append(
                (
                    "visibility + vector observation (native kernel)",
                    lambda ag, ep, d, det, u, b: native_vector_observations(
                        c, ag, ep, d, det, u, b
                    ),
                    (
                        moved_alive,
                        s.episode,
                        x["geo"].dist,
                        fight.detected,
                        x["noise"].comm,
                        x["boxes"],
                    ),
                )
            )
    if c.obs_type in ("rgb", "rgb_vector"):
        from gigastep.game.observations.rgb import (
            native_rgb_observations,
            native_rgb_supported,
            rgb_observations,
        )

        bg = jnp.asarray(background(c))
        phases.append(
            (
                "rgb observation (JAX drawing)",
                lambda ag, ep, sn, td: rgb_observations(c, bg, ag, ep, sn, td),
                (moved_alive, s.episode, seen, fight.took_damage),
            )
        )
        if native_rgb_supported(c):
            phases.append(
                (
                    "rgb observation (native kernel)",
                    lambda ag, ep, sn, td: native_rgb_observations(c, bg, ag, ep, sn, td),
                    (moved_alive, s.episode, seen, fight.took_damage),
                )
            )
    phases += [
        ("reset_state (auto-reset)", lambda k: genv.reset_state(c, k), (x["keys"],)),
        (
            "transition (step given noise)",
            lambda st, a, u: genv.transition(c, st, a, u),
            (s, x["actions"], x["noise"]),
        ),
        ("step", lambda st, a, k: genv.step(c, st, a, k), (s, x["actions"], x["keys"])),
        (
            "step_autoreset (final_obs=False)",
            lambda st, a, k: genv.step_autoreset(c, st, a, k, False),
            (s, x["actions"], x["keys"]),
        ),
    ]
    return phases


def _compile(fn, *args):
    """(`call(i)` running the compiled `jit(fn)(*args)`, seconds to lower and compile)."""
    import time

    import jax

    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return (lambda i: compiled(*args)), time.perf_counter() - t0


@dataclass
class _Entry:
    name: str
    call: Callable[[int], Any]
    compile_s: float | None = None
    per: int = 1  # batched steps per call
    extra: dict | None = None


def _measure(entries: list[_Entry], repeats: int, log=sys.stderr) -> list[dict[str, Any]]:
    """Time the entries round-robin (`time_interleaved`); one row each, minimum first."""
    timings = time_interleaved({e.name: e.call for e in entries}, repeats=repeats, warmup=2)
    rows = []
    for e in entries:
        t = timings[e.name]
        row = {
            "phase": e.name,
            "cpu_us": t.cpu_min / e.per * 1e6,
            "cpu_us_median": t.cpu_median / e.per * 1e6,
            "us_min": t.min / e.per * 1e6,
            "us": t.median / e.per * 1e6,
            "us_max": t.max / e.per * 1e6,
            "spread": t.spread,
            "compile_s": e.compile_s,
            **(e.extra or {}),
        }
        rows.append(row)
        print(
            f"  {e.name:58s} cpu {row['cpu_us']:9.1f} µs, wall {row['us_min']:9.1f} µs (min; "
            f"median {row['us']:.1f})",
            file=log,
            flush=True,
        )
    return rows


def _profiled_case(batch: int):
    """The profiled rollout: the plain step. Every call starts again from the freshly reset
    carry, so a short scan times live games, and the ablations replace this same step."""
    from benchmarks.throughput import Case

    return Case("profiled", batch=batch, step_fn="step")


def _scan_entry(config, batch: int, steps: int, name: str, env_step=None, obs_shape=None) -> _Entry:
    """A compiled scan of `steps` batched steps (the throughput harness's rollout); with
    `obs_shape`, the carried observation is a float32 array of that shape instead."""
    import time

    import jax
    import jax.numpy as jnp

    from benchmarks.throughput import build_rollout

    rollout, carry = build_rollout(config, _profiled_case(batch), steps, env_step)
    if obs_shape is not None:
        carry = (carry[0], jnp.zeros(obs_shape, jnp.float32), carry[2])
    t0 = time.perf_counter()
    compiled = jax.jit(rollout).lower(carry, jax.random.PRNGKey(1)).compile()
    return _Entry(
        name, lambda i: compiled(carry, jax.random.PRNGKey(i)), time.perf_counter() - t0, per=steps
    )


def profile_phases(
    config, batch: int, repeats: int = 15, scan_steps: int = 20, log=sys.stderr
) -> list[dict[str, Any]]:
    """One row per phase: µs per batched call (min and median of interleaved repeats),
    % of the whole step, ns per game, compile seconds."""
    import jax

    x = _inputs(config, batch)
    entries = []
    for name, fn, args in _phase_functions(config, x):
        try:
            if fn is None:  # the caller's jax.random.split(key, B) of every step
                call, compile_s = _compile(
                    partial(jax.random.split, num=batch), jax.random.PRNGKey(0)
                )
            else:
                call, compile_s = _compile(jax.vmap(fn), *args)
        except Exception as e:  # a renamed internal must not stop the whole profile
            print(f"  {name}: skipped ({type(e).__name__}: {e})", file=log)
            continue
        entries.append(_Entry(name, call, compile_s))
    entries.append(
        _scan_entry(config, batch, scan_steps, "step in lax.scan (per step, incl. random actions)")
    )
    call, compile_s = _compile(lambda v: v + 1, jax.numpy.zeros(4))
    entries.append(_Entry("dispatch overhead (tiny jit call)", call, compile_s))
    rows = _measure(entries, repeats, log)
    step_us = next(r["cpu_us"] for r in rows if r["phase"] == "step")
    for r in rows:
        r["pct_of_step"] = 100.0 * r["cpu_us"] / step_us
        r["ns_per_env"] = 1e3 * r["cpu_us"] / batch
        r["ns_per_agent"] = r["ns_per_env"] / config.n_agents
    return rows


# ------------------------------------------------------------------------------------------
# Random numbers: ways of drawing the step's (n, n) uniforms
# ------------------------------------------------------------------------------------------


def _murmur_uniform(seed, shape):
    """A cheap counter-based hash (murmur3 finaliser of key ^ counter) to float32 in [0, 1):
    ~8 integer ops per number instead of threefry's ~50. Not jax.random; shown for scale."""
    import jax.numpy as jnp
    import numpy as np

    size = int(np.prod(shape))
    x = seed[0] ^ (jnp.arange(size, dtype=jnp.uint32) * np.uint32(0x9E3779B9) + seed[1])
    x = x ^ (x >> 16)
    x = x * np.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * np.uint32(0xC2B2AE35)
    x = x ^ (x >> 16)
    return ((x >> 8).astype(jnp.float32) * np.float32(2**-24)).reshape(shape)


def _prng_variants(config, batch: int) -> list[tuple[str, str, Callable]]:
    """(name, key impl, draw(keys (B,) typed) -> the batch's random numbers).

    Every variant draws what a step needs: two (n, n) float32 tables (detection and
    communication) and the 4 waypoint numbers per game, or the closest equivalent.
    """
    import jax
    import jax.numpy as jnp

    from gigastep import env as genv

    n0, n1 = config.team_sizes
    n = n0 + n1
    needed = 2 * n0 * n1 + n0 * n0 + n1 * n1  # enemy pairs (detection), teammates (comm)

    def per_env(draw):
        def f(keys):
            def one(k):
                k_det, k_comm, k_wp = jax.random.split(k, 3)
                return draw(k_det), draw(k_comm), jax.random.uniform(k_wp, (4,))

            return jax.vmap(one)(keys)

        return f

    def uniform_2d(k):
        return jax.random.uniform(k, (n, n))

    def uniform_flat(k):
        return jax.random.uniform(k, (n * n,)).reshape(n, n)

    def bits8_flat(k):
        return jax.random.bits(k, (n * n,), dtype=jnp.uint8).reshape(n, n)

    def one_draw(keys):
        # One key for the whole batch (a different contract: v_step would take one key).
        return jax.random.uniform(keys[0], (batch * (2 * n * n + 4),))

    def murmur(keys):
        def one(k):
            u = _murmur_uniform(jax.random.key_data(k), (2 * n * n + 4,))
            return u[: n * n].reshape(n, n), u[n * n : 2 * n * n].reshape(n, n), u[2 * n * n :]

        return jax.vmap(one)(keys)

    def library(keys):
        return jax.vmap(lambda k: genv.sample_noise(config.replace(enable_waypoints=True), k))(
            jax.random.key_data(keys)
        )

    variants = [
        (
            "threefry2x32: (n, n) f32 per game (the 2023 library)",
            "threefry2x32",
            per_env(uniform_2d),
        ),
        ("gigastep.env.sample_noise (as the library draws now)", "threefry2x32", library),
        ("threefry2x32: flat n*n f32 per game, reshaped", "threefry2x32", per_env(uniform_flat)),
        ("threefry2x32: flat n*n uint8 bits per game", "threefry2x32", per_env(bits8_flat)),
    ]
    for impl in ("rbg", "unsafe_rbg"):
        variants += [
            (f"{impl}: (n, n) f32 per game", impl, per_env(uniform_2d)),
            (f"{impl}: flat n*n f32 per game", impl, per_env(uniform_flat)),
        ]
    variants += [
        (
            f"threefry2x32: only the {needed} pairs used + 4, flat, per game",
            "threefry2x32",
            lambda keys: jax.vmap(lambda k: jax.random.uniform(k, (needed + 4,)))(keys),
        ),
        ("threefry2x32: one flat f32 draw for the whole batch", "threefry2x32", one_draw),
        ("murmur3-finaliser hash of (key, counter) per game", "threefry2x32", murmur),
        (
            "batch key split only: split(key, B)",
            "threefry2x32",
            lambda keys: jax.random.split(keys[0], batch),
        ),
    ]
    return variants


def profile_prng(config, batch: int, repeats: int = 15, log=sys.stderr) -> list[dict[str, Any]]:
    """µs per batch to draw one step's random numbers (two (n, n) tables and 4 waypoint
    numbers per environment) in several ways (interleaved; relative to the first row's min)."""
    import jax

    entries = []
    for name, impl, fn in _prng_variants(config, batch):
        try:
            call, compile_s = _compile(fn, jax.random.split(jax.random.key(0, impl=impl), batch))
        except Exception as e:
            print(f"  {name}: failed ({type(e).__name__}: {e})", file=log)
            continue
        entries.append(_Entry(name, call, compile_s))
    rows = _measure(entries, repeats, log)
    for r in rows:
        r["variant"] = r.pop("phase")
        r["relative"] = r["cpu_us"] / rows[0]["cpu_us"]
        r["ns_per_env"] = 1e3 * r["cpu_us"] / batch
    return rows


def profile_ablations(
    config, batch: int, steps: int = 20, repeats: int = 5, log=sys.stderr
) -> list[dict[str, Any]]:
    """Per-step time of the whole step inside a compiled `lax.scan`, with parts removed.

    Differences between rows are the marginal costs of the parts inside the fused program
    (no dispatch, no extra materialisation): the random numbers (fixed noise instead of
    drawing it), the observation (the step without it), the auto-reset, the harness's
    random actions and per-game key split.
    """
    import jax
    import jax.numpy as jnp

    from gigastep import env as genv

    c, n, b = config, config.n_agents, batch
    noise = jax.jit(jax.vmap(lambda k: genv.sample_noise(c, k)))(
        jax.random.split(jax.random.PRNGKey(7), b)
    )

    def v(fn):
        return jax.vmap(fn)

    def step(st, a, keys):
        return v(lambda s_, a_, k: genv.step(c, s_, a_, k))(st, a, keys)[:3]

    def fixed_noise(st, a, keys):
        return v(lambda s_, a_, u: genv.transition(c, s_, a_, u))(st, a, noise)[:3]

    def no_obs(st, a, keys):
        adv = v(lambda s_, a_, k: genv.advance(c, s_, a_, genv.sample_noise(c, k)))(st, a, keys)
        return jnp.zeros((b, n, 1)), adv.state, adv.rewards

    # Auto-reset without the final observation (only obs, states and rewards are carried, so
    # a final observation would be dead code here).
    def autoreset(st, a, keys):
        return genv.batched_step_autoreset(c, st, a, keys, False)[:3]

    def autoreset_vmapped(st, a, keys):
        return v(lambda s_, a_, k: genv.step_autoreset(c, s_, a_, k, False))(st, a, keys)[:3]

    variants = [
        ("step (v_step)", step),
        ("step with fixed noise (transition, no RNG)", fixed_noise),
        ("step without observation (_advance only)", no_obs),
        ("v_step_autoreset (resets the finished games)", autoreset),
        ("vmap(step_autoreset) (resets every game, keeps the finished ones')", autoreset_vmapped),
    ]
    entries = []
    for name, fn in variants:
        try:
            shape = (b, n, 1) if fn is no_obs else None
            entries.append(_scan_entry(c, b, steps, name, env_step=fn, obs_shape=shape))
        except Exception as e:
            print(f"  {name}: failed ({type(e).__name__}: {e})", file=log)

    # The harness's own work per step: random actions and the per-game key split.
    def harness(key):
        def body(acc, k):
            k_act, k_env = jax.random.split(k)
            a = jax.random.uniform(k_act, (b * n * 3,), minval=-1.0, maxval=1.0)
            keys = jax.random.split(k_env, b)
            return acc + jnp.sum(a) + jnp.sum(keys).astype(jnp.float32), None

        return jax.lax.scan(body, jnp.zeros(()), jax.random.split(key, steps))[0]

    call, compile_s = _compile(harness, jax.random.PRNGKey(0))
    entries.append(
        _Entry("harness only: random actions + split(key, B)", call, compile_s, per=steps)
    )
    rows = _measure(entries, repeats, log)
    base = rows[0]["cpu_us"] if rows else 1.0
    for r in rows:
        r["pct_of_step"] = 100.0 * r["cpu_us"] / base
        r["agent_steps_per_s"] = b * n / (r["us_min"] * 1e-6)
    return rows


# ------------------------------------------------------------------------------------------
# HLO audit
# ------------------------------------------------------------------------------------------

_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*([\w\[\]{},:\s\d()/*]+?)\s+([a-z][\w\-]*)\(", re.M
)
WATCH = (
    "rng-bit-generator",
    "sort",
    "gather",
    "scatter",
    "while",
    "transpose",
    "custom-call",
    "dot",
    "convolution",
    "reduce",
    "fusion",
    "copy",
    "conditional",
    "call",
)


def hlo_census(text: str) -> dict[str, Any]:
    """Opcode counts of an optimised HLO module, float64 use, and threefry mentions."""
    ops = Counter(m.group(2) for m in _INSTR.finditer(text))
    return {
        "instructions": sum(ops.values()),
        "watched": {k: ops.get(k, 0) for k in WATCH},
        "top_opcodes": ops.most_common(15),
        "f64_instructions": len(re.findall(r"=\s*f64\[", text)),
        "threefry_mentions": len(re.findall(r"threefry", text)),
        "fusions": ops.get("fusion", 0),
        "computations": len(
            re.findall(r"^(?:ENTRY\s+)?%?[\w.\-]+\s*\(.*\)\s*->.*\{\s*$", text, re.M)
        ),
    }


def abstract_step_hlo(config, batch: int) -> str:
    """Optimised HLO text of jit(vmap(step)) at this batch size, lowered from the shapes alone
    (one compile, no inputs computed)."""
    import jax
    import jax.numpy as jnp

    from gigastep import env as genv

    keys = jax.ShapeDtypeStruct((batch, 2), jnp.uint32)
    states = jax.eval_shape(jax.vmap(lambda k: genv.reset(config, k)[1]), keys)
    n = config.n_agents
    actions = (
        jax.ShapeDtypeStruct((batch, n), jnp.int32)
        if config.discrete_actions
        else jax.ShapeDtypeStruct((batch, n, 3), jnp.float32)
    )
    fn = jax.jit(jax.vmap(lambda s, a, k: genv.step(config, s, a, k)))
    return fn.lower(states, actions, keys).compile().as_text()


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*?\)\s*->.*\{\s*$", re.M)
_ROOT_SHAPE = re.compile(r"^\s*ROOT\s+%?[\w.\-]+\s*=\s*\(?\s*\w+\[([\d,]*)\]", re.M)
# one instruction: its name, opcode, operand list and the attributes after it
_NAMED_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][\w\-]*)\(([^)]*)\)(.*)$", re.M
)
_CALLS = re.compile(r"calls=%?([\w.\-]+)")


def _named_instructions(text: str) -> list[tuple[str, str, list[str], str | None]]:
    """(name, opcode, operand names, the computation it calls or None) of every instruction."""
    out = []
    for name, opcode, args, rest in _NAMED_INSTR.findall(text):
        calls = _CALLS.search(rest)
        out.append(
            (name, opcode, re.findall(r"%([\w.\-]+)", args), calls.group(1) if calls else None)
        )
    return out


# ops that compute nothing per element: data movement, constants and the broadcast itself
_MOVES = frozenset(
    {
        "parameter",
        "constant",
        "iota",
        "broadcast",
        "bitcast",
        "reshape",
        "copy",
        "transpose",
        "slice",
        "concatenate",
        "pad",
        "tuple",
        "get-tuple-element",
    }
)


@dataclass(frozen=True)
class FusionCensus:
    """One fused computation of an optimised HLO module."""

    name: str
    root_elements: int
    """Elements of the fusion's (first) output: how many times its body runs per call."""
    instructions: int
    """Instructions of the body other than its parameters: work per output element."""
    ops: Counter
    recomputed: Counter
    """Opcodes of the instructions that feed a broadcast inside this fusion (data movement and
    constants left out): values of a smaller shape that the fusion computes again for every
    element it broadcasts them to, instead of reading them once stored."""


def _recomputed(body: str) -> Counter:
    operands = {name: (opcode, args) for name, opcode, args, _ in _named_instructions(body)}
    seen: set[str] = set()
    todo = [a for opcode, args in operands.values() if opcode == "broadcast" for a in args]
    while todo:
        name = todo.pop()
        if name in seen or name not in operands:
            continue
        seen.add(name)
        todo.extend(operands[name][1])
    return Counter(operands[n][0] for n in seen if operands[n][0] not in _MOVES)


def fusion_census(text: str) -> list[FusionCensus]:
    """Every fused computation of an optimised HLO module (CPU or GPU), largest output first.

    XLA duplicates cheap elementwise producers into each consumer fusion rather than storing
    them; a producer of a small shape pulled into a fusion of a large shape is recomputed for
    every element of the large one. `root_elements` x `instructions` is that fusion's work, and
    `recomputed` names the part of it that a stored value would have saved.
    """
    starts = list(_COMPUTATION.finditer(text))
    out = []
    for i, m in enumerate(starts):
        if not m.group(1).startswith("fused_computation"):
            continue
        body = text[m.end() : starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        ops = Counter(op.group(2) for op in _INSTR.finditer(body))
        root = _ROOT_SHAPE.search(body)
        dims = [int(d) for d in root.group(1).split(",") if d] if root else []
        out.append(
            FusionCensus(
                m.group(1),
                math.prod(dims),
                sum(ops.values()) - ops["parameter"],
                ops,
                _recomputed(body),
            )
        )
    return sorted(out, key=lambda f: (-f.root_elements, f.name))


_CONTAINERS = frozenset({"while", "conditional", "call"})  # their time is their body's


def thunk_times(events: list[dict], hlo_text: str) -> dict[str, float]:
    """Summed microseconds of each kernel of a compiled module in a `jax.profiler` trace.

    `events` are the trace's complete ("X") events; a kernel's event carries its HLO
    instruction name. Loops and calls are left out (their kernels are counted inside them), as
    are the profiler's own and Python's events, which name no instruction."""
    kernels = {
        name for name, opcode, _, _ in _named_instructions(hlo_text) if opcode not in _CONTAINERS
    }
    out: Counter = Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("name") in kernels:
            out[e["name"]] += float(e.get("dur", 0.0))
    return dict(out)


def profile_thunks(
    config, batch: int, steps: int = 20, calls: int = 3, top: int = 15
) -> list[dict[str, Any]]:
    """The slowest kernels of the step, run in a compiled scan of `steps` batched steps
    `calls` times under `jax.profiler.trace`: µs per step each (wall, as traced), share of the
    traced kernels' total, its output elements and the ops it recomputes per element."""
    import gzip
    import json
    import tempfile

    import jax

    from benchmarks.throughput import build_rollout

    rollout, carry = build_rollout(config, _profiled_case(batch), steps, None)
    compiled = jax.jit(rollout).lower(carry, jax.random.PRNGKey(1)).compile()
    text = compiled.as_text()
    jax.block_until_ready(compiled(carry, jax.random.PRNGKey(0)))
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder):
            for i in range(calls):
                jax.block_until_ready(compiled(carry, jax.random.PRNGKey(i + 1)))
        (trace,) = Path(folder).rglob("*.trace.json.gz")
        with gzip.open(trace) as f:
            events = json.load(f)["traceEvents"]
    times = thunk_times(events, text)
    called = {name: calls for name, _, _, calls in _named_instructions(text) if calls}
    census = {f.name: f for f in fusion_census(text)}
    total = sum(times.values()) or 1.0
    rows = []
    for name, us in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        fused = census.get(called.get(name, ""))
        again = sorted(fused.recomputed.items()) if fused else []
        rows.append(
            {
                "kernel": name,
                "us_per_step": us / (steps * calls),
                "pct": 100.0 * us / total,
                "elements": fused.root_elements if fused else None,
                "instructions": fused.instructions if fused else None,
                "recomputed": ", ".join(f"{op} {k}" for op, k in again),
            }
        )
    return rows


def count_op(text: str, opcode: str) -> int:
    """Instructions of this opcode in the whole module (fused bodies included)."""
    return sum(op.group(2) == opcode for op in _INSTR.finditer(text))


def step_hlo(config, batch: int) -> str:
    """Optimised HLO text of jit(vmap(step)) at this batch size."""
    import jax

    from gigastep import env as genv

    x = _inputs(config, batch)
    fn = jax.jit(jax.vmap(lambda s, a, k: genv.step(config, s, a, k)))
    return fn.lower(x["states"], x["actions"], x["keys"]).compile().as_text()


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------

_CPU = Column("cpu_us", "CPU time [µs] (min)", lambda x: f"{x:.0f}")
_WALL = Column("_range", "wall [µs] (min / median)")
PHASE_COLUMNS = (
    Column("phase", "phase (one jit(vmap) call over the batch)"),
    _CPU,
    _WALL,
    Column("pct_of_step", "% of step (CPU)", lambda x: f"{x:.0f}"),
    Column("ns_per_env", "CPU per game [ns]", lambda x: f"{x:.0f}"),
    Column("compile_s", "compile [s]", lambda x: f"{x:.2f}"),
)
ABLATION_COLUMNS = (
    Column("phase", "step variant inside lax.scan (per batched step)"),
    _CPU,
    _WALL,
    Column("pct_of_step", "% of v_step (CPU)", lambda x: f"{x:.0f}"),
    Column("agent_steps_per_s", "agent-steps/s at wall min", format_number),
)
THUNK_COLUMNS = (
    Column("kernel", "compiled kernel (HLO instruction)"),
    Column("us_per_step", "wall per step [µs]", lambda x: f"{x:.0f}"),
    Column("pct", "% of traced kernels", lambda x: f"{x:.1f}"),
    Column("elements", "output elements", lambda x: "" if x is None else f"{x:,}"),
    Column("instructions", "instructions per element", lambda x: "" if x is None else str(x)),
    Column("recomputed", "recomputed per element (feeds a broadcast)"),
)
PRNG_COLUMNS = (
    Column("variant", "how the step's random numbers are drawn"),
    _CPU,
    _WALL,
    Column("relative", "vs the 2023 library (CPU)", lambda x: f"{x:.2f}×"),
    Column("ns_per_env", "CPU per game [ns]", lambda x: f"{x:.0f}"),
)


def _with_range(rows):
    return [{**r, "_range": f"{r['us_min']:.0f} / {r['us']:.0f}"} for r in rows]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m tools.profile_step", description=__doc__.split("\n\n")[0]
    )
    add_options(parser, Options)
    opts = options_from_args(Options, parser.parse_args(argv))
    result: dict[str, Any] = {"machine": run_info(), "cases": []}
    for text in opts.case:
        name, batch = _parse_case(text)
        config = _config(name)
        entry: dict[str, Any] = {
            "scenario": name,
            "batch": batch,
            "n_agents": config.n_agents,
            "scenario_hash": config_hash(config),
        }
        print(f"\n## {name}, batch {batch}\n", flush=True)
        sections = [
            (
                "phases",
                opts.phases,
                PHASE_COLUMNS,
                partial(profile_phases, config, batch, opts.repeats, opts.scan_steps),
            ),
            (
                "prng",
                opts.prng and config.stochastic_obs,
                PRNG_COLUMNS,
                partial(profile_prng, config, batch, opts.repeats),
            ),
            (
                "ablations",
                opts.ablations,
                ABLATION_COLUMNS,
                partial(profile_ablations, config, batch, opts.scan_steps, opts.repeats),
            ),
        ]
        for section, wanted, columns, run in sections:
            if wanted:
                print(f"{section}:", file=sys.stderr)
                entry[section] = run()
                print(
                    f"\n### {section}\n\n" + markdown_table(_with_range(entry[section]), columns),
                    flush=True,
                )
        if opts.thunks:
            print("thunks:", file=sys.stderr)
            entry["thunks"] = profile_thunks(config, batch, opts.scan_steps, top=opts.top)
            print("\n### thunks\n\n" + markdown_table(entry["thunks"], THUNK_COLUMNS), flush=True)
        if opts.hlo:
            text_hlo = step_hlo(config, batch)
            entry["hlo"] = hlo_census(text_hlo)
            if opts.hlo_dir:
                path = Path(opts.hlo_dir) / f"step_{name}_{batch}.hlo.txt"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text_hlo)
                entry["hlo"]["path"] = str(path)
            print(f"\nHLO census: {entry['hlo']}", flush=True)
        result["cases"].append(entry)
    if opts.json:
        write_json(opts.json, result)
    return result


if __name__ == "__main__":
    main()
