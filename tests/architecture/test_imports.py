"""The layers of the code, read from its imports: no circles, and no arrow pointing up.

Every import counts (top level, function-local, type-only), so a circle cannot hide behind a
lazy import. `gigastep/`'s layers, lowest first (docs/development-layout.md):

    _util  <  game  <  scenarios, spaces, types, opponents  <  env, wrappers  <  registry,
    versus, rollout, parallel  <  adapters  <  eval  <  viz  <  cli, the package itself
"""

from __future__ import annotations

import pytest

from tests.architecture.import_graph import cycles, graph

EDGES = graph("gigastep", "baselines", "benchmarks", "tools")

# Deprecated paths kept for one release; each is an edge up that goes in gigastep 0.3.
DEPRECATED = {
    ("gigastep.scenarios", "gigastep.registry"),  # gigastep.scenarios.make
    ("gigastep.scenarios.builder", "gigastep.registry"),  # ScenarioBuilder.make()
    ("gigastep.opponents", "gigastep.versus"),  # gigastep.opponents.VersusEnv, ...
    ("gigastep.opponents", "gigastep.env"),  # gigastep.opponents.team_outcome
}

LAYERS = [
    ("gigastep._util",),
    ("gigastep.game",),
    ("gigastep.scenarios", "gigastep.spaces", "gigastep.types", "gigastep.opponents"),
    ("gigastep.env", "gigastep.wrappers"),
    ("gigastep.registry", "gigastep.versus", "gigastep.rollout", "gigastep.parallel"),
    ("gigastep.adapters",),
    ("gigastep.eval",),
    ("gigastep.viz",),
]


def _layer(module: str) -> int | None:
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def _library_edges() -> dict[str, set[str]]:
    return {
        m: {t for t in targets if (m, t) not in DEPRECATED}
        for m, targets in EDGES.items()
        if m.startswith("gigastep") or m.startswith("baselines")
    }


def test_no_import_circle():
    assert cycles(_library_edges()) == []


def test_the_deprecated_edges_still_exist():
    # an edge listed here that no longer exists should leave the list
    assert all(target in EDGES[source] for source, target in DEPRECATED)


def test_a_module_imports_no_layer_above_its_own():
    upward = []
    for module, targets in _library_edges().items():
        own = _layer(module)
        if own is None:
            continue
        for target in targets:
            theirs = _layer(target)
            if target.startswith("gigastep") and (theirs is None or theirs > own):
                upward.append(f"{module} -> {target}")
    assert upward == []


@pytest.mark.parametrize("other", ["baselines", "benchmarks", "tools"])
def test_the_library_imports_no_repository_folder(other):
    found = [
        f"{m} -> {t}"
        for m, targets in EDGES.items()
        if m.startswith("gigastep")
        for t in targets
        if t.startswith(other)
    ]
    assert found == []


def test_circles_are_found_in_lazy_and_type_only_imports(tmp_path, monkeypatch):
    from tests.architecture import import_graph

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.b\n"
    )
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n")
    (pkg / "c.py").write_text("from . import a\n")
    monkeypatch.setattr(import_graph, "ROOT", tmp_path)
    edges = import_graph.graph("pkg")
    assert edges["pkg.c"] == {"pkg.a"}
    assert import_graph.cycles(edges) == [["pkg.a", "pkg.b"]]
