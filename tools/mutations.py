"""Mutation check: does the test suite catch realistic one-line bugs?

A script, not a test module (pytest collects only test_*.py). It copies the working tree
(tracked and untracked-but-not-ignored files) to a temporary directory, then for each mutation
in MUTATIONS replaces one exact piece of text in one file of the copy, runs the tests that
should catch it there, and restores the file. A mutation is *caught* when those tests fail,
*survived* when they pass, *stale* when its old text is not found exactly once (the code moved
on: update the entry), and *error* when pytest could not run (collection error, timeout).

The copy's tests run with the copy's package first on sys.path (checked before any mutation)
and with GIGASTEP_CACHE_DIR set to a fresh temporary directory, so a mutation of the C++
kernel is compiled (the kernel's cache key hashes its source). The unmutated copy is run first
on the union of the chosen tests: a mutation only counts as caught if those tests passed
without it.

Usage:
    python tools/mutations.py                  # every mutation, each with its own tests
    python tools/mutations.py --list           # the mutations and their tests
    python tools/mutations.py -k reset frame   # mutations whose name contains any word
    python tools/mutations.py --full           # each mutation against the default suite

Exit status 0 when every selected mutation was caught, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest arguments (files or node ids) that should catch it
    description: str
    env: dict = field(default_factory=dict)  # extra environment variables for the run
    # A command that must fail too (e.g. the same-run speed guard); run in the copy after the
    # tests, with the same environment. Caught only when the tests and the command both fail.
    command: tuple[str, ...] = ()


RESET = "tests/game/test_reset_rules.py::"
MUTATIONS = [
    # --- issue 16's table -------------------------------------------------------------------
    Mutation(
        "reset_health_min_1",
        "gigastep/game/reset.py",
        "health=max_health,\n        alive=alive,",
        "health=jnp.minimum(max_health, 1.0),\n        alive=alive,",
        (RESET + "test_agents_start_at_their_own_max_health", "tests/game/test_reference_reset.py"),
        "reset starts agents at min(max_health, 1) (the 2023 behaviour)",
    ),
    Mutation(
        "map_index_n_minus_2",
        "gigastep/game/reset.py",
        "return jax.random.randint(k_map, (), 0, n_maps)",
        "return jax.random.randint(k_map, (), 0, n_maps - 2)",
        (RESET + "test_map_index_is_uniform_over_the_scenarios_map_set",),
        "the map index drawn from [0, n_maps - 2): one or two maps never used",
    ),
    Mutation(
        "reset_no_collision_resampling",
        "gigastep/game/reset.py",
        "conflict = jnp.any(close & earlier, axis=1)",
        "conflict = jnp.zeros(n, bool)",
        (RESET + "test_no_starting_pair_is_within_the_enlarged_collision_cylinder",),
        "reset resampling of colliding starts disabled",
    ),
    Mutation(
        "framestack_autoreset_zeros",
        "gigastep/wrappers.py",
        "_repeat(obs, self.num_frames),",
        "jax.tree_util.tree_map(jnp.zeros_like, _repeat(obs, self.num_frames)),",
        ("tests/api/test_wrappers.py",),
        "FrameStack.step_autoreset restarts the stack with zeros, not the reset frame",
    ),
    Mutation(
        "framestack_reset_done_zeros",
        "gigastep/wrappers.py",
        "jax.tree_util.tree_map(pick, new_obs, obs),",
        "jax.tree_util.tree_map(pick, jax.tree_util.tree_map(jnp.zeros_like, new_obs), obs),",
        ("tests/api/test_wrappers.py",),
        "FrameStack.reset_done_episodes fills the stack with zeros, not the reset frame",
    ),
    Mutation(
        "center_block_box_coordinate",
        "envs/maps.toml",
        "[maps.center_block]\nboxes = [[3.8, 3.8, 6.2, 6.2]]",
        "[maps.center_block]\nboxes = [[3.8, 3.8, 6.3, 6.2]]",
        ("tests/game/test_map_data.py",),
        "one coordinate of center_block's box in envs/maps.toml changed (x2 6.2 -> 6.3)",
    ),
    # --- more of the reset -------------------------------------------------------------------
    Mutation(
        "reset_heading_not_redrawn",
        "gigastep/game/reset.py",
        "heading=jnp.where(need, dynamics.wrap_angle(h), a.heading),",
        "heading=jnp.where(need, a.heading, a.heading),",
        (RESET + "test_headings_are_redrawn_with_positions",),
        "a redrawn agent keeps its first heading",
    ),
    Mutation(
        "reset_padding_boxes_count",
        "gigastep/game/reset.py",
        "conflict = conflict | jnp.any(inside & box_valid[None, :], axis=1)",
        "conflict = conflict | jnp.any(inside, axis=1)",
        (RESET + "test_padding_boxes_do_not_force_redraws",),
        "zero padding boxes force redraws near the origin (the 2023 behaviour)",
    ),
    Mutation(
        "lock_without_detection",
        "gigastep/game/interactions.py",
        "lock = (can & shoot) if config.stochastic_obs else (detected & shoot)",
        "lock = can & shoot",
        (
            "tests/game/test_rules.py",
            "tests/game/test_reference_equivalence.py",
            "tests/game/test_rule_sections.py",
        ),
        "deterministic detection: a lock without the target being detected",
    ),
    Mutation(
        "cone_wide_compare_flipped",
        "gigastep/game/interactions.py",
        "ahead = (f >= 0) | (f * f < c2 * geo.d2)",
        "ahead = (f >= 0) | (f * f > c2 * geo.d2)",
        ("tests/game/test_cone.py", "tests/game/test_rules.py"),
        "a cone wider than a half-turn takes the targets behind the edge, not ahead of it",
    ),
    # --- the JAX vector observation (the path every GPU runs) -------------------------------
    Mutation(
        "jax_heading_wrap_removed_native_off",
        "gigastep/game/observations/vector.py",
        "d = jnp.where(jnp.asarray(f == 5) & ~is_ego, wrap_angle(d), d)",
        "d = jnp.where(jnp.asarray(f == 5) & ~is_ego, d, d)",
        ("tests/game/test_vector_obs.py", "tests/game/test_reference_equivalence.py"),
        "relative heading not wrapped in the JAX vector observation (GIGASTEP_NATIVE=0)",
        {"GIGASTEP_NATIVE": "0"},
    ),
    Mutation(
        "jax_heading_wrap_removed",
        "gigastep/game/observations/vector.py",
        "d = jnp.where(jnp.asarray(f == 5) & ~is_ego, wrap_angle(d), d)",
        "d = jnp.where(jnp.asarray(f == 5) & ~is_ego, d, d)",
        (
            "tests/game/test_jax_path.py",
            "tests/game/test_vector_obs.py",
            "tests/game/test_native_vector_obs.py",
        ),
        "relative heading not wrapped in the JAX vector observation (default settings, "
        "where the CPU runs the native kernel)",
    ),
    Mutation(
        "jax_nonfinite_agent_seen",
        "gigastep/game/observations/visibility.py",
        "return seen if finite is None else seen & finite[None, :]",
        "return seen",
        ("tests/game/test_nonfinite.py", "tests/game/test_native_vector_obs.py"),
        "JAX visibility: an agent with a non-finite position is still seen",
    ),
    # --- the native kernel (C++) --------------------------------------------------------------
    Mutation(
        "native_waypoint_active_ge",
        "gigastep/game/_native/vector_obs.cc",
        "const float active = g.waypoint_time > 0 ? 1.0f : 0.0f;",
        "const float active = g.waypoint_time >= 0 ? 1.0f : 0.0f;",
        ("tests/game/test_native_vector_obs.py", "tests/game/test_vector_obs.py"),
        "kernel: an expired waypoint (time 0) is reported active (> -> >=)",
    ),
    Mutation(
        "native_row_order_tie_le",
        "gigastep/game/_native/vector_obs.cc",
        "(kj == keys[w]) & (j < lane[w])",
        "(kj == keys[w]) & (j <= lane[w])",
        ("tests/game/test_native_vector_obs.py", "tests/game/test_vector_obs.py"),
        "kernel: row-order tie break < -> <= (an agent counts itself as nearer)",
    ),
    Mutation(
        "native_dx_sign",
        "gigastep/game/_native/vector_obs.cc",
        "q[2] = (g.x[i] - xe) * p.inv_lx;",
        "q[2] = (xe - g.x[i]) * p.inv_lx;",
        ("tests/game/test_native_vector_obs.py", "tests/game/test_vector_obs.py"),
        "kernel: wrong sign of the relative x of another agent",
    ),
    Mutation(
        "native_comm_inverted",
        "gigastep/game/_native/vector_obs.cc",
        "share |= static_cast<uint64_t>(MaskBits(ratio <= u)) << w;",
        "share |= static_cast<uint64_t>(MaskBits(ratio >= u)) << w;",
        ("tests/game/test_native_vector_obs.py", "tests/game/test_vector_obs.py"),
        "kernel: stochastic communication test inverted (<= -> >=)",
    ),
    Mutation(
        "native_seen_by_sharers_dropped",
        "gigastep/game/_native/vector_obs.cc",
        "row |= ~none & ((uint32_t{1} << n) - 1);",
        "row |= ~none & ((uint32_t{1} << n) - 2);",
        ("tests/game/test_native_vector_obs.py", "tests/game/test_vector_obs.py"),
        "kernel: agent 0 never seen through a sharing teammate's detection (SSE path)",
    ),
    Mutation(
        "native_nonfinite_agent_seen",
        "gigastep/game/_native/vector_obs.cc",
        "seen[e] = row & finite;",
        "seen[e] = row;",
        ("tests/game/test_nonfinite.py", "tests/game/test_native_vector_obs.py"),
        "kernel: an agent with a non-finite position is still seen (communication mode)",
    ),
    Mutation(
        "native_hazards_collision_radius_le",
        "gigastep/game/_native/hazards.cc",
        "hit |= (d2 < r2) & (dz < alt)",
        "hit |= (d2 <= r2) & (dz < alt)",
        ("tests/game/test_native_hazards.py",),
        "hazards kernel: agents exactly at the collision radius collide (< -> <=)",
    ),
    Mutation(
        "native_hazards_dead_collide",
        "gigastep/game/_native/hazards.cc",
        "& LoadI(A + w) & (lanes + w != SplatI(i));",
        "& (lanes + w != SplatI(i));",
        ("tests/game/test_native_hazards.py",),
        "hazards kernel: an agent collides with a dead or out-of-bounds one",
    ),
    Mutation(
        "native_hazards_box_edge_inside",
        "gigastep/game/_native/hazards.cc",
        "inside |= (xs > Splat(box[0]))",
        "inside |= (xs >= Splat(box[0]))",
        ("tests/game/test_native_hazards.py",),
        "hazards kernel: an agent on a box's edge counts as inside (> -> >=)",
    ),
    Mutation(
        "native_fma_ignored",
        "gigastep/game/_native/__init__.py",
        'fma = ["-DGIGASTEP_XLA_FMA=1"]',
        'fma = ["-DGIGASTEP_XLA_FMA=0"]',
        ("tests/game/test_native_hazards.py",),
        "kernels built to round a * b + c * d twice where XLA fuses it (or the reverse)",
    ),
    Mutation(
        "native_rgb_tail_channel_swapped",
        "gigastep/game/_native/rgb_obs.cc",
        "(p.teams[j] == team ? 2 : 0)",
        "(p.teams[j] == team ? 0 : 2)",
        ("tests/game/test_rgb.py", "tests/game/test_native_rgb.py"),
        "RGB kernel: teammates' tails in red, enemies' in blue",
    ),
    Mutation(
        "native_rgb_bar_cut_le",
        "gigastep/game/_native/rgb_obs.cc",
        "const bool green = x < cut;",
        "const bool green = x <= cut;",
        ("tests/game/test_rgb.py", "tests/game/test_native_rgb.py"),
        "RGB kernel: the health bar one pixel too long (< -> <=)",
    ),
    Mutation(
        "native_rgb_negative_map_index",
        "gigastep/game/_native/rgb_obs.cc",
        "int32_t map = g.map_idx < 0 ? WrapAdd(g.map_idx, p.maps) : g.map_idx;",
        "int32_t map = g.map_idx;",
        ("tests/game/test_native_rgb.py",),
        "RGB kernel: a negative map index is clamped to 0, not counted from the end",
    ),
    Mutation(
        "native_rgb_waypoint_on_bar",
        "gigastep/game/_native/rgb_obs.cc",
        "if (inside(x, y) && y != ry - 1) {",
        "if (inside(x, y)) {",
        ("tests/game/test_rgb.py", "tests/game/test_native_rgb.py"),
        "RGB kernel: the waypoint is drawn over the health bar",
    ),
    Mutation(
        "native_rgb_broadcast_stride",
        "gigastep/game/_native/rgb_obs.cc",
        "op->stride[d] = dims[d] == 1 ? 0 : block;",
        "op->stride[d] = block;",
        ("tests/game/test_native_rgb.py",),
        "RGB kernel: an operand vmap did not batch is read past its end, not broadcast",
    ),
    # --- the adapters -------------------------------------------------------------------------
    Mutation(
        "gymnasium_next_step_drops_truncation",
        "gigastep/adapters/gymnasium.py",
        "truncated = truncated & ~pending",
        "truncated = truncated & pending",
        ("tests/adapters/test_gymnasium.py",),
        "gymnasium vector env (next-step mode) never reports truncation",
    ),
    Mutation(
        "gymnasium_same_step_swaps_endings",
        "gigastep/adapters/gymnasium.py",
        "info.terminated,\n            info.truncated,",
        "info.truncated,\n            info.terminated,",
        ("tests/adapters/test_gymnasium.py",),
        "gymnasium vector env (same-step mode) swaps terminated and truncated",
    ),
    Mutation(
        "pettingzoo_truncation_as_termination",
        "gigastep/adapters/pettingzoo.py",
        "terminations[a] = died or term",
        "terminations[a] = died or trunc",
        ("tests/adapters/test_pettingzoo.py",),
        "pettingzoo: a time limit is reported as termination, an elimination is not",
    ),
    # --- issue 21: the regression that no test caught ----------------------------------------
    Mutation(
        "jax_nonfinite_mask_elementwise",
        "gigastep/game/observations/visibility.py",
        "fields = jnp.stack([agents.x, agents.y, agents.z, agents.heading, agents.v])\n"
        "    return jnp.all(jnp.isfinite(fields), axis=0)",
        "ok = jnp.isfinite(agents.x) & jnp.isfinite(agents.y) & jnp.isfinite(agents.z)\n"
        "    return ok & jnp.isfinite(agents.heading) & jnp.isfinite(agents.v)",
        ("tests/tools/test_hlo_guard.py",),
        "the non-finite mask joined elementwise (1734d0f): recomputed in every fusion",
        command=(sys.executable, "-m", "tools.guard", "--only", "jax_obs_vs_native"),
    ),
    Mutation(
        "geometry_trig_per_pair",
        "gigastep/game/dynamics.py",
        "return stored(cos_sin(heading))",
        "return cos_sin(heading)",
        ("tests/tools/test_hlo_guard.py",),
        "the headings' cos/sin not stored: recomputed for every pair of agents",
    ),
    Mutation(
        "rgb_template_index_unstored",
        "gigastep/game/observations/rgb.py",
        "template=stored(took_damage.astype(jnp.int32)),",
        "template=took_damage.astype(jnp.int32),",
        ("tests/tools/test_hlo_guard.py",),
        "the template index (took damage) not stored: recomputed for every pixel (ff1c8a6)",
        command=(sys.executable, "-m", "tools.guard", "--only", "rgb_vs_vector"),
    ),
    Mutation(
        "torch_swaps_endings",
        "gigastep/adapters/torch.py",
        '"truncated": out.truncated,',
        '"truncated": out.terminated,',
        ("tests/adapters/test_torch_bridge.py",),
        "TorchVecEnv.step reports terminated as truncated",
    ),
    Mutation(
        "rgb_tail_add_wraps",
        "gigastep/game/observations/rgb.py",
        "return lambda p: jnp.minimum(p, headroom) + added",
        "return lambda p: p + added",
        ("tests/game/test_rgb.py",),
        "the tails' add wraps around 255 instead of saturating (the 2023 behaviour)",
    ),
    Mutation(
        "rgb_own_tail_not_raised",
        "gigastep/game/observations/rgb.py",
        "own = jnp.uint8(intensity) * viewers.visible.astype(jnp.uint8)",
        "own = jnp.uint8(0) * viewers.visible.astype(jnp.uint8)",
        ("tests/game/test_rgb.py", "tests/game/test_reference_equivalence.py"),
        "the ego's own tail points are not raised to white",
    ),
]


def source_files(repo: Path) -> list[str]:
    """The working tree's files: tracked plus untracked-but-not-ignored (git), else all."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=repo,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file()]
    return [f for f in out.decode().split("\0") if f and (repo / f).is_file()]


