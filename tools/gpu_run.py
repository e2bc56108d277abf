"""The checks that need a CUDA GPU, in one run of at most 5 minutes (`.ci/gpu` runs this).

    .ci/gpu [OUT_DIR] [--wheels DIR] [--steps NAME,...]     # the run (needs CUDA)
    GIGASTEP_GPU_REHEARSAL=cpu .ci/gpu [OUT_DIR]            # every step on the CPU, tiny sizes
    .ci/gpu --prepare-wheels DIR                            # the wheels the GPU image lacks
    .ci/gpu --list                                          # the steps and their time limits

Standard library only, so that it runs on a bare GPU image. Every step is a subprocess in
its own process group with its own time limit (and the whole run a budget: a step never
starts past it); a step that runs out of time is killed with its group, keeps its log and
reads "timed out"; a step that cannot run says why ("skipped: ..."). JAX runs with
`JAX_PLATFORMS=cuda,cpu` (a CUDA start that fails is an error, never a silent CPU run) and
`XLA_PYTHON_CLIENT_PREALLOCATE=false` (JAX and torch share the GPU; unless the caller chose a
split), and every benchmark row must name the expected backend.

OUT_DIR (default: $OUT if set, else results/gpu-<UTC date>) receives at most 8 files, no
folders: summary.txt (the table printed at the end, one line per step), report.md,
report.json, env.txt, bridge_tests.log, gpu_tests.log and gpu-run.tar.gz (every step's log and
outputs). The commit is $GIGASTEP_COMMIT, else `git rev-parse HEAD`, else "unknown".

Packages the image lacks travel as wheels: `--prepare-wheels DIR` downloads them here (pure
Python, for CPython 3.11 and 3.12; `pip download`, PyPI reachable), `--wheels DIR` installs
them offline into a private folder first (default: .ci/wheels when it holds a bundle).
Without CUDA the run stops at once with exit status 2, writing nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WHEELS = ROOT / ".ci" / "wheels"
BUDGET_S = 285.0  # the real run's steps; with start-up and packing it ends within 300 s
REHEARSAL_BUDGET_S = 900.0  # on 2 shared CPU cores, compiles dominate
MAX_FILES, MAX_FILE_BYTES = 8, 16 * 1024 * 1024
KEY_LOGS = ("bridge_tests", "gpu_tests")  # their logs are returned apart from the tarball
GOALS = {  # the figures the run is read against (issue 50)
    "throughput_vector": 1e9,  # agent-steps/s, 5v5 vector (the 2023 paper's A100: 0.38 G)
    "throughput_rgb": 3e7,  # agent-steps/s, 5v5 RGB 84x84
    "bridge": 0.8,  # TorchVecEnv's loop over its JAX scan, env-steps/s
}

# The wheels the GPU image lacks (it holds jax, jaxlib and the CUDA plugin, torch, numpy and
# their dependencies): what the steps import beyond those. Pinned to the versions the test
# suite passes with here; every one is pure Python, so one bundle serves CPython 3.11 and 3.12.
#   gigastep: chex (absl-py, toolz, typing-extensions), tqdm (gigastep.adapters.torch's progress)
#   tests: pytest (iniconfig, packaging, pluggy, pygments), hypothesis (sortedcontainers)
#   trainers: tyro (docstring-parser, typeguard), optax (the JAX trainer)
WHEELS = (
    "absl-py==2.5.1",
    "chex==0.1.92",
    "docstring-parser==0.18.0",
    "hypothesis==6.155.2",
    "iniconfig==2.3.0",
    "optax==0.2.8",
    "packaging==26.2",
    "pluggy==1.6.0",
    "pygments==2.19.2",
    "pytest==9.0.3",
    "sortedcontainers==2.4.0",
    "toolz==1.2.0",
    "tqdm==4.70.1",
    "typeguard==4.6.1",
    "typing-extensions==4.15.0",
    "tyro==1.0.17",
)
# What the steps import from the bundle (checked after installing it).
WHEEL_IMPORTS = (
    "chex optax tyro tqdm pytest hypothesis absl toolz typeguard docstring_parser pluggy "
    "iniconfig packaging pygments sortedcontainers typing_extensions"
).split()
PYTHON_VERSIONS = ("3.11", "3.12")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


# ------------------------------------------------------------------------------------------
# Steps
# ------------------------------------------------------------------------------------------


@dataclass
class Ctx:
    """What every step sees: the mode, the folders, the environment of its process."""

    rehearsal: bool
    work: Path  # every step's outputs (packed into gpu-run.tar.gz)
    python: str
    wheels: Path | None
    site: Path  # where the wheels are installed
    env: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # filled by the steps (env, ...)

    @property
    def backend(self) -> str:
        """The JAX backend every measurement must report."""
        return "cpu" if self.rehearsal else "gpu"

    @property
    def device(self) -> str:
        return "cpu" if self.rehearsal else "cuda"


@dataclass
class Outcome:
    status: str  # passed, failed, timed out, skipped
    key: str  # the key figure (or the reason)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    name: str
    limit_s: float  # on the GPU
    rehearsal_limit_s: float
    command: Callable[[Ctx], list[str] | str]  # argv, or a reason to skip
    check: Callable[[Ctx, Path, int], Outcome]  # (ctx, log, exit status) -> outcome
    env: tuple[tuple[str, str], ...] = ()
    purpose: str = ""

    def limit(self, rehearsal: bool) -> float:
        return self.rehearsal_limit_s if rehearsal else self.limit_s


def _py(ctx: Ctx, *args: str) -> list[str]:
    return [ctx.python, *args]


# --- env ------------------------------------------------------------------------------------

_ENV_PROBE = r"""
import json, os, platform, shutil, subprocess, sys
facts = {"python": platform.python_version(), "problems": []}
try:
    import torch
    facts["torch"] = torch.__version__
    facts["torch_cuda_build"] = torch.version.cuda
    facts["torch_cuda"] = torch.cuda.is_available()
    if facts["torch_cuda"]:
        facts["torch_device"] = torch.cuda.get_device_name()
        facts["torch_float32_matmul_precision"] = torch.get_float32_matmul_precision()
    else:
        facts["problems"].append(f"torch {torch.__version__} sees no CUDA device")
