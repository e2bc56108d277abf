"""This library against the 2023 Gigastep library, timed by one harness in alternated processes.

    git clone https://github.com/mlech26l/gigastep /path/to/gigastep-2023   # 6288d65 measured
    python -m benchmarks.against_2023 --reference /path/to/gigastep-2023 --rounds 3
    python -m benchmarks.against_2023 --reference R --batch 100000 --steps 4 --repeats 3
    python -m benchmarks.against_2023 --reference R --batch 64 --repeats 20 \\
        --scenario identical_5_vs_5_fobs_rgb_maps_cont      # RGB 84x84

(R is the clone's folder; the second line is a million agents, 5 vs 5 x 100,000 games.)

Both libraries build the scenario by its name (`gigastep.make` here, `make_scenario` there)
and run the same code (benchmarks/_against_2023_worker.py): `v_reset` on B keys, then one
jitted `lax.scan` of S steps whose carry is (observations, states, key); each step splits the
key, draws uniform actions (in [-1, 1]^3, or one of the 27 discrete actions) and calls
`v_step(states, actions, split(key, B))`. The observations and states are donated to each
call, so a call writes into the buffers of the last (what a long rollout does; `--no-donate`
keeps them, as the scratch harness of the first comparison, 2026-12-02, did). After one
compiling call, R calls are timed. Before each, untimed, the rollout runs once (`--no-warm`
leaves this out: then each timed call starts just after another process's, with cold caches
and sleeping threads, which costs a 10 ms call far more than a 300 ms one) and then every game
is reset (`--no-fresh` lets the games run on from call to call instead: random play ends most
games within 50 steps, and a finished game costs either library less, so those steps would
not measure play).
Every side runs in a fresh process per round; the processes of a round are compiled one after
the other, then their timed calls alternate one by one (so each side's calls sample the same
moments of a machine whose speed drifts):
"native" is this library as it installs (the native kernel writes vector observations on the
CPU), "jax" is its pure JAX path (`GIGASTEP_NATIVE=0`, what GPUs run) and "2023" the 2023
library, imported from --reference. The 2023 library, as published, needs `jax.tree_map`
(an alias of `jax.tree.map` that jax 0.6 removed) and the `type_enforced` package (an
identity decorator stands in where it is not installed); the worker supplies both and changes
nothing else.

Reported per process: agent-steps/s (steps x games x agents / the median wall time of one
call; the range over calls), env-steps/s, agent-steps per second of CPU time (all threads;
steadier on a shared machine), the reset and the compiling first call apart, and peak RSS
(`ru_maxrss`: the whole process, Python and jax included). Per round, each side's speed over
the 2023 library's (wall time). `--json PATH` keeps every row with the machine's description.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import Column, format_number, markdown_table, option, run_info, write_json

__all__ = ["Options", "check_reference", "main", "ratios", "run_round"]

_ROOT = Path(__file__).resolve().parent.parent
_WORKER = Path(__file__).resolve().parent / "_against_2023_worker.py"
SIDES = ("native", "jax", "2023")


@dataclass
class Options:
    reference: str = option(
        "",
        "a clone of github.com/mlech26l/gigastep (the folder holding gigastep/gigastep_env.py)",
        metavar="DIR",
    )
    scenario: str = option("identical_5_vs_5_pobs_vec_maps_cont", "scenario name (both libraries)")
    batch: int = option(1024, "parallel games")
    steps: int = option(20, "steps per timed call (one lax.scan)")
    repeats: int = option(5, "timed calls per process (after one compiling call)")
    rounds: int = option(3, "rounds; each runs every side once, in a fresh process, in turn")
    sides: list[str] = option(
        list(SIDES),
        "which to run: native (this library as it "
        "installs: the native CPU kernels of the vector observation and "
        "the RGB drawing), jax (with GIGASTEP_NATIVE=0: what GPUs run), "
        "2023; 'ours' is native under its name before the RGB kernel",
        choices=[*SIDES, "ours"],
    )
    seed: int = option(0, "seed of the reset and the actions")
    donate: bool = option(
        True,
        "donate the observations and states to each call (--no-donate: "
        "keep them, so a call holds two copies)",
    )
    fresh: bool = option(
        True,
        "reset every game before each timed call, untimed, so the timed "
        "steps play live games (--no-fresh: the games run on from call to "
        "call, and most have ended after 50 steps of random play)",
    )
    warm: bool = option(
        True,
        "run the rollout once, untimed, right before each timed call, "
        "so that each side is timed in steady state, as in a long rollout "
        "(--no-warm: each timed call follows the other sides' calls, whose "
        "process evicted its caches while its threads slept; short calls "
        "lose the most)",
    )
    timeout: float = option(1800.0, "seconds before a round's processes are stopped")
    json: str | None = option(None, "write every row (and the machine) to this JSON file")


def check_reference(path: str) -> Path:
    """The 2023 library's folder, or ValueError naming what was given and what is expected."""
    if not path:
        raise ValueError(
            "--reference is required: the folder of a clone of https://github.com/"
            "mlech26l/gigastep (commit 6288d65 was measured)"
        )
    root = Path(path).expanduser().resolve()
    if not (root / "gigastep" / "gigastep_env.py").is_file():
        raise ValueError(
            f"--reference {path}: expected the 2023 library's folder, which holds "
            f"gigastep/gigastep_env.py; {root} does not"
        )
    return root


