"""Packaging: the core package needs only its declared runtime dependencies, and the built
wheel works as installed (its catalogue, its command, its checkpoint loader)."""

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from gigastep.scenarios import make_config, scenario_hash

ROOT = Path(__file__).resolve().parents[2]

# Import gigastep, build a game and step it with the optional stacks made unimportable.
SCRIPT = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        optional = {"torch", "gymnasium", "pettingzoo", "matplotlib", "jaxmarl", "benchmarl"}
        if name.split(".")[0] in optional:
            raise ImportError(f"{name} is not a core dependency")

sys.meta_path.insert(0, Block())
import jax, gigastep
env = gigastep.make("identical_2_vs_2_fobs_vec_void_disc")
obs, state = env.reset(jax.random.key(0))
obs, state, *_ = env.step(state, jax.numpy.zeros(4, "int32"), jax.random.key(1))
loaded = sorted({m.split(".")[0] for m in sys.modules})
print(" ".join(loaded))
"""


@pytest.mark.subprocess
def test_core_runs_without_the_optional_stacks():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = set(result.stdout.split())
    assert not loaded & {"torch", "gymnasium", "pettingzoo", "matplotlib", "jaxmarl", "benchmarl"}


def test_core_dependencies_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~ ;\[]", d)[0] for d in project["dependencies"]}
    assert {"jax", "numpy", "chex", "pillow"} <= declared
    extras = project["optional-dependencies"]
    assert any(d.startswith("torch") for d in extras["torch"])
    assert any(d.startswith("gymnasium") for d in extras["gym"])
    assert any(d.startswith("pettingzoo") for d in extras["pettingzoo"])
    assert any(d.startswith("jaxmarl") for d in extras["jaxmarl"])
    assert any(d.startswith("benchmarl") for d in extras["benchmarl"])


# ------------------------------------------------------------------------------------------
# The wheel: what it ships and what it does installed
# ------------------------------------------------------------------------------------------


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}


def _build_wheel(tmp_path: Path) -> Path:
    """Build the wheel from a copy of the project (README stubbed if not written yet)."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("gigastep", "baselines", "envs"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    readme = ROOT / "README.md"
    (src / "README.md").write_text(readme.read_text() if readme.exists() else "# gigastep\n")
    out = tmp_path / "dist"
    try:
        from hatchling.builders.wheel import WheelBuilder
    except ImportError:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(src)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0 and "hatchling" in result.stdout + result.stderr:
            pytest.skip(
                "no build backend: hatchling is not installed (pip install hatchling) and pip "
                f"could not fetch it:\n{result.stderr[-500:]}"
            )
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        list(WheelBuilder(str(src)).build(directory=str(out), versions=["standard"]))
    (wheel,) = out.glob("gigastep-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.subprocess
def test_the_wheel_ships_the_catalogue_and_the_command(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = z.read(entry_points).decode()
    for file in ("agent_types.toml", "scenarios.toml", "maps.toml", "distributions.toml"):
        assert f"gigastep/_envs/{file}" in names
    assert {
        "gigastep/scenarios/catalogue.py",
        "gigastep/cli.py",
        "gigastep/_util/resources.py",
    } <= names
    assert "gigastep/py.typed" in names  # the PEP 561 marker: type checkers read its hints
    assert re.search(r"^gigastep\s*=\s*gigastep\.cli:main$", scripts, re.M)


@pytest.mark.subprocess
def test_the_installed_wheel_loads_its_own_catalogue(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    code = (
        "import gigastep, gigastep._util.resources as r, gigastep.scenarios as s\n"
        "print(gigastep.__file__)\n"
        "print(r.catalog_dir())\n"
        "print(len(s.list_scenarios()), s.scenario_hash(s.make_config('identical_5_vs_1')))\n"
    )
    env = {**_clean_env(), "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    module, catalog, listing = out.stdout.strip().splitlines()
    assert Path(module).is_relative_to(site)
    assert Path(catalog) == site / "gigastep" / "_envs"
    assert listing == f"432 {scenario_hash(make_config('identical_5_vs_1'))}"


@pytest.mark.subprocess
def test_the_wheel_ships_the_module_its_entry_point_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = z.read(entry_points).decode()
    target = re.search(r"^ppo\s*=\s*([\w.]+):(\w+)$", text, re.M)
    assert target.groups() == ("gigastep._util.repository", "load_ppo_player")
    assert "gigastep/_util/repository.py" in names
    # the loader it finds, under the baseline's installed name
    players = {"__init__.py", "players.py", "actor.py", "checkpoint.py", "envs.py", "ppo.py"}
    assert {f"gigastep_baselines/{name}" for name in players} <= names


@pytest.mark.subprocess
def test_the_wheel_installs_no_top_level_baselines(wheel):
    # `baselines` is another project's package (OpenAI Baselines): the PPO baseline goes in
    # as gigastep_baselines, and the repository-only folders stay out
    with zipfile.ZipFile(wheel) as z:
        top = {name.split("/")[0] for name in z.namelist()}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert top - dist_info == {"gigastep", "gigastep_baselines"}


def test_the_baseline_imports_itself_relatively():
    # the wheel renames baselines/ to gigastep_baselines/: an absolute `baselines.` import
    # inside it would import another package there (or fail)
    absolute = []
    for path in sorted((ROOT / "baselines").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in ("baselines", "gigastep_baselines"):
                    absolute.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert absolute == []


# ------------------------------------------------------------------------------------------
# Finding the baseline and the benchmarks by name (gigastep._util.repository)
# ------------------------------------------------------------------------------------------


@pytest.fixture
def hide(monkeypatch):
    """hide(*packages): make top-level packages unimportable for the test (a meta-path finder
    that refuses them; their imported modules leave sys.modules until the test ends)."""

    def hide(*packages: str) -> None:
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in packages:
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        monkeypatch.setattr(sys, "meta_path", [Block(), *sys.meta_path])
        for name in list(sys.modules):
            if name.split(".")[0] in packages:
                monkeypatch.delitem(sys.modules, name)

    return hide


def test_locate_takes_the_first_module_that_exists():
    from gigastep._util.repository import locate

    assert locate(["gigastep_no_such_package.ppo", "gigastep.cli"]) == ("gigastep.cli", [])


def test_locate_says_why_each_module_is_missing(hide, tmp_path, monkeypatch):
    from gigastep._util.repository import locate

    hide("gigastep_baselines", "baselines")
    module, reasons = locate(["gigastep_baselines.ppo", "gigastep.no_such_module"])
    assert module is None
    assert reasons[0] == "gigastep_baselines.ppo: no package 'gigastep_baselines' is installed"
    assert reasons[1].startswith("gigastep.no_such_module: the package 'gigastep' (")
    assert "has no module 'no_such_module'" in reasons[1]


def test_the_ppo_entry_point_names_both_places_when_the_baseline_is_missing(hide):
    from gigastep._util.repository import load_ppo_player

    hide("gigastep_baselines", "baselines")
    with pytest.raises(ImportError) as err:
        load_ppo_player({"gigastep_player": "ppo"})
    message = str(err.value)
    assert "no package 'gigastep_baselines' is installed" in message
    assert "no package 'baselines' is installed" in message
    assert "pip install 'gigastep[train]'" in message


def test_the_ppo_entry_point_loads_the_checkouts_baseline_in_a_checkout(hide, monkeypatch):
    # without gigastep_baselines (the wheel's), the entry point takes baselines.players.load
    pytest.importorskip("torch")
    import baselines.players
    from gigastep._util import repository

    hide("gigastep_baselines")
    calls = []
    monkeypatch.setattr(baselines.players, "load", lambda *args: calls.append(args) or "p")
    assert repository.load_ppo_player({"x": 1}, "cpu") == "p"
    assert calls == [({"x": 1}, "cpu")]


# A PPO checkpoint (untrained: one update of a tiny config) written by the repository's trainer.
TINY_RUN = dict(
    scenario="identical_2_vs_2_fobs_vec_void_disc",
    num_envs=4,
    rollout_steps=4,
    updates=1,
    hidden=8,
    s5_state_dim=4,
    epochs=1,
    minibatches=1,
    opponent="pursuit",
    progress=False,
    tensorboard=False,
    plots=False,
    checkpoint_every=1,
)

# Run in the fresh environment: resolve the checkpoint as gigastep.eval.matches does (through
# the entry point of the installed distribution) and check that it can play.
LOAD = """
import importlib.util, sys, gigastep, gigastep_baselines, gigastep.eval.matches as ev
player = ev.resolve_player(sys.argv[1])
player.check(gigastep.make_config("identical_2_vs_2_fobs_vec_void_disc"), team=0)
print(gigastep.__file__)
print(gigastep_baselines.__file__)
other = importlib.util.find_spec("baselines")
print(other.origin if other is not None else None)
print(type(player).__module__, player.name)
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    from baselines.config import PPOConfig
    from baselines.train import Trainer

    out = tmp_path_factory.mktemp("run") / "run"
    return Path(Trainer(PPOConfig(out=str(out), **TINY_RUN)).run()) / "checkpoint.pt"


def _venv(path: Path) -> Path:
    """A fresh venv that sees this environment's packages (torch, jax, ...: no downloads);
    its own site-packages, where the install goes, comes first on its path. Its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(path)], check=True, timeout=300
    )
    return path / "bin" / "python"


def _run(*command, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(map(str, command)),
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_installed_wheel_loads_a_checkpoint_through_its_entry_point(
    wheel, checkpoint, tmp_path
):
    venv = tmp_path / "venv"
    python = _venv(venv)
    install = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, timeout=300, capture_output=True)
    out = _run(python, "-c", LOAD, checkpoint, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    gigastep_file, baselines_file, other, player = out.stdout.strip().splitlines()[-4:]
    site = venv / "lib"
    assert Path(gigastep_file).is_relative_to(site), gigastep_file
    assert Path(baselines_file).is_relative_to(site), baselines_file
    # `baselines`, if anything, is not the wheel's (a checkout on this Python's path may be)
    assert other == "None" or not Path(other).is_relative_to(venv), other
    assert player == "gigastep_baselines.players ppo:1"  # the PPO loader, update 1
    # the command runs the installed trainer
    train = _run(venv / "bin" / "gigastep", "train", "--help", cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "forwards its arguments to `python -m gigastep_baselines.ppo`" in train.stdout
    assert "usage: python -m gigastep_baselines.ppo" in train.stdout


# The checkout's loader, found through the editable install's entry point.
LOAD_EDITABLE = """
import sys, gigastep, baselines, gigastep.eval.matches as ev
player = ev.resolve_player(sys.argv[1])
print(gigastep.__file__)
print(baselines.__file__)
print(type(player).__module__, player.name)
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_an_editable_install_trains_and_loads_with_the_checkouts_baseline(checkpoint, tmp_path):
    pytest.importorskip("hatchling")  # built without isolation: no downloads
    python = _venv(tmp_path / "venv")
    install = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    result = _run(*install, "-e", ROOT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = _run(python, "-c", LOAD_EDITABLE, checkpoint, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    gigastep_file, baselines_file, player = out.stdout.strip().splitlines()[-3:]
    assert Path(gigastep_file) == ROOT / "gigastep" / "__init__.py"
    assert Path(baselines_file) == ROOT / "baselines" / "__init__.py"
    assert player == "baselines.players ppo:1"
    train = _run(tmp_path / "venv" / "bin" / "gigastep", "train", "--help", cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "forwards its arguments to `python -m baselines.ppo`" in train.stdout
