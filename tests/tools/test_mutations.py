"""The mutation check (tools/mutations.py) stays runnable: every mutation names a file that
exists, text that occurs in it exactly once (else the check reports it stale and catches
nothing), a change, and tests that exist."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mutations():
    # a script, not a package module: load it by path (registered, as its dataclass needs)
    spec = importlib.util.spec_from_file_location("mutations", ROOT / "tools" / "mutations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutations", module)
    spec.loader.exec_module(module)
    return module.MUTATIONS


MUTATIONS = _mutations()


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_to_exactly_one_place(mutation):
    text = (ROOT / mutation.path).read_text()
    assert text.count(mutation.old) == 1, f"{mutation.name}: stale in {mutation.path}"
    assert mutation.new != mutation.old


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_names_tests_that_exist(mutation):
    for target in mutation.tests:
        path, _, name = target.partition("::")
        source = (ROOT / path).read_text()
        assert not name or f"def {name.split('[')[0]}(" in source, f"{target} does not exist"


def test_the_mutation_names_are_unique():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))
