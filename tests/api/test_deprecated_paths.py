"""The module paths of 0.1 still import for one release, warn, and give the moved objects;
the adapters keep their short public names (`gigastep.torch`, ...) without a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = {
    "gigastep.evaluation": ("gigastep.eval.matches", "evaluate"),
    "gigastep.ratings": ("gigastep.eval.ratings", "fit_ratings"),
    "gigastep.render": ("gigastep.viz.render", "FrameRenderer"),
    "gigastep.viewer": ("gigastep.viz.viewer", "Viewer"),
    "gigastep.replay": ("gigastep.viz.replay", "Replay"),
}


@pytest.mark.subprocess
@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_and_gives_the_moved_object(old):
    new, name = MOVED[old]
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    import {old} as old\n"
        f"import {new} as new\n"
        f"assert old.{name} is new.{name}\n"
        "messages = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        f"assert any('{old} moved to {new}' in m for m in messages), messages\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


ADAPTERS = {  # public short names of the adapters (not deprecated)
    "gigastep.torch": "TorchVecEnv",
    "gigastep.torchrl": "GigastepTorchRLEnv",
    "gigastep.gymnasium": "TeamEnv",
    "gigastep.pettingzoo": "parallel_env",
}


@pytest.mark.subprocess
@pytest.mark.parametrize("short", sorted(ADAPTERS))
def test_an_adapters_short_name_gives_its_objects_without_a_warning(short):
    name, full = ADAPTERS[short], short.replace("gigastep.", "gigastep.adapters.")
    code = (
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        f"import {short} as short, {full} as full\n"
        f"assert short.{name} is full.{name} and short.__all__ == full.__all__\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("new", sorted({new for new, _ in MOVED.values()} | set(ADAPTERS)))
def test_a_moved_module_exports_what_its_all_names(new):
    module = importlib.import_module(new)
    assert all(hasattr(module, name) for name in module.__all__)


def test_gigastep_scenarios_make_is_deprecated_and_still_makes():
    import gigastep.scenarios

    with pytest.warns(
        DeprecationWarning, match=r"gigastep\.scenarios\.make moved to gigastep\.make"
    ):
        make = gigastep.scenarios.make
    assert make is gigastep.make


def test_gigastep_types_is_the_public_name_of_the_engine_types():
    import gigastep.game.types
    import gigastep.types

    assert gigastep.types.EnvConfig is gigastep.game.types.EnvConfig is gigastep.EnvConfig
    assert set(gigastep.types.__all__) == set(gigastep.game.types.__all__)
