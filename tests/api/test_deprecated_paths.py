"""The module paths and names of 0.1 still import for one release, warn, and give the moved
objects; the adapters keep their short public names (`gigastep.torch`, ...) and `gigastep.env`
its functional forms without a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
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
    "gigastep.jaxmarl": "GigastepJaxMARLEnv",
    "gigastep.benchmarl": "GigastepTask",
}
# the optional package each adapter needs, where it is an extra (docs/install.md); CI runs the
# benchmarl cases in its BenchMARL environment (.ci/run)
EXTRA = {"gigastep.jaxmarl": "jaxmarl", "gigastep.benchmarl": "benchmarl"}


@pytest.mark.subprocess
@pytest.mark.parametrize("short", sorted(ADAPTERS))
def test_an_adapters_short_name_gives_its_objects_without_a_warning(short):
    if short in EXTRA:
        pytest.importorskip(EXTRA[short])
    name, full = ADAPTERS[short], short.replace("gigastep.", "gigastep.adapters.")
    # Gigastep's own warnings only: an optional package may warn about its own dependencies.
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    import {short} as short, {full} as full\n"
        f"assert short.{name} is full.{name} and short.__all__ == full.__all__\n"
        "ours = [str(w.message) for w in caught if 'gigastep' in (str(w.message) + w.filename)]\n"
        "assert not ours, ours\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("new", sorted({new for new, _ in MOVED.values()} | set(ADAPTERS)))
def test_a_moved_module_exports_what_its_all_names(new):
    if new in EXTRA:
        pytest.importorskip(EXTRA[new])
    module = importlib.import_module(new)
    assert all(hasattr(module, name) for name in module.__all__)


def test_gigastep_scenarios_make_is_deprecated_and_still_makes():
    import gigastep.scenarios

    with pytest.warns(
        DeprecationWarning, match=r"gigastep\.scenarios\.make moved to gigastep\.make"
    ):
        make = gigastep.scenarios.make
    assert make is gigastep.make


OPPONENTS_MOVED = {  # names of gigastep.opponents that moved, and their new module
    "VersusEnv": "gigastep.versus",
    "EnvLike": "gigastep.versus",
    "observe_state": "gigastep.versus",
    "resolve_env": "gigastep.versus",
    "team_outcome": "gigastep.env",
}


@pytest.mark.parametrize("name", sorted(OPPONENTS_MOVED))
def test_a_moved_name_of_gigastep_opponents_warns_and_is_the_new_one(name):
    import gigastep.opponents

    new = OPPONENTS_MOVED[name]
    with pytest.warns(
        DeprecationWarning, match=rf"gigastep\.opponents\.{name} moved to {new}"
    ) as caught:
        old = getattr(gigastep.opponents, name)
    assert caught[0].filename == __file__  # it points at the caller's line
    assert old is getattr(importlib.import_module(new), name)
    assert name not in gigastep.opponents.__all__


def test_from_gigastep_opponents_import_versus_env_still_works():
    with pytest.warns(DeprecationWarning, match="gigastep 0.3"):
        from gigastep.opponents import VersusEnv
    from gigastep.versus import VersusEnv as new

    assert VersusEnv is new


def test_gigastep_opponents_names_what_it_does_not_have():
    import gigastep.opponents

    with pytest.raises(AttributeError, match="no attribute 'VersusEnvs'"):
        gigastep.opponents.VersusEnvs  # noqa: B018


# gigastep.env's functional forms live in the engine now; gigastep.env keeps them (no warning)
ENV_NAMES = {
    "gigastep.game.step": (
        "Advanced",
        "advance",
        "episode_winner",
        "reset",
        "sample_noise",
        "score_rewards",
        "step",
        "step_autoreset",
        "team_outcome",
        "transition",
    ),
    "gigastep.game.batched": ("batched_reset", "batched_step", "batched_step_autoreset"),
    "gigastep.game.state_checks": ("check_batch", "check_batched_state", "check_single_state"),
}


@pytest.mark.parametrize("home", sorted(ENV_NAMES))
def test_the_engine_functions_stay_importable_from_gigastep_env_without_a_warning(home):
    import warnings

    import gigastep.env

    module = importlib.import_module(home)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ENV_NAMES[home]:
            assert getattr(gigastep.env, name) is getattr(module, name), name


@pytest.mark.parametrize(
    "module",
    [
        "gigastep.env",
        "gigastep.opponents",
        "gigastep.versus",
        "gigastep.game.step",
        "gigastep.game.batched",
        "gigastep.game.state_checks",
    ],
)
def test_a_split_module_exports_what_its_all_names(module):
    mod = importlib.import_module(module)
    assert all(hasattr(mod, name) for name in mod.__all__)


def test_gigastep_types_is_the_public_name_of_the_engine_types():
    import gigastep.game.types
    import gigastep.types

    assert gigastep.types.EnvConfig is gigastep.game.types.EnvConfig is gigastep.EnvConfig
    assert set(gigastep.types.__all__) == set(gigastep.game.types.__all__)


def test_calling_the_rollout_module_warns_and_plays_as_the_function():
    # 0.1.0 documented `gigastep.rollout(...)`, the module called; the function is
    # `gigastep.rollout.rollout`, and calling the module goes in 0.3
    import types
    import warnings

    import jax

    import gigastep
    import gigastep.rollout
    from gigastep.rollout import rollout

    assert isinstance(gigastep.rollout, types.ModuleType)
    assert isinstance(rollout, types.FunctionType) and gigastep.rollout.rollout is rollout
    args = ("identical_2_vs_2_fobs_vec_void_disc", 2, 3, jax.random.key(0))
    with pytest.warns(DeprecationWarning, match=r"gigastep\.rollout\(\.\.\.\), is deprecated"):
        old = gigastep.rollout(*args, policy="circle")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gigastep.rollout(*args, policy="circle")
    (warning,) = [w for w in caught if "gigastep.rollout(...)" in str(w.message)]
    assert warning.category is DeprecationWarning
    assert "gigastep 0.3" in str(warning.message)
    assert "call the function gigastep.rollout.rollout(...)" in str(warning.message)
    assert warning.filename == __file__  # it points at the caller's line
    new = rollout(*args, policy="circle")
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), old, new)


def test_the_rollout_function_does_not_warn():
    import warnings

    import jax

    from gigastep.rollout import rollout

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rollout("identical_2_vs_2_fobs_vec_void_disc", 2, 3, jax.random.key(0), policy="circle")
