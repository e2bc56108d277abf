"""The core package needs only its declared runtime dependencies."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Import gigastep, build a game and step it with the optional stacks made unimportable.
SCRIPT = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "gymnasium", "pettingzoo", "matplotlib"}:
            raise ImportError(f"{name} is not a core dependency")

sys.meta_path.insert(0, Block())
import jax, gigastep
env = gigastep.make("identical_2_vs_2_fobs_vec_void_disc")
obs, state = env.reset(jax.random.key(0))
obs, state, *_ = env.step(state, jax.numpy.zeros(4, "int32"), jax.random.key(1))
loaded = sorted({m.split(".")[0] for m in sys.modules})
print(" ".join(loaded))
"""


def test_core_runs_without_the_optional_stacks():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = set(result.stdout.split())
    assert not loaded & {"torch", "gymnasium", "pettingzoo", "matplotlib"}


def test_core_dependencies_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~ ;\[]", d)[0] for d in project["dependencies"]}
    assert {"jax", "numpy", "chex", "pillow"} <= declared
    extras = project["optional-dependencies"]
    assert any(d.startswith("torch") for d in extras["torch"])
    assert any(d.startswith("gymnasium") for d in extras["gym"])
    assert any(d.startswith("pettingzoo") for d in extras["pettingzoo"])
