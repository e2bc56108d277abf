"""The GPU run (`.ci/gpu`, tools/gpu_run.py) rehearsed on the CPU: its time limits, its
process-group kills, its skips, its wheels bundle and its output contract."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import time
from importlib import metadata
from pathlib import Path

import pytest

from tools import gpu_run

ROOT = Path(__file__).resolve().parents[2]


def test_the_step_limits_fit_in_five_minutes_with_room_for_a_rerun():
    """One run and one rerun fit in the 15 device minutes with the machine's start: every
    step has a limit, the run a budget under 300 s that the limits nearly fill."""
    names = [s.name for s in gpu_run.STEPS]
    assert len(names) == len(set(names))
    assert gpu_run.BUDGET_S <= 290
    assert sum(s.limit_s for s in gpu_run.STEPS) <= gpu_run.BUDGET_S + 15
    assert all(0 < s.limit_s <= s.rehearsal_limit_s for s in gpu_run.STEPS)
    assert names[0] == "env"  # the run stops at once without CUDA


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return not re.search(r"^State:\s+Z", state, re.MULTILINE)  # a zombie holds nothing


def test_a_step_past_its_limit_is_killed_with_its_children_and_keeps_its_log(tmp_path):
    log, pidfile = tmp_path / "slow.log", tmp_path / "child.pid"
    script = f"echo started; sleep 60 & echo $! > {pidfile}; wait"
    t0 = time.monotonic()
    rc = gpu_run.run_command(["bash", "-c", script], log, 1.5, dict(os.environ))
    assert rc is None and time.monotonic() - t0 < 15
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the step's child outlived the step"
    text = log.read_text()
    assert "started" in text and "timed out after 2 s" in text


def _ctx(tmp_path, rehearsal=True):
    ctx = gpu_run.Ctx(rehearsal, tmp_path, sys.executable, None, tmp_path / "site")
    ctx.env = dict(os.environ)
    return ctx


def test_a_timed_out_step_reads_timed_out_and_a_step_that_cannot_run_says_why(tmp_path):
    ctx = _ctx(tmp_path)
    slow = gpu_run.Step(
        "slow", 1, 1, lambda c: ["sleep", "30"], lambda c, log, rc: gpu_run.Outcome("passed", "")
    )
    result = gpu_run.run_step(slow, ctx, deadline=time.monotonic() + 100)
    assert result.status == "timed out" and "killed after 1 s" in result.key
    assert (tmp_path / "slow.log").is_file()
    skip = gpu_run.Step("skip", 1, 1, lambda c: "no optax here", slow.check)
    result = gpu_run.run_step(skip, ctx, deadline=time.monotonic() + 100)
    assert (result.status, result.key) == ("skipped", "no optax here")
    late = gpu_run.run_step(slow, ctx, deadline=time.monotonic() + 0.5)
    assert late.status == "skipped" and "budget is spent" in late.key
    table = gpu_run.summary_table([result, late], 3.0)
    assert table.count("\nskip ") == 1 and table.count("\nslow ") == 1


def test_the_commit_is_the_callers_then_gits(monkeypatch):
    monkeypatch.setenv("GIGASTEP_COMMIT", "abc123")
    assert gpu_run.commit() == "abc123"
    monkeypatch.delenv("GIGASTEP_COMMIT")
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", gpu_run.commit())


def test_the_steps_run_jax_on_cuda_or_fail_and_leave_the_gpu_to_torch_too(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    env = gpu_run.step_environment(False, Path("/site"))
    assert env["JAX_PLATFORMS"] == "cuda,cpu" and env["GIGASTEP_TEST_DEVICE"] == "cuda"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(gpu_run.ROOT)
    parity = {s.name: dict(s.env) for s in gpu_run.STEPS}
    for name in ("bridge_tests", "gpu_tests"):  # JAX-vs-torch parity: no TF32
        assert parity[name]["JAX_DEFAULT_MATMUL_PRECISION"] == "highest"
    rehearsal = gpu_run.step_environment(True, Path("/site"))
    assert rehearsal["JAX_PLATFORMS"] == "cpu" and rehearsal["GIGASTEP_TEST_DEVICE"] == "cpu"


def test_a_benchmark_row_on_another_backend_fails_its_step(tmp_path):
    ctx = _ctx(tmp_path, rehearsal=False)  # the GPU run expects "gpu"
    row = {"agent_steps_per_s": 2e9, "batch": 8, "machine": {"device": {"backend": "cpu"}}}
    (tmp_path / "throughput_vector.json").write_text(json.dumps([row]))
    out = gpu_run._throughput_check(ctx, tmp_path / "x.log", 0, "throughput_vector")
    assert out.status == "failed" and "ran on 'cpu', not 'gpu'" in out.key
    row["machine"]["device"]["backend"] = "gpu"
    (tmp_path / "throughput_vector.json").write_text(json.dumps([row]))
    out = gpu_run._throughput_check(ctx, tmp_path / "x.log", 0, "throughput_vector")
    assert out.status == "passed" and "2 G agent-steps/s" in out.key and "met" in out.key


# ------------------------------------------------------------------------------------------
# The wheels bundle, installed offline into what the GPU image holds (jax, torch, numpy)
# ------------------------------------------------------------------------------------------


def _image_site(folder: Path) -> Path:
    """A folder of links to what a bare GPU image holds: jax, jaxlib, torch, numpy and the
    packages they require (none of their extras), taken from this environment."""
    folder.mkdir()
    seen: set[str] = set()
    todo = ["jax", "jaxlib", "torch", "numpy"]
    while todo:
        name = re.split(r"[\s;<>=!~\[(]", todo.pop(), maxsplit=1)[0]
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """The wheels bundle, downloaded once (PyPI)."""
    folder = tmp_path_factory.mktemp("wheels")
    assert gpu_run.prepare_wheels(folder) == 0, "pip download failed (is PyPI reachable?)"
    return folder


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_wheels_bundle_is_small_pure_python_and_installs_offline(bundle, tmp_path):
    wheels = sorted(bundle.glob("*.whl"))
    assert len(wheels) == len(gpu_run.WHEELS)  # one per package: every one is universal
    assert all(w.name.endswith("-none-any.whl") for w in wheels)
    assert sum(w.stat().st_size for w in wheels) < 20 * 2**20
    site = tmp_path / "site"
    assert gpu_run.install_wheels(bundle, site) == 0
    assert len(list(site.glob("*.dist-info"))) == len(gpu_run.WHEELS)
    unpacked = tmp_path / "unpacked"  # an image without pip: the same files
    gpu_run._unpack_wheels(bundle, unpacked)
    assert {p.name for p in unpacked.iterdir()} >= {p.name for p in site.iterdir()} - {"bin"}


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_gpu_steps_import_with_only_the_image_and_the_bundle(bundle, tmp_path):
    """`python -S` (no site-packages) with the bundle, the repository and a bare image's
    packages: the tests the run selects collect, the trainers and benchmarks import."""
    site = tmp_path / "site"
    assert gpu_run.install_wheels(bundle, site) == 0
    image = _image_site(tmp_path / "image")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ROOT, image, site)))}
    env["JAX_PLATFORMS"] = "cpu"
    tests = [
        "tests/adapters/test_torch_bridge.py",
        "tests/adapters/test_torch_bridge_gpu.py",
        "tests/baselines/test_s5.py",
    ]
    commands = [
        ["-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *tests],
        ["-m", "baselines.ppo", "--help"],
        [
            "-c",
            "import baselines.train, baselines.jax_ppo, benchmarks.throughput, benchmarks.bridge",
        ],
    ]
    for args in commands:
        proc = subprocess.run(
            [sys.executable, "-S", *args], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-3000:])


# ------------------------------------------------------------------------------------------
# The whole flow on the CPU
# ------------------------------------------------------------------------------------------

REHEARSED = [step.name for step in gpu_run.STEPS]  # every step of the real run


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_cpu_rehearsal_keeps_the_output_contract(bundle, tmp_path):
    """GIGASTEP_GPU_REHEARSAL=cpu .ci/gpu: the steps run on the CPU at tiny sizes and leave at
    most 8 files, no folders, each at most 16 MiB, with one summary line per step: every
    step of the real run, the trainers and benchmarks included."""
    out = tmp_path / "out"
    env = {**os.environ, "GIGASTEP_GPU_REHEARSAL": "cpu", "PYTHON": sys.executable}
    env["GIGASTEP_COMMIT"] = "rehearsal-commit"
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            *("bash", str(ROOT / ".ci" / "gpu"), str(out), "--wheels", str(bundle)),
            *("--steps", ",".join(REHEARSED)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = sorted(out.iterdir())
    assert len(files) <= gpu_run.MAX_FILES and all(f.is_file() for f in files)
    assert all(f.stat().st_size <= gpu_run.MAX_FILE_BYTES for f in files)
    names = {f.name for f in files}
    assert {"summary.txt", "report.md", "report.json", "gpu-run.tar.gz"} <= names
    summary = (out / "summary.txt").read_text()
    assert summary in proc.stdout  # the table printed is the table returned
    rows = [line.split()[0] for line in summary.splitlines()[2:-2]]
    assert rows == REHEARSED
    report = json.loads((out / "report.json").read_text())
    assert report["commit"] == "rehearsal-commit" and report["mode"] == "rehearsal-cpu"
    assert report["total_s"] <= min(wall, report["budget_s"])
    status = {s["name"]: s["status"] for s in report["steps"]}
    assert status["gpu_tests"] == "skipped"  # no CUDA here, and the reason is given
    assert "needs a CUDA device" in summary
    assert all(status[n] == "passed" for n in REHEARSED if n != "gpu_tests"), summary
    with tarfile.open(out / "gpu-run.tar.gz") as archive:
        packed = set(archive.getnames())
    assert {f"gpu-run/{n}.log" for n in REHEARSED} <= packed
    assert "gpu-run/throughput_vector.json" in packed


_STOPPED_RUN = """
import sys
from pathlib import Path
from tools import gpu_run

