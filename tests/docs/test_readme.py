"""The examples of README.md and of the documentation pages (docs/**/*.md) run as written:
every Python block, and every shell block marked `run`.

Conventions (README.md's top comment and docs/development.md say the same for writers):

- A fence's info string is a language, then tokens. Languages: `python`, `bash`, `toml`,
  `text` and none (a plain block). Tokens, for `python` blocks only unless said otherwise:
  - (none): run in a fresh interpreter, so the block is self-contained (its own imports, keys).
  - `continue`: run in the namespace of the block before it (same subprocess); that block must
    be a run Python block, possibly itself a continuation.
  - `skip`: not run; its first line is a comment that says why (a GPU, a window, a long run).
  - `devices=N`: the subprocess starts with `XLA_FLAGS=--xla_force_host_platform_device_count=N`
    (N CPU devices), set before JAX starts; continuations inherit it.
  - `run` (`bash` only): each command of the block (a line; a trailing backslash continues
    it; `#` lines are comments) runs in `bash` from the repository root, in order.
  An unknown language or token fails `test_readme_fences_use_only_known_info_strings`.
- Every group (a block with its continuations) and every `bash run` block runs in its own
  subprocess: repository root as working directory, `PYTHONPATH` = the repository root, this
  interpreter's directory first on `PATH`, so nothing one block sets (JAX flags, x64 mode,
  devices) reaches another. Tracebacks name the file and its line numbers. A continuation
  never crosses from one file to another.
- A group that imports an optional extra (torch, gymnasium, ...) that is not installed is
  skipped (the dependency-floor check of `.ci/floor` installs only the core).
- Keep blocks cheap (small batches, a few seconds): they are part of the test suite.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DEVELOPMENT = ROOT / "docs" / "development.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
LANGUAGES = {"", "python", "bash", "toml", "text"}
PYTHON_TOKENS = {"continue", "skip"}
EXTRAS = (
    "torch",
    "gymnasium",
    "pettingzoo",
    "matplotlib",
    "torchrl",
    "tensordict",
    "jaxmarl",
    "benchmarl",
)
TIMEOUT_S = 300

# Runs (file, line, code) blocks in one namespace; each block is compiled as its file with its
# own line numbers (the code is padded with blank lines), so tracebacks point into the page.
RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for source, line, code in json.load(sys.stdin):
    exec(compile("\\n" * (line - 1) + code, source, "exec"), namespace)
"""


@dataclass
class Block:
    line: int  # line number of the first line of code (after the opening fence)
    language: str
    tokens: list[str]
    code: str
    source: str = "README.md"  # the file, relative to the repository root
    continuations: list[Block] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    @property
    def devices(self) -> int | None:
        for token in self.tokens:
            if token.startswith("devices="):
                return int(token.split("=", 1)[1])
        return None