class _Side:
    """One side's worker process: started, compiled, then one timed call per `call()`."""

    def __init__(
        self, side: str, options: Options, reference: Path | None, started: list[subprocess.Popen]
    ) -> None:
        self.label = side
        self.case = {
            "side": "2023" if side == "2023" else "ours",
            "root": str(reference if side == "2023" else _ROOT),
            "scenario": options.scenario,
            "batch": options.batch,
            "steps": options.steps,
            "repeats": options.repeats,
            "seed": options.seed,
            "donate": options.donate,
            "fresh": options.fresh,
            "warm": options.warm,
        }
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GIGASTEP_NATIVE")}
        if side == "jax":
            env["GIGASTEP_NATIVE"] = "0"
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, str(_WORKER), json.dumps(self.case)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        started.append(self.proc)
        self.row: dict[str, Any] = {**self.case, "label": side, "wall_s": [], "cpu_s": []}
        self.row.update(self._read())  # the setup: compiled, one call made

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.proc.wait()
            self.stderr.seek(0)
            tail = self.stderr.read()[-1500:]
            raise RuntimeError(f"worker exited with {self.proc.returncode}: {tail}")
        return json.loads(line)

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def call(self) -> None:
        self._send("call")
        timing = self._read()
        self.row["wall_s"].append(timing["wall_s"])
        self.row["cpu_s"].append(timing["cpu_s"])

    def finish(self) -> dict[str, Any]:
        self._send("end")
        self.row.update(self._read())
        self.proc.wait()
        self.stderr.close()
        return _with_speeds(self.row)


def _with_speeds(row: dict[str, Any]) -> dict[str, Any]:
    agent_steps = row["steps"] * row["batch"] * row["n_agents"]
    wall, cpu = row["wall_s"], row["cpu_s"]
    return {
        **row,
        "agent_steps_per_s": agent_steps / statistics.median(wall),
        "agent_steps_per_s_min": agent_steps / max(wall),
        "agent_steps_per_s_max": agent_steps / min(wall),
        "env_steps_per_s": row["steps"] * row["batch"] / statistics.median(wall),
        "agent_steps_per_cpu_s": agent_steps / statistics.median(cpu),
    }


def run_round(sides: list[str], options: Options, reference: Path | None) -> list[dict[str, Any]]:
    """Start (and compile) each side's process in turn, then alternate their timed calls one
    by one (the order rotating every repeat), so that each side's calls sample the same
    moments of the machine. Rows, with `error` for a side that failed."""
    live: list[_Side] = []
    started: list[subprocess.Popen] = []
    failed = []
    timer = threading.Timer(options.timeout, lambda: [proc.kill() for proc in started])
    timer.start()
    try:
        for side in sides:
            try:
                live.append(_Side(side, options, reference, started))
            except RuntimeError as e:
                if not timer.is_alive():
                    raise
                failed.append({"label": side, "error": str(e)})
        for i in range(options.repeats):
            k = i % len(live) if live else 0
            for side in live[k:] + live[:k]:
                side.call()
        rows = [side.finish() for side in live]
    except (RuntimeError, OSError, ValueError) as e:
        error = str(e) if timer.is_alive() else f"timed out after {options.timeout:.0f} s"
        rows = [{"label": side, "error": error} for side in sides]
        failed = []
    finally:
        timer.cancel()
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return rows + failed