except Exception as err:
    facts["problems"].append(f"torch is not importable ({type(err).__name__}: {err})")
try:
    import jax, jaxlib, numpy
    facts.update(jax=jax.__version__, jaxlib=jaxlib.__version__, numpy=numpy.__version__)
    facts["jax_backend"] = jax.default_backend()
    facts["jax_devices"] = [str(d) for d in jax.devices()]
    facts["jax_device_kind"] = jax.devices()[0].device_kind
    precision = jax.config.jax_default_matmul_precision
    facts["jax_default_matmul_precision"] = str(precision or "default")  # default: TF32 on GPUs
except Exception as err:
    facts["problems"].append(f"jax cannot start ({type(err).__name__}: {str(err)[:300]})")
smi = shutil.which("nvidia-smi")
if smi:
    q = "name,driver_version,memory.total"
    r = subprocess.run([smi, f"--query-gpu={q}", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=20)
    facts["nvidia_smi"] = (r.stdout or r.stderr).strip()
keys = ("JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_FLAGS", "CUDA_VISIBLE_DEVICES")
facts["environment"] = {k: os.environ[k] for k in keys if k in os.environ}
print("FACTS " + json.dumps(facts))
"""


def _env_check(ctx: Ctx, log: Path, rc: int) -> Outcome:
    facts = _facts_from(log)
    ctx.facts.update(facts)
    if rc != 0 or not facts:
        return Outcome("failed", f"the probe exited with {rc}: see env.log")
    problems = list(facts.get("problems", []))
    if facts.get("jax_backend") not in (None, ctx.backend):
        problems.append(f"jax's default backend is {facts['jax_backend']!r}, not {ctx.backend!r}")
    if ctx.rehearsal:  # CUDA is not expected; only JAX must run
        problems = [p for p in problems if "CUDA" not in p]
    key = (
        f"jax {facts.get('jax', '?')} on {facts.get('jax_backend', '?')}"
        f" ({facts.get('jax_device_kind', '?')}), torch {facts.get('torch', '?')}"
        f" cuda={facts.get('torch_cuda', False)}, commit {ctx.facts['commit'][:12]}"
    )
    if problems:
        return Outcome("failed", "; ".join(problems), {"problems": problems})
    return Outcome("passed", key)


def _facts_from(log: Path) -> dict[str, Any]:
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("FACTS "):
            return json.loads(line[len("FACTS ") :])
    return {}


# --- wheels ---------------------------------------------------------------------------------


def _wheels_command(ctx: Ctx) -> list[str] | str:
    if ctx.wheels is None:
        return (
            f"no wheels bundle (--wheels DIR, or {DEFAULT_WHEELS.relative_to(ROOT)}/ from "
            "--prepare-wheels): the image's own packages are used"
        )
    return _py(
        ctx,
        str(Path(__file__).resolve()),
        "--install-wheels",
        str(ctx.wheels),
        str(ctx.site),
    )


def _wheels_check(ctx: Ctx, log: Path, rc: int) -> Outcome:
    text = log.read_text(errors="replace")
    found = re.search(r"installed (\d+) wheels; (\d+) of (\d+) imports work", text)
    if rc != 0 or not found:
        missing = re.findall(r"^cannot import (\S+)", text, re.MULTILINE)
        return Outcome("failed", f"exit {rc}; cannot import: {', '.join(missing) or '?'}")
    return Outcome("passed", found.group(0))


def install_wheels(bundle: Path, site: Path) -> int:
    """Install the bundle offline into `site` (pip, no index, no dependencies: the bundle is
    complete), then import every module the steps need from it, printing where each came
    from. Exit status 1 when something is missing."""
    reqs = bundle / "requirements.txt"
    if not reqs.is_file():
        print(f"{bundle} holds no requirements.txt (make it with --prepare-wheels)", flush=True)
        return 1
    site.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("pip") is None:
        print("pip is not installed: unpacking the wheels (all pure Python)", flush=True)
        _unpack_wheels(bundle, site)
    else:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        pip += ["--no-index", "--find-links", str(bundle), "--no-deps", "--no-compile"]
        pip += ["--target", str(site), "--upgrade", "-r", str(reqs)]
        print("$ " + shlex.join(pip), flush=True)
        proc = subprocess.run(pip)
        if proc.returncode != 0:
            return proc.returncode
    count = len(list(site.glob("*.dist-info")))
    probe = (
        "import importlib, sys\n"
        "ok = 0\n"
        f"for name in {list(WHEEL_IMPORTS)!r}:\n"
        "    try:\n"
        "        m = importlib.import_module(name)\n"
        "        ok += 1\n"
        "        print(name, getattr(m, '__version__', ''), getattr(m, '__file__', ''))\n"
        "    except Exception as err:\n"
        "        print(f'cannot import {name}: {type(err).__name__}: {err}')\n"
        f"print(f'installed {count} wheels; {{ok}} of {len(WHEEL_IMPORTS)} imports work')\n"
        f"sys.exit(ok != {len(WHEEL_IMPORTS)})\n"
    )
    env = {**os.environ, "PYTHONPATH": _join_path(os.environ.get("PYTHONPATH"), str(site))}
    return subprocess.run([sys.executable, "-c", probe], env=env).returncode


def _unpack_wheels(bundle: Path, site: Path) -> None:
    """What `pip install --target` does for a pure-Python wheel: unzip it (its files and its
    .dist-info) into `site`."""
    for wheel in sorted(bundle.glob("*.whl")):
        if not wheel.name.endswith("-none-any.whl"):
            print(f"skipped {wheel.name}: not pure Python", flush=True)
            continue
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)


def prepare_wheels(dest: Path, python_versions=PYTHON_VERSIONS) -> int:
    """Download WHEELS (binary only, no dependencies: the list is closed by hand) for the
    GPU image's CPython 3.12 and this machine's 3.11 into `dest`, with a requirements.txt."""
    dest.mkdir(parents=True, exist_ok=True)
    for version in python_versions:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
        cmd += ["--only-binary=:all:", "--no-deps", "--implementation", "cp"]
        cmd += ["--python-version", version, "--dest", str(dest)]
        for platform in PLATFORMS:
            cmd += ["--platform", platform]
        cmd += list(WHEELS)
        print("$ " + shlex.join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            return rc
    (dest / "requirements.txt").write_text("\n".join(WHEELS) + "\n")
    wheels = sorted(dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    print(f"{len(wheels)} wheels, {size / 2**20:.1f} MiB in {dest}")
    return 0


# --- tests ------------------------------------------------------------------------------------

# In the rehearsal the tests run on the CPU anyway (CI runs all of them); a few of each kind
# keep the rehearsal short.
_REHEARSAL_TESTS = "shares_memory or misaligned or copy_predicate or actions_stay_alive"


def _pytest(ctx: Ctx, name: str, targets: list[str], rehearsal_k: str | None) -> list[str]:
    args = ["-m", "pytest", "-q", "-rs", "-p", "no:randomly", "-p", "no:cacheprovider"]
    args += ["-p", "no:xdist", "--junitxml", str(ctx.work / f"{name}.xml"), *targets]
    if ctx.rehearsal and rehearsal_k:
        args += ["-k", rehearsal_k]
    return _py(ctx, *args)


def _tests_check(ctx: Ctx, log: Path, rc: int, name: str) -> Outcome:
    xml = ctx.work / f"{name}.xml"
    if not xml.is_file():
        return Outcome("failed", f"pytest exited with {rc} and wrote no report")
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    bad = [
        f"{case.get('name')}"
        for case in suite.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    reasons = sorted(
        {s.get("message", "") for s in suite.iter("skipped") if s.get("message")} - {""}
    )
    key = f"{passed} passed, {n['failures'] + n['errors']} failed, {n['skipped']} skipped"
    details = {**n, "passed": passed, "failed_tests": bad, "skip_reasons": reasons}
    if rc != 0 or bad:
        return Outcome("failed", key + (f": {', '.join(bad[:3])}" if bad else ""), details)
    if n["tests"] and n["skipped"] == n["tests"]:
        return Outcome("skipped", f"all {n['tests']} tests skipped: {'; '.join(reasons)}", details)
    if n["tests"] == 0:
        return Outcome("failed", "no test ran", details)
    return Outcome("passed", key, details)


# --- benchmarks -----------------------------------------------------------------------------


def _throughput(ctx: Ctx, name: str, obs: str, gpu_args: list[str]) -> list[str]:
    args = ["-m", "benchmarks.throughput", "--obs", obs, "--repeats"]
    if ctx.rehearsal:
        args += ["2", "--scenario", "identical_1_vs_1", "--batch", "2", "--steps", "3"]
        args += ["--resolution", "16"]
    else:
        args += ["3", "--scenario", "identical_5_vs_5", *gpu_args]
    args += ["--no-isolate", "--format", "none", "--json", str(ctx.work / f"{name}.json")]
    return _py(ctx, *args)


def _rows_check(ctx: Ctx, rows: list[dict], backend_of: Callable[[dict], Any]) -> list[str]:
    """Problems of benchmark rows: none, an error, or a backend other than the run's."""
    if not rows:
        return ["no rows"]
    problems = [f"row {i}: {r['error'][-200:]}" for i, r in enumerate(rows) if "error" in r]
    for i, r in enumerate(rows):
        if backend_of(r) != ctx.backend:
            problems.append(f"row {i} ran on {backend_of(r)!r}, not {ctx.backend!r}")
    return problems


def _goal(name: str, value: float, fmt: Callable[[float], str]) -> str:
    goal = GOALS[name]
    return f"{fmt(value)} (goal >= {fmt(goal)}: {'met' if value >= goal else 'MISSED'})"


def _si(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g}"


def _throughput_check(ctx: Ctx, log: Path, rc: int, name: str) -> Outcome:
    path = ctx.work / f"{name}.json"
    if not path.is_file():
        return Outcome("failed", f"exit {rc}; no rows written")
    rows = json.loads(path.read_text())
    problems = _rows_check(
        ctx, rows, lambda r: r.get("machine", {}).get("device", {}).get("backend")
    )
    good = [r for r in rows if "error" not in r]
    best = max((r["agent_steps_per_s"] for r in good), default=0.0)
    key = _goal(name, best, lambda v: _si(v) + " agent-steps/s")
    details = {
        "rows": [
            {"batch": r.get("batch"), "agent_steps_per_s": r.get("agent_steps_per_s")} for r in good
        ],
        "best": best,
        "goal": GOALS[name],
    }
    if rc != 0 or problems:
        return Outcome("failed", "; ".join(problems) or f"exit {rc}", details)
    return Outcome("passed", key, details)


def _bridge_command(ctx: Ctx) -> list[str]:
    args = ["-m", "benchmarks.bridge", "--device", ctx.device, "--gym-batch"]
    if ctx.rehearsal:
        args += ["--scenario", "identical_1_vs_1_fobs_vec_void_cont", "--batch", "2"]
        args += ["--steps", "3", "--repeats", "2"]
    else:
        args += ["--batch", "65536", "--steps", "100", "--repeats", "3"]
    return _py(ctx, *args, "--json", str(ctx.work / "bridge.json"))


def _bridge_check(ctx: Ctx, log: Path, rc: int) -> Outcome:
    path = ctx.work / "bridge.json"
    if not path.is_file():
        return Outcome("failed", f"exit {rc}; no rows written")
    data = json.loads(path.read_text())
    backend = data.get("run_info", {}).get("device", {}).get("backend")
    rows = data.get("rows", [])
    problems = _rows_check(ctx, rows, lambda r: backend)  # one process: one backend
    ratios = [r["vs_jax"] for r in rows if r.get("impl") == "torch_loop" and "vs_jax" in r]
    if not ratios:
        problems.append("no torch_loop row with its vs_jax ratio")
    worst = min(ratios, default=0.0)
    key = _goal("bridge", worst, lambda v: f"loop/scan {v:.2f}x")
    details = {"vs_jax": ratios, "goal": GOALS["bridge"], "backend": backend}
    if rc != 0 or problems:
        return Outcome("failed", "; ".join(problems) or f"exit {rc}", details)
    return Outcome("passed", key, details)


# --- trainers -------------------------------------------------------------------------------


def _ppo_command(ctx: Ctx, framework: str) -> list[str] | str:
    if framework == "jax" and not _importable(ctx, "optax"):
        return "optax is not importable (add it to the wheels bundle): no JAX trainer"
    args = ["-m", "baselines.ppo", "--preset", "smoke", "--framework", framework]
    args += ["--device", ctx.device, "--no-plots", "--no-tensorboard"]
    args += ["--out", str(ctx.work / f"ppo_{framework}")]
    if ctx.rehearsal:
        args += ["--updates", "1", "--num-envs", "16", "--rollout-steps", "4"]
    else:
        args += ["--updates", "2"]
    return _py(ctx, *args)


def _ppo_check(ctx: Ctx, log: Path, rc: int, framework: str) -> Outcome:
    out = ctx.work / f"ppo_{framework}"
    text = log.read_text(errors="replace")
    if rc != 0:
        return Outcome("failed", f"exit {rc}: {_last_line(text)}")
    config_path = out / "config.json"
    if not config_path.is_file():
        return Outcome("failed", "no config.json in the run folder")
    config = json.loads(config_path.read_text())
    precision = config.get("matmul_precision")
    if not precision:
        return Outcome("failed", "config.json does not record the matmul precision")
    done = re.search(r"(\d+) updates, (\d+) agent-steps in (\d+) s", text)
    key = done.group(0) if done else _last_line(text)
    jax_precision = precision.get("jax_default_matmul_precision")
    return Outcome("passed", f"{key}; jax matmul precision {jax_precision}", {"config": config})


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][-160:] if lines else ""