pidfile, out = sys.argv[1], Path(sys.argv[2])
script = f"sleep 60 & echo $! > {pidfile}; wait"
never = lambda ctx, log, rc: gpu_run.Outcome("passed", "")
gpu_run.STEPS = (gpu_run.Step("hang", 120, 120, lambda ctx: ["bash", "-c", script], never),)
sys.exit(gpu_run.run(out, None, None, rehearsal=True))
"""


@pytest.mark.subprocess
def test_a_run_stopped_from_outside_ends_its_step_and_still_reports(tmp_path):
    """SIGTERM (the machine's own limit): the running step's process group, in its own
    session, is ended too, and the results so far are written."""
    pidfile, out = tmp_path / "child.pid", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_RUN, str(pidfile), str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (pidfile.is_file() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    child = int(pidfile.read_text())
    proc.terminate()
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stdout + stderr
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the step's child outlived the stopped run"
    summary = (out / "summary.txt").read_text()
    assert re.search(r"^hang\s+failed .*interrupted", summary, re.MULTILINE), summary


@pytest.mark.parametrize("value", ["gpu", "1", "CPU "])
def test_an_unknown_rehearsal_mode_is_a_usage_error_naming_it(value, monkeypatch, capsys):
    monkeypatch.setenv("GIGASTEP_GPU_REHEARSAL", value)
    with pytest.raises(SystemExit) as exit_info:
        gpu_run.main([])
    assert exit_info.value.code == 2
    assert (
        f"GIGASTEP_GPU_REHEARSAL must be 'cpu' or unset, got {value!r}" in capsys.readouterr().err
    )
