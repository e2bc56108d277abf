"""The table "Inputs and their checks" of docs/development.md cannot rot: every `EnvConfig`
field, every option of the `gigastep` command, every PPO flag and every environment variable
the code reads has a row, and every test a row names exists (issue 52)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import re
from pathlib import Path

import pytest

from gigastep.types import EnvConfig

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "development.md"
PASSED_ON = "passed on"  # rows of variables gigastep only passes on or records: no test


@functools.cache
def _rows() -> list[list[str]]:
    text = DOC.read_text()
    section = text.split("## Inputs and their checks", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|") or set(line) <= {"|", "-", " "}:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if cells[0] == "input" or cells[0].startswith("**"):
            continue  # the header and the group rows
        rows.append(cells)
    return rows


def _inputs() -> str:
    return "\n".join(row[0] for row in _rows())


def _named(name: str) -> bool:
    return re.search(rf"`{re.escape(name)}`", _inputs()) is not None or any(
        re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", cell)
        for cell in re.findall(r"`([^`]*)`", _inputs())
    )


def test_every_row_has_four_cells():
    assert len(_rows()) >= 60
    for row in _rows():
        assert len(row) == 4, row


def test_every_env_config_field_has_a_row():
    missing = [f.name for f in dataclasses.fields(EnvConfig) if not _named(f.name)]
    assert missing == []


def _cli_options() -> set[str]:
    from gigastep.cli import _parser

    names: set[str] = set()
    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for p in (parser, *sub.choices.values()):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if action.option_strings:
                names.add(max(action.option_strings, key=len))
            else:
                names.add(action.dest)
    return names - {"--help"}


def test_every_gigastep_option_and_argument_has_a_row():
    options = _cli_options()
    assert {"--fps", "--seed", "--games", "name", "players"} <= options
    assert [o for o in sorted(options) if not _named(o)] == []


def test_every_ppo_flag_has_a_row():
    from baselines.config import PPOConfig

    flags = [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(PPOConfig)]
    assert [f for f in flags if not _named(f)] == []


_READ = re.compile(
    r"""(?:environ\.get\(\s*|environ\[\s*|flag\(\s*|env_int\(\s*\w+,\s*|environ\.setdefault\(\s*)
        ["']([A-Z][A-Z0-9_]+)["']
      | ["']([A-Z][A-Z0-9_]+)["']\s+(?:not\s+)?in\s+(?:os\.environ|env)\b""",
    re.VERBOSE,
)


def _variables_read() -> set[str]:
    found: set[str] = set()
    for folder in ("gigastep", "baselines", "benchmarks", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            for a, b in _READ.findall(path.read_text()):
                found.add(a or b)
    text = (ROOT / "gigastep" / "adapters" / "dlpack.py").read_text()
    block = text.split("_MEMORY_VARIABLES = (", 1)[1].split(")", 1)[0]
    found |= set(re.findall(r'"([A-Z_]+)"', block))
    return found


def test_every_environment_variable_the_code_reads_has_a_row():
    read = _variables_read()
    assert {"GIGASTEP_NATIVE", "GIGASTEP_MALLOC_TUNING", "RANK", "WORLD_SIZE"} <= read
    assert [v for v in sorted(read) if not _named(v)] == []


@functools.cache
def _test_names(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    )


def _named_tests(cell: str) -> list[tuple[str, str]]:
    out, current = [], None
    for ref in re.findall(r"`([^`]*::test_\w+)`", cell):
        path, _, name = ref.partition("::")
        current = path or current
        assert current is not None, f"{ref!r} names no file and follows none"
        out.append((current, name))
    return out


def test_every_row_names_a_test_that_exists_or_says_it_is_passed_on():
    seen = 0
    for row in _rows():
        tests = _named_tests(row[3])
        if not tests:
            assert row[3] == "—" and PASSED_ON in row[1], row
            continue
        for path, name in tests:
            assert (ROOT / path).is_file(), path
            assert name in _test_names(path), f"{path}::{name} does not exist"
            seen += 1
    assert seen >= 100


@pytest.mark.parametrize(
    "cell, expected",
    [
        ("`a.py::test_x`, `::test_y`", [("a.py", "test_x"), ("a.py", "test_y")]),
        ("`a.py::test_x`, `b.py::test_z`", [("a.py", "test_x"), ("b.py", "test_z")]),
        ("—", []),
    ],
)
def test_the_test_cells_are_read_as_file_and_name(cell, expected):
    assert _named_tests(cell) == expected
