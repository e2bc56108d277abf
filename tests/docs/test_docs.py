"""The documentation site builds strictly, and the front page stays a front page.

The examples of the pages run in tests/docs/test_readme.py; the citations of the rules in
tests/docs/test_citations.py.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# Sentences true of one machine or one day, not of the project.
DIARY = re.compile(r"\bhere\b|this machine|this VM|no GPU was lent|shared the machine", re.I)


def test_the_front_page_is_short():
    assert len(README.read_text(encoding="utf-8")) <= 10_000


def test_the_front_page_has_no_sentence_only_true_of_one_machine():
    text = README.read_text(encoding="utf-8")
    assert DIARY.findall(text) == []


def test_the_diary_pattern_finds_what_it_is_for():
    assert len(DIARY.findall("It ran here. On this machine. No GPU was lent.")) == 3


def test_every_page_the_front_page_links_exists():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?:docs/)?[\w./-]+\.(?:md|gif|png|cff)|LICENSE)\)", text)
    assert links, "the front page links into the docs"
    assert [link for link in links if not (ROOT / link).exists()] == []


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="needs the docs extra")
def test_the_site_builds_with_strict_checks(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for page in ("index.html", "rules/index.html", "api/core/index.html"):
        assert (tmp_path / page).is_file(), page
    api = (tmp_path / "api" / "core" / "index.html").read_text(encoding="utf-8")
    assert "GigastepEnv" in api and "EnvConfig" in api  # mkdocstrings rendered the docstrings
