"""Run the native observation kernels under AddressSanitizer + UndefinedBehaviorSanitizer.

    python tools/sanitize_native.py            # -O1 -g build, kernel tests + stress, ~4 min
    python tools/sanitize_native.py --opt -O3  # the optimised code the library ships

Builds gigastep/game/_native/ (vector_obs.cc, rgb_obs.cc, hazards.cc) with
``-fsanitize=address,undefined
-fno-sanitize-recover=all`` (through ``GIGASTEP_NATIVE_FLAGS``) into a temporary cache
directory, so the normal cache never holds the instrumented library; preloads the ASan
runtime (``LD_PRELOAD=$(c++ -print-file-name=libasan.so)``, then libstdc++; ``detect_leaks=0``,
as Python leaks by design) and runs, each in a subprocess: the kernels' tests
(tests/game/test_native_vector_obs.py, tests/game/test_native_operands.py,
tests/game/test_nonfinite.py, tests/game/test_native_rgb.py, tests/game/test_rgb.py,
tests/game/test_native_hazards.py)
and a stress of batches of 1 to 10,000 games holding NaN, +-inf and overflowing positions,
headings and speeds, checked against the JAX path (the vector observation, then the RGB
images). Exits non-zero on any sanitizer report,
test failure or a run that did not load the instrumented library. Not part of the default
test suite (it needs a GCC or Clang with the sanitizer runtimes and takes minutes).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = [
    "tests/game/test_native_vector_obs.py",
    "tests/game/test_native_operands.py",
    "tests/game/test_nonfinite.py",
    "tests/game/test_native_rgb.py",
    "tests/game/test_rgb.py",
    "tests/game/test_native_hazards.py",
]
REPORT = re.compile(r"ERROR: AddressSanitizer|runtime error:|SUMMARY: \w+Sanitizer")


def _stress(batches: list[int]) -> None:
    """In the instrumented subprocess: random and non-finite batches through the kernel."""
    import jax
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from gigastep.game import _native
    from tests.game import test_native_vector_obs as t

    ok, detail = _native._load_cached()
    if not ok or os.environ["GIGASTEP_CACHE_DIR"] not in detail:
        raise SystemExit(f"the instrumented kernel was not loaded: {detail}")
    print(f"loaded {detail}", flush=True)
    for name in (
        "5v5",
        "7 agents, 3 rows",
        "17 agents (insertion path)",
        "64 agents, waypoints, deterministic",
    ):
        config = t._config(name)
        jax_fn, native_fn = t._paths(config)
        for batch in batches:
            if batch * config.n_agents > 200_000:
                continue
            start = time.perf_counter()
            inputs = t._nonfinite_inputs(config, batch=min(batch, 64), seed=batch)
            # Tile the 64 distinct games up to `batch` (building each by hand is slow).
            inputs = jax.tree.map(
                lambda a, b=batch: np.resize(np.asarray(a), (b, *np.shape(a)[1:])), inputs
            )
            t._assert_same_bits(native_fn(*inputs), jax_fn(*inputs))
            print(f"  {name}: {batch} games ok ({time.perf_counter() - start:.1f} s)", flush=True)
    from tests.game import test_native_rgb as r

    states, seen, damaged = r._states(r.CFG, batch=64, seed=0, special=0.3)
    for batch in batches:
        start = time.perf_counter()
        args = jax.tree.map(
            lambda a, b=batch: np.resize(np.asarray(a), (b, *np.shape(a)[1:])),
            (states.agents, states.episode, seen, damaged),
        )
        r._assert_same(*r._both(r.CFG, *args))
        print(f"  RGB images: {batch} games ok ({time.perf_counter() - start:.1f} s)", flush=True)


def _run(cmd: list[str], env: dict) -> tuple[int, str]:
    print("$", " ".join(shlex.quote(c) for c in cmd), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    report = REPORT.search(out)
    if report:  # the report's first lines: what was read, where
        print(out[max(0, report.start() - 500) : report.start() + 3000], flush=True)
    print(out[-3000:], flush=True)
    return proc.returncode, out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--opt", default="-O1", help="optimisation flag (default -O1)")
    parser.add_argument(
        "--batches",
        default="1,2,3,63,64,65,1000,10000",
        help="comma-separated batch sizes of the stress run",
    )
    parser.add_argument("--stress-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    if args.stress_only:
        _stress(batches)
        return 0
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        print("no C++ compiler", file=sys.stderr)
        return 2
    # The ASan runtime first; libstdc++ right after it, so that ASan's __cxa_throw interceptor
    # finds the real one (jaxlib throws C++ exceptions before it would load libstdc++ itself).
    preload = []
    for lib in ("libasan.so", "libstdc++.so"):
        path = subprocess.run(
            [cxx, f"-print-file-name={lib}"], capture_output=True, text=True
        ).stdout.strip()
        if not os.path.isabs(path) or not os.path.exists(path):
            print(f"{cxx} has no {lib} (the sanitizer runtime is needed)", file=sys.stderr)
            return 2
        preload.append(path)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gigastep-asan-") as cache:
        env = dict(
            os.environ,
            GIGASTEP_CACHE_DIR=cache,
            GIGASTEP_NATIVE="1",
            GIGASTEP_NATIVE_FLAGS=f"-fsanitize=address,undefined "
            f"-fno-sanitize-recover=all -fno-omit-frame-pointer -g {args.opt}",
            LD_PRELOAD=" ".join(preload),
            # Reports go to files: pytest's fd capture would drop them with the process.
            ASAN_OPTIONS=f"detect_leaks=0:log_path={cache}/report",
            UBSAN_OPTIONS=f"print_stacktrace=1:halt_on_error=1:log_path={cache}/report",
            JAX_PLATFORMS="cpu",
        )
        runs = [
            [
                sys.executable,
                "-m",
                "pytest",
                *TESTS,
                "-q",
                "-p",
                "no:randomly",
                "-p",
                "no:cacheprovider",
                "-W",
                "error::RuntimeWarning",
            ],
            [sys.executable, __file__, "--stress-only", "--batches", args.batches],
        ]
        failed = False
        for cmd in runs:
            code, out = _run(cmd, env)
            for report in sorted(Path(cache).glob("report*")):
                text = report.read_text(errors="replace")
                print(text[:6000], flush=True)
                out += text
                report.unlink()
            reports = sorted(set(REPORT.findall(out)))
            if code != 0 or reports:
                print(f"FAILED (exit {code}; sanitizer reports: {reports or 'none'})")
                failed = True
    took = time.perf_counter() - start
    verdict = "FAILED" if failed else "clean: no sanitizer report, every test passed"
    print(f"sanitizer check ({args.opt}): {verdict} in {took:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