def parse_blocks(text: str, source: str = "README.md") -> list[Block]:
    """Every fenced block of a Markdown text, in order (`source` names the file in messages)."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^```(.*)$", lines[i])
        if not opening:
            i += 1
            continue
        info = opening.group(1).split()
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"{source}:{i + 1}: a fence that is never closed")
        language, tokens = (info[0], info[1:]) if info else ("", [])
        code = "\n".join(lines[i + 1 : end]) + "\n"
        blocks.append(Block(i + 2, language, tokens, code, source))
        i = end + 1
    return blocks


def fence_problems(blocks: list[Block]) -> list[str]:
    """Info strings that break the conventions (an empty list when all are known)."""
    problems = []
    previous_runs, previous_source = False, None  # the block before: a Python block that runs
    for b in blocks:
        where = f"{b.source}:{b.line - 1}"
        if b.source != previous_source:
            previous_runs, previous_source = False, b.source
        if b.language not in LANGUAGES:
            problems.append(f"{where}: unknown language {b.language!r} (known: {LANGUAGES})")
        allowed = set()
        if b.language == "python":
            allowed = PYTHON_TOKENS | {t for t in b.tokens if re.fullmatch(r"devices=[1-9]\d*", t)}
        elif b.language == "bash":
            allowed = {"run"}
        for token in b.tokens:
            if token not in allowed:
                problems.append(f"{where}: unknown token {token!r} for a {b.language!r} block")
        if "continue" in b.tokens and not previous_runs:
            problems.append(f"{where}: 'continue' must follow a Python block that runs")
        if {"continue", "skip"} <= set(b.tokens):
            problems.append(f"{where}: a block is either 'continue' or 'skip'")
        if "continue" in b.tokens and b.devices is not None:
            problems.append(f"{where}: a continuation inherits its devices; drop 'devices='")
        if "skip" in b.tokens and not b.code.lstrip().startswith("#"):
            problems.append(f"{where}: a skipped block starts with a comment saying why")
        previous_runs = b.language == "python" and "skip" not in b.tokens
    return problems


def python_groups(blocks: list[Block]) -> list[Block]:
    """Python blocks that run, each with its continuations."""
    groups: list[Block] = []
    for b in blocks:
        if b.language != "python" or "skip" in b.tokens:
            continue
        if "continue" in b.tokens and groups and groups[-1].source == b.source:
            groups[-1].continuations.append(b)
        else:
            groups.append(b)
    return groups


def bash_commands(code: str) -> list[str]:
    """The commands of a shell block: one a line, a trailing backslash joins the next line."""
    commands, current = [], ""
    for raw in code.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        commands.append(current + line)
        current = ""
    if current:
        commands.append(current)
    return commands


def imported_names(code: str) -> set[str]:
    """Top-level modules that `code` imports, and the submodules of gigastep it uses."""

    def parts(module: str) -> set[str]:  # "gigastep.adapters.torch" needs torch as well
        head, *rest = module.split(".")
        return {head, *rest} if head == "gigastep" else {head}

    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= set().union(*(parts(alias.name) for alias in node.names))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= parts(node.module)
            if node.module == "gigastep":  # from gigastep import torch, ...
                names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Attribute):  # gigastep.adapters.torch.X(...) after an import
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id == "gigastep":
                names |= set(chain)
    return names


def missing_extras(code: str) -> list[str]:
    """Optional extras that `code` imports and that are not installed here."""
    names = imported_names(code)
    return sorted(e for e in EXTRAS if e in names and importlib.util.find_spec(e) is None)


def _environment(devices: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if devices is not None:
        flags = env.get("XLA_FLAGS", "")
        env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
    return env


def _report(what: str, result: subprocess.CompletedProcess) -> str:
    out, err = result.stdout, result.stderr
    return f"{what} exited {result.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"


def _source(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


BLOCKS = [
    b for page in PAGES for b in parse_blocks(page.read_text(encoding="utf-8"), _source(page))
]
GROUPS = python_groups(BLOCKS)
BASH_RUN = [b for b in BLOCKS if b.language == "bash" and "run" in b.tokens]


# ------------------------------------------------------------------------------------------
# The conventions themselves
# ------------------------------------------------------------------------------------------


def test_readme_fences_use_only_known_info_strings():
    assert fence_problems(BLOCKS) == []


def test_readme_and_docs_have_python_examples_that_run():
    assert len([g for g in GROUPS if g.source == "README.md"]) >= 2
    assert len(GROUPS) >= 15
    assert {g.source for g in GROUPS} >= {"README.md", "docs/scaling.md", "docs/training.md"}


def test_the_conventions_reject_unknown_tokens_and_orphan_continuations():
    text = "```python fast\nx = 1\n```\n```python skip\nx = 2\n```\n```python continue\ny\n```\n"
    problems = fence_problems(parse_blocks(text))
    assert any("unknown token 'fast'" in p for p in problems)
    assert any("starts with a comment" in p for p in problems)
    assert any("'continue' must follow" in p for p in problems)
    assert fence_problems(parse_blocks("```python devices=2\nx = 1\n```\n")) == []


def test_continuations_never_cross_files():
    blocks = parse_blocks("```python\na = 1\n```\n", "a.md") + parse_blocks(
        "```python continue\nb = a\n```\n", "b.md"
    )
    assert any("'continue' must follow" in p for p in fence_problems(blocks))
    assert [g.source for g in python_groups(blocks)] == ["a.md", "b.md"]


def test_continuations_join_the_group_before_them():
    text = "```python\na = 1\n```\ntext\n```python continue\nb = a\n```\n```python\nc = 1\n```\n"
    groups = python_groups(parse_blocks(text))
    assert [(g.line, [c.line for c in g.continuations]) for g in groups] == [(2, [6]), (9, [])]


def test_examples_that_import_an_extra_name_it():
    code = "import gigastep.adapters.gymnasium\n"
    code += "from gigastep.adapters.pettingzoo import parallel_env\n"
    assert set(EXTRAS) & imported_names(code) == {"gymnasium", "pettingzoo"}


def test_shell_commands_join_backslash_lines_and_drop_comments():
    code = "# a comment\nA=1 \\\n    echo $A\n\necho two\n"
    assert bash_commands(code) == ["A=1 echo $A", "echo two"]


# ------------------------------------------------------------------------------------------
# The examples
# ------------------------------------------------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.parametrize("group", GROUPS, ids=[g.where for g in GROUPS])
def test_readme_python_example_runs(group: Block):
    blocks = [group, *group.continuations]
    missing = missing_extras("".join(b.code for b in blocks))
    if missing:
        pytest.skip(f"needs the optional extra(s) {', '.join(missing)}")
    payload = json.dumps([(b.source, b.line, b.code) for b in blocks])
    result = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=payload,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_environment(group.devices),
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, _report(group.where, result)


@pytest.mark.subprocess
@pytest.mark.parametrize("block", BASH_RUN, ids=[b.where for b in BASH_RUN])
def test_readme_shell_commands_run(block: Block):
    for command in bash_commands(block.code):
        result = subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=_environment(None),
            timeout=TIMEOUT_S,
        )
        assert result.returncode == 0, _report(f"{block.where}: {command}", result)


# ------------------------------------------------------------------------------------------
# CI runs what the README says
# ------------------------------------------------------------------------------------------


def _section_commands(page: Path, title: str) -> list[str]:
    """The shell commands of the bash blocks of section `## title` of `page`."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    blocks = parse_blocks(text[start : end if end != -1 else None], _source(page))
    return [c for b in blocks if b.language == "bash" for c in bash_commands(b.code)]