def copy_tree(repo: Path, dest: Path) -> None:
    for rel in source_files(repo):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target)


def run_pytest(copy: Path, args, env, timeout: float) -> tuple[int | None, str, float]:
    """(returncode or None on timeout, output, seconds) of pytest in the copy."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        *args,
    ]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else ""
        return None, out, time.perf_counter() - start
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start


def run_command(copy: Path, command, env, timeout: float) -> tuple[int | None, str, float]:
    """(returncode or None on timeout, output, seconds) of a command in the copy."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            list(command), cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return None, "", time.perf_counter() - start
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start


def first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", output, re.MULTILINE)
    return match.group(1) if match else "?"


def check_isolation(copy: Path, env) -> None:
    """The copy's package and catalogue must be the ones imported there."""
    code = (
        "import gigastep, gigastep._util.resources as r; "
        "print(gigastep.__file__); print(r.catalog_dir())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    for path in out:
        if not Path(path).resolve().is_relative_to(copy.resolve()):
            sys.exit(f"mutations: the copy imports {path}, outside {copy}; aborting")


def apply(copy: Path, m: Mutation) -> str | None:
    """Mutate the copy's file; returns its original text, or None when the mutation is stale."""
    path = copy / m.path
    if not path.is_file():
        return None
    text = path.read_text()
    if text.count(m.old) != 1:
        return None
    path.write_text(text.replace(m.old, m.new))
    return text


def table(rows) -> str:
    head = ("mutation", "result", "caught by", "s")
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(4)]
    fmt = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    lines = [fmt.format(*head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument(
        "-k",
        nargs="+",
        default=[],
        metavar="WORD",
        help="only mutations whose name contains one of these words",
    )
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument(
        "--full",
        action="store_true",
        help="run the default suite (python -m pytest -n 2) for every mutation",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per pytest run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = parser.parse_args(argv)

    selected = [m for m in MUTATIONS if not args.k or any(w in m.name for w in args.k)]
    if args.list or not selected:
        for m in selected:
            print(f"{m.name}: {m.description}\n    {m.path}; tests: {' '.join(m.tests)}")
        return 0 if selected else 1

    start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="gigastep-mutations-"))
    try:
        copy = tmp / "repo"
        copy_tree(REPO, copy)
        env = {
            **os.environ,
            "GIGASTEP_CACHE_DIR": str(tmp / "cache"),
            "PYTHONPATH": str(copy),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        check_isolation(copy, env)
        suite = ("-n", "2") if args.full else ()
        tests = sorted({t for m in selected for t in m.tests})
        rc, out, secs = run_pytest(copy, suite or tests, env, args.timeout)
        print(f"unmutated: {'passed' if rc == 0 else 'FAILED'} in {secs:.0f} s", flush=True)
        if rc != 0:
            print(out[-4000:])
            return 1
        for command in sorted({m.command for m in selected if m.command}):
            rc, out, secs = run_command(copy, command, env, args.timeout)
            print(
                f"unmutated: {' '.join(command[1:])} {'passed' if rc == 0 else 'FAILED'} "
                f"in {secs:.0f} s",
                flush=True,
            )
            if rc != 0:
                print(out[-4000:])
                return 1
        rows = []
        for m in selected:
            original = apply(copy, m)
            if original is None:
                rows.append((m.name, "stale", f"old text not found once in {m.path}", "0"))
                print(f"{m.name}: stale", flush=True)
                continue
            try:
                rc, out, secs = run_pytest(copy, suite or m.tests, {**env, **m.env}, args.timeout)
                by_command = ""
                if rc == 1 and m.command:
                    crc, cout, csecs = run_command(copy, m.command, {**env, **m.env}, args.timeout)
                    secs += csecs
                    by_command = f" and {m.command[2] if len(m.command) > 2 else m.command[0]}"
                    if crc != 1:  # the tests caught it, the command did not: not caught
                        rc, out = (0 if crc == 0 else crc), cout
            finally:
                (copy / m.path).write_text(original)
            if rc == 1:
                result, by = "caught", first_failure(out) + by_command
            elif rc == 0:
                result, by = "SURVIVED", "-"
            else:
                result, by = "error", "timeout" if rc is None else f"pytest exit {rc}"
            rows.append((m.name, result, by, f"{secs:.0f}"))
            print(f"{m.name}: {result} ({by}, {secs:.0f} s)", flush=True)
        print()
        print(table(rows))
        caught = sum(r[1] == "caught" for r in rows)
        print(f"\n{caught} of {len(rows)} caught in {time.perf_counter() - start:.0f} s")
        return 0 if caught == len(rows) else 1
    finally:
        if args.keep:
            print(f"copy kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