def ratios(rows: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per round, each side's agent-steps/s (wall) over the 2023 library's of that round."""
    out: dict[int, dict[str, float]] = {}
    for r in {row["round"] for row in rows}:
        same = {row["label"]: row for row in rows if row["round"] == r and "error" not in row}
        if "2023" in same:
            base = same["2023"]["agent_steps_per_s"]
            out[r] = {k: v["agent_steps_per_s"] / base for k, v in same.items() if k != "2023"}
    return out


def _million(x: float) -> str:
    return format_number(x / 1e6)


_COLUMNS = [
    Column("round", "round"),
    Column("label", "side"),
    Column("agent_steps_per_s", "M agent-steps/s (wall, median)", _million),
    Column("range", "range over calls"),
    Column("env_steps_per_s", "k env-steps/s", lambda x: format_number(x / 1e3)),
    Column("agent_steps_per_cpu_s", "M agent-steps per CPU-s", _million),
    Column("compile_and_first_call_s", "compile + first call [s]", format_number),
    Column("peak_rss_mib", "peak RSS [MiB]", lambda x: f"{x:.0f}"),
    Column("vs_2023", "× 2023 (wall)", lambda x: f"{x:.2f}×" if x else ""),
]


def render(rows: list[dict[str, Any]]) -> str:
    by_round = ratios(rows)
    shown = []
    for row in rows:
        if "error" in row:
            shown.append({"round": row["round"], "label": f"{row['label']} (failed)"})
            continue
        lo, hi = row["agent_steps_per_s_min"] / 1e6, row["agent_steps_per_s_max"] / 1e6
        shown.append(
            {
                **row,
                "range": f"{format_number(lo)}–{format_number(hi)}",
                "vs_2023": by_round.get(row["round"], {}).get(row["label"]),
            }
        )
    lines = [markdown_table(shown, _COLUMNS)]
    for r, sides in sorted(by_round.items()):
        for side, ratio in sides.items():
            lines.append(f"round {r}: {side} / 2023 = {ratio:.2f}×")
    if len(by_round) > 1:
        for side in dict.fromkeys(s for sides in by_round.values() for s in sides):
            values = [sides[side] for sides in by_round.values() if side in sides]
            lines.append(
                f"{side} / 2023 over rounds: median {statistics.median(values):.2f}×, "
                f"{min(values):.2f}–{max(values):.2f}×"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    from benchmarks._common import add_options, options_from_args

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.against_2023",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_options(parser, Options)
    options = options_from_args(Options, parser.parse_args(argv))
    sides = list(dict.fromkeys(options.sides))
    if min(options.batch, options.steps, options.repeats, options.rounds) < 1:
        parser.error("--batch, --steps, --repeats and --rounds must be at least 1")
    try:
        reference = check_reference(options.reference) if "2023" in sides else None
        from gigastep.scenarios import make_config

        make_config(options.scenario)  # an unknown name fails here, before any process starts
    except ValueError as e:
        parser.error(str(e))
    rows = []
    for r in range(1, options.rounds + 1):
        print(f"[round {r}/{options.rounds}] {', '.join(sides)} ...", file=sys.stderr, flush=True)
        for row in run_round(sides, options, reference):
            if "error" in row:
                print(f"    {row['label']} failed: {row['error'][-400:]}", file=sys.stderr)
            rows.append({**row, "round": r})
    print(render(rows))
    if options.json:
        write_json(options.json, {"run_info": run_info(), "options": vars(options), "rows": rows})
    return rows


if __name__ == "__main__":
    main()