def test_ci_installs_lints_and_tests_as_the_readme_and_the_docs_say():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    install, test = _section_commands(README, "Install")  # set up, then run the tests
    assert install.startswith("pip install ")
    arguments = install.removeprefix("pip install ")
    assert any(line.startswith("python -m pip install") and line.endswith(arguments) for line in ci)
    assert test == "python -m pytest -n 2" and test in ci
    dev_test, jax_path, fast, lint, types, guard, sanitize = _section_commands(DEVELOPMENT, "Test")
    assert dev_test == test
    assert fast == 'python -m pytest -n 2 -m "not slow and not subprocess"'  # not run by CI
    assert jax_path.startswith("GIGASTEP_NATIVE=0 python -m pytest") and jax_path in ci
    assert lint == "ruff check . && ruff format --check ." and lint in ci
    assert types == "mypy gigastep baselines" and ci.index(lint) < ci.index(types)
    assert guard == "python -m tools.guard" and ci.index(test) < ci.index(guard)
    assert sanitize == "python tools/sanitize_native.py"  # documented, not run by CI
    (docs_build,) = _section_commands(DEVELOPMENT, "Documentation")
    assert docs_build.startswith("mkdocs build --strict") and docs_build in ci
    assert ci.index(lint) < ci.index(docs_build) < ci.index(test)