def _importable(ctx: Ctx, module: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    proc = subprocess.run([ctx.python, "-c", code], env=ctx.env, capture_output=True)
    return proc.returncode == 0


# --- the list -------------------------------------------------------------------------------

_HIGHEST = (("JAX_DEFAULT_MATMUL_PRECISION", "highest"),)  # parity at full float32 (no TF32)

STEPS: tuple[Step, ...] = (
    Step(
        "env",
        20,
        120,
        lambda ctx: _py(ctx, "-c", _ENV_PROBE),
        _env_check,
        purpose="versions, devices, driver, commit; stops the run without CUDA",
    ),
    Step(
        "wheels",
        10,
        120,
        _wheels_command,
        _wheels_check,
        purpose="installs the wheels bundle offline and imports what the steps need",
    ),
    Step(
        "bridge_tests",
        55,
        240,
        lambda ctx: _pytest(
            ctx,
            "bridge_tests",
            [
                "tests/adapters/test_torch_bridge.py",
                "tests/baselines/test_s5.py::test_parallel_scan_on_cuda_equals_cpu",
            ],
            _REHEARSAL_TESTS,
        ),
        lambda ctx, log, rc: _tests_check(ctx, log, rc, "bridge_tests"),
        env=_HIGHEST,
        purpose="the device-aware bridge/TorchVecEnv tests and S5's CUDA test, on the device",
    ),
    Step(
        "gpu_tests",
        35,
        120,
        lambda ctx: _pytest(
            ctx, "gpu_tests", ["tests/adapters/test_torch_bridge_gpu.py"], rehearsal_k=None
        ),
        lambda ctx, log, rc: _tests_check(ctx, log, rc, "gpu_tests"),
        env=_HIGHEST,
        purpose="GPU-only tests: zero-copy, outputs after later steps, snapshot, GPU == CPU",
    ),
    Step(
        "throughput_vector",
        40,
        180,
        lambda ctx: _throughput(
            ctx, "throughput_vector", "pobs_vec", ["--batch", "65536", "1048576", "--work", "1e8"]
        ),
        lambda ctx, log, rc: _throughput_check(ctx, log, rc, "throughput_vector"),
        purpose="5v5 vector agent-steps/s (goal >= 1 G)",
    ),
    Step(
        "throughput_rgb",
        40,
        180,
        lambda ctx: _throughput(
            ctx, "throughput_rgb", "pobs_rgb", ["--batch", "2048", "16384", "--work", "1e7"]
        ),
        lambda ctx, log, rc: _throughput_check(ctx, log, rc, "throughput_rgb"),
        purpose="5v5 RGB 84x84 agent-steps/s (goal >= 30 M)",
    ),
    Step(
        "bridge",
        30,
        180,
        _bridge_command,
        _bridge_check,
        purpose="TorchVecEnv's Python loop over its JAX scan (goal >= 0.8x)",
    ),
    Step(
        "ppo_torch",
        35,
        240,
        lambda ctx: _ppo_command(ctx, "torch"),
        lambda ctx, log, rc: _ppo_check(ctx, log, rc, "torch"),
        purpose="the PyTorch trainer's smoke preset on the device",
    ),
    Step(
        "ppo_jax",
        30,
        240,
        lambda ctx: _ppo_command(ctx, "jax"),
        lambda ctx, log, rc: _ppo_check(ctx, log, rc, "jax"),
        purpose="the JAX trainer's smoke preset on the device",
    ),
)


# ------------------------------------------------------------------------------------------
# Running a step: its own process group, its own limit, its log kept
# ------------------------------------------------------------------------------------------


def _kill_group(proc: subprocess.Popen) -> None:
    """End the step's whole process group (TERM, then KILL after 5 s): nothing it started
    keeps the GPU."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader is gone; its children may not be
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return


def run_command(argv: list[str], log: Path, limit_s: float, env: dict[str, str]) -> int | None:
    """Run `argv` in its own process group with stdout and stderr to `log`; None when it
    ran past `limit_s` (its group is killed; the log keeps what it wrote)."""
    with log.open("w") as out:
        out.write("$ " + shlex.join(argv) + "\n")
        out.flush()
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        try:
            rc: int | None = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            rc = None
        except BaseException:  # interrupted: take the step's processes down with us
            _kill_group(proc)
            raise
        _kill_group(proc)  # also any child the step left behind
    if rc is None:
        with log.open("a") as out:
            out.write(f"\n[.ci/gpu] timed out after {limit_s:.0f} s: process group killed\n")
    return rc


@dataclass
class Result:
    name: str
    status: str
    seconds: float
    limit_s: float
    key: str
    details: dict[str, Any] = field(default_factory=dict)


def run_step(step: Step, ctx: Ctx, deadline: float) -> Result:
    t0 = time.monotonic()
    left = deadline - t0
    limit = min(step.limit(ctx.rehearsal), left)
    command = step.command(ctx)
    if isinstance(command, str):
        return Result(step.name, "skipped", 0.0, limit, command)
    if left < min(5.0, step.limit(ctx.rehearsal)):  # too little left to start anything
        budget = REHEARSAL_BUDGET_S if ctx.rehearsal else BUDGET_S
        return Result(step.name, "skipped", 0.0, limit, f"the run's {budget:.0f} s budget is spent")
    env = {**ctx.env, **dict(step.env)}
    log = ctx.work / f"{step.name}.log"
    rc = run_command(command, log, limit, env)
    seconds = time.monotonic() - t0
    if rc is None:  # what it finished still counts (the benchmarks save row by row)
        key = f"killed after {limit:.0f} s"
        try:
            partial = step.check(ctx, log, 0)
        except Exception:
            partial = None
        if partial is not None and partial.status == "passed":
            key += f"; before that: {partial.key}"
        return Result(step.name, "timed out", seconds, limit, key)
    try:
        outcome = step.check(ctx, log, rc)
    except Exception as err:  # a check that cannot read the outputs fails the step, not the run
        outcome = Outcome("failed", f"exit {rc}; outputs unreadable: {type(err).__name__}: {err}")
    return Result(step.name, outcome.status, seconds, limit, outcome.key, outcome.details)


# ------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------


def _join_path(*parts: str | None) -> str:
    return os.pathsep.join(p for p in parts if p)


def commit() -> str:
    if os.environ.get("GIGASTEP_COMMIT"):
        return os.environ["GIGASTEP_COMMIT"]
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


def step_environment(rehearsal: bool, site: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = _join_path(str(ROOT), env.get("PYTHONPATH"), str(site))
    env["PYTHONUNBUFFERED"] = "1"
    env["JAX_PLATFORMS"] = "cpu" if rehearsal else "cuda,cpu"
    env["GIGASTEP_TEST_DEVICE"] = "cpu" if rehearsal else "cuda"
    # JAX and torch share the GPU: no 75% preallocation by JAX unless the caller chose a split.
    if "XLA_PYTHON_CLIENT_MEM_FRACTION" not in env:
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.pop("JAX_DEFAULT_MATMUL_PRECISION", None)  # set per step (parity steps: highest)
    return env


def summary_table(results: list[Result], total_s: float) -> str:
    lines = [f"{'step':<18} {'status':<10} {'seconds':>7}  key figure", "-" * 78]
    for r in results:
        lines.append(f"{r.name:<18} {r.status:<10} {r.seconds:>7.1f}  {r.key}")
    lines.append("-" * 78)
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "timed out")}
    counts["skipped"] = sum(r.status == "skipped" for r in results)
    lines.append(
        f"{'total':<18} {_overall(results):<10} {total_s:>7.1f}  "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
    )
    return "\n".join(lines) + "\n"


def _overall(results: list[Result]) -> str:
    return "failed" if any(r.status in ("failed", "timed out") for r in results) else "passed"


def _report_md(ctx: Ctx, results: list[Result], total_s: float, table: str) -> str:
    mode = "REHEARSAL on the CPU (tiny sizes)" if ctx.rehearsal else "GPU run"
    out = [f"# .ci/gpu: {mode}", "", f"commit {ctx.facts.get('commit')}", "", "```", table, "```"]
    out += ["", "## Environment", "", "```", json.dumps(ctx.facts, indent=2), "```", ""]
    for r in results:
        out += [f"## {r.name}: {r.status} ({r.seconds:.1f} s of {r.limit_s:.0f} s)", "", r.key, ""]
        if r.details.get("failed_tests"):
            out += ["failed: " + ", ".join(r.details["failed_tests"]), ""]
        if r.status in ("failed", "timed out"):
            log = ctx.work / f"{r.name}.log"
            if log.is_file():
                tail = log.read_text(errors="replace").splitlines()[-25:]
                out += ["```", *tail, "```", ""]
    return "\n".join(out)


def _pack(ctx: Ctx, out_dir: Path, results: list[Result], total_s: float, table: str) -> None:
    """OUT_DIR: at most MAX_FILES files, no folders, each at most MAX_FILE_BYTES."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "mode": "rehearsal-cpu" if ctx.rehearsal else "gpu",
        "commit": ctx.facts.get("commit"),
        "total_s": round(total_s, 1),
        "budget_s": REHEARSAL_BUDGET_S if ctx.rehearsal else BUDGET_S,
        "status": _overall(results),
        "environment": ctx.facts,
        "steps": [
            {
                "name": r.name,
                "status": r.status,
                "seconds": round(r.seconds, 1),
                "limit_s": round(r.limit_s, 1),
                "key": r.key,
                "details": r.details,
            }
            for r in results
        ],
    }
    (ctx.work / "summary.txt").write_text(table)
    (ctx.work / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (ctx.work / "report.md").write_text(_report_md(ctx, results, total_s, table))
    env_log = ctx.work / "env.log"
    (ctx.work / "env.txt").write_text(
        json.dumps(ctx.facts, indent=2) + "\n" + (env_log.read_text() if env_log.is_file() else "")
    )
    keep = ["summary.txt", "report.md", "report.json", "env.txt"]
    keep += [f"{n}.log" for n in KEY_LOGS if (ctx.work / f"{n}.log").is_file()]
    for name in keep:
        _copy_capped(ctx.work / name, out_dir / name)
    tar = out_dir / "gpu-run.tar.gz"
    for limit in (None, 1 << 20):  # everything; if too large, without files over 1 MiB
        with tarfile.open(tar, "w:gz") as archive:
            for path in sorted(ctx.work.rglob("*")):
                if path.is_relative_to(ctx.site):  # the installed wheels: not results
                    continue
                if path.is_file() and (limit is None or path.stat().st_size <= limit):
                    archive.add(path, arcname=f"gpu-run/{path.relative_to(ctx.work)}")
        if tar.stat().st_size <= MAX_FILE_BYTES:
            break
    assert len(list(out_dir.iterdir())) <= MAX_FILES


def _copy_capped(src: Path, dst: Path) -> None:
    if src.stat().st_size <= MAX_FILE_BYTES:
        shutil.copyfile(src, dst)
        return
    with src.open("rb") as f:  # keep the end, where failures are
        f.seek(-(MAX_FILE_BYTES - 4096), os.SEEK_END)
        dst.write_bytes(b"[.ci/gpu: truncated to its end]\n" + f.read())


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run(out_dir: Path, wheels: Path | None, only: list[str] | None, rehearsal: bool) -> int:
    start = time.monotonic()
    budget = REHEARSAL_BUDGET_S if rehearsal else BUDGET_S
    deadline = start + budget
    work = Path(tempfile.mkdtemp(prefix="gigastep-gpu-"))
    ctx = Ctx(rehearsal, work, os.environ.get("PYTHON", sys.executable), wheels, work / "site")
    ctx.env = step_environment(rehearsal, ctx.site)
    ctx.facts["commit"] = commit()
    ctx.facts["mode"] = "rehearsal-cpu" if rehearsal else "gpu"
    steps = [s for s in STEPS if only is None or s.name in only]
    results: list[Result] = []
    # Killed from outside (the machine's own limit): end the running step's process group,
    # which lives in its own session, and return what was done.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    current = ""
    try:
        for step in steps:
            current = step.name
            print(f"== {step.name} (limit {step.limit(rehearsal):.0f} s)", flush=True)
            result = run_step(step, ctx, deadline)
            results.append(result)
            print(f"   {result.status} in {result.seconds:.1f} s: {result.key}", flush=True)
            if step.name == "env" and result.status != "passed" and not rehearsal:
                print(
                    ".ci/gpu needs a CUDA GPU seen by torch and jax: " + result.key,
                    file=sys.stderr,
                )
                shutil.rmtree(work, ignore_errors=True)
                return 2
    except KeyboardInterrupt:
        print(f"interrupted during {current}", file=sys.stderr)
        results.append(Result(current, "failed", 0.0, 0.0, "interrupted: the run was stopped"))
    total = time.monotonic() - start
    table = summary_table(results, total)
    print("\n" + table, end="", flush=True)
    _pack(ctx, out_dir, results, total, table)
    shutil.rmtree(work, ignore_errors=True)  # everything is in gpu-run.tar.gz
    print(f"results in {out_dir} ({len(list(out_dir.iterdir()))} files)")
    return 0 if _overall(results) == "passed" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=".ci/gpu",
        description="The GPU checks in <= 5 minutes (see tools/gpu_run.py).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="GIGASTEP_GPU_REHEARSAL=cpu: every step on the CPU at tiny sizes.",
    )
    parser.add_argument(
        "out", nargs="?", help="the folder of results (default: $OUT, else results/gpu-<date>)"
    )
    parser.add_argument("--wheels", type=Path, help="a wheels bundle to install offline first")
    parser.add_argument("--steps", help="comma-separated step names (default: all)")
    parser.add_argument("--list", action="store_true", help="list the steps and exit")
    parser.add_argument("--prepare-wheels", type=Path, metavar="DIR", help="download the bundle")
    parser.add_argument("--install-wheels", nargs=2, type=Path, help=argparse.SUPPRESS)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(f"unknown option {unknown[0]} (see --help)")
    if args.install_wheels:
        return install_wheels(*args.install_wheels)
    if args.prepare_wheels:
        return prepare_wheels(args.prepare_wheels)
    if args.list:
        for s in STEPS:
            limits = f"{s.limit_s:>4.0f} s (rehearsal {s.rehearsal_limit_s:.0f} s)"
            print(f"{s.name:<18} {limits}  {s.purpose}")
        print(f"budget {BUDGET_S:.0f} s; limits add up to {sum(s.limit_s for s in STEPS):.0f} s")
        return 0
    mode = os.environ.get("GIGASTEP_GPU_REHEARSAL", "")
    if mode not in ("", "cpu"):
        parser.error(f"GIGASTEP_GPU_REHEARSAL must be 'cpu' or unset, got {mode!r}")
    only = None
    if args.steps:
        only = args.steps.split(",")
        unknown = sorted(set(only) - {s.name for s in STEPS})
        if unknown:
            parser.error(f"unknown steps {unknown}; known: {[s.name for s in STEPS]}")
    wheels = args.wheels
    if wheels is None and (DEFAULT_WHEELS / "requirements.txt").is_file():
        wheels = DEFAULT_WHEELS
    default_out = os.environ.get("OUT") or f"results/gpu-{time.strftime('%Y-%m-%d', time.gmtime())}"
    out = Path(args.out or default_out)
    return run(out if out.is_absolute() else Path.cwd() / out, wheels, only, mode == "cpu")


if __name__ == "__main__":
    sys.exit(main())
