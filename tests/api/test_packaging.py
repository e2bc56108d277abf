"""Packaging: the core package needs only its declared runtime dependencies, and the built
wheel works as installed (its catalogue, its command, its checkpoint loader)."""

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
    assert listing == f"288 {scenario_hash(make_config('identical_5_vs_1'))}"


@pytest.mark.subprocess
def test_the_wheel_ships_the_package_its_entry_point_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = z.read(entry_points).decode()
    target = re.search(r"^ppo\s*=\s*([\w.]+):load$", text, re.M).group(1)
    assert target == "baselines.players"
    assert {"baselines/__init__.py", "baselines/players.py", "baselines/actor.py"} <= names


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
import sys, gigastep, baselines, gigastep.eval.matches as ev
player = ev.resolve_player(sys.argv[1])
player.check(gigastep.make_config("identical_2_vs_2_fobs_vec_void_disc"), team=0)
print(gigastep.__file__)
print(baselines.__file__)
print(type(player).__module__, player.name)
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_installed_wheel_loads_a_checkpoint_through_its_entry_point(wheel, tmp_path):
    pytest.importorskip("torch")
    from baselines.config import PPOConfig
    from baselines.train import Trainer

    run = Trainer(PPOConfig(out=str(tmp_path / "run"), **TINY_RUN)).run()
    checkpoint = Path(run) / "checkpoint.pt"
    venv = tmp_path / "venv"
    # --system-site-packages: torch, jax, ... come from this environment (no downloads); the
    # venv's own site-packages, which holds the wheel, comes first on its path
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300
    )
    python = venv / "bin" / "python"
    install = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, timeout=300, capture_output=True)
    out = subprocess.run(
        [python, "-c", LOAD, str(checkpoint)],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    gigastep_file, baselines_file, player = out.stdout.strip().splitlines()[-3:]
    site = venv / "lib"
    assert Path(gigastep_file).is_relative_to(site), gigastep_file
    assert Path(baselines_file).is_relative_to(site), baselines_file
    assert player == "baselines.players ppo:1"  # the PPO loader, update 1
