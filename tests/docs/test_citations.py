"""Every rule the repository cites exists in docs/rules.md, and nothing cites an outside document.

Code, tests and docs cite the rule book as `rules §N`, `rules §N.M` or `rules §15 row K`
(lists and ranges follow: `rules §4.3–§4.7`, `§5.3, §5.4 with §15 rows 12, 14-20`). Every `§`
in the repository refers to that page, so every `§N(.M)` must be one of its headings and every
row number after `§15 row(s)` one of its §15 table's rows. The specification and design notes
the project was written from are not in the repository, so no file may cite them.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "rules.md"
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cc", ".h", ".txt", ".cfg", ".cff", ""}

SECTION = re.compile(r"§(\d+)(?:\.(\d+))?")
ROWS = re.compile(r"§15,? rows? (\d+(?:\s*(?:,|and|-|–)\s*\d+)*)")
# Split so that this file does not match its own patterns.
OUTSIDE = re.compile(r"\b" + "SP" + r"EC\b(?!_)|\b" + "DES" + r"IGN\b|/work/" + "shared")


def heading_sections(text: str) -> set[str]:
    """Section numbers of the Markdown headings `## N. Title` and `### N.M Title`."""
    found = set()
    for m in re.finditer(r"^#{2,4} (\d+)(?:\.(\d+))?[. ]", text, re.MULTILINE):
        found.add(m.group(1) if m.group(2) is None else f"{m.group(1)}.{m.group(2)}")
    return found


def numbers(listing: str) -> set[int]:
    """The integers of '3, 12 and 14-16' (ranges included): {3, 12, 14, 15, 16}."""
    out: set[int] = set()
    for part in re.split(r"\s*(?:,|and)\s*", listing.strip()):
        if not part:
            continue
        bounds = re.split(r"\s*[-–]\s*", part)
        lo, hi = int(bounds[0]), int(bounds[-1])
        out |= set(range(lo, hi + 1))
    return out


def table_rows(text: str) -> set[int]:
    """Row numbers in the first column of the table of section 15 (`| 15, 17 |` counts both)."""
    start = ("\n" + text).index("\n## 15.")
    end = text.find("\n## ", start + 1)
    rows: set[int] = set()
    for line in text[start : end if end != -1 else None].splitlines():
        m = re.match(r"^\|\s*(\d+(?:\s*(?:,|-|–)\s*\d+)*)\s*\|", line)
        if m:
            rows |= numbers(m.group(1))
    return rows


def repository_files() -> list[Path]:
    """Tracked and untracked (not ignored) text files of the repository."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        paths = [ROOT / p for p in listed]
    except (OSError, subprocess.CalledProcessError):  # an sdist: no git
        paths = [p for p in ROOT.rglob("*") if ".git" not in p.parts]
    return sorted(p for p in paths if p.is_file() and p.suffix in TEXT_SUFFIXES)


def citations(text: str) -> tuple[set[str], set[int]]:
    """(sections, §15 rows) cited in `text`."""
    sections = {
        m.group(1) if m.group(2) is None else f"{m.group(1)}.{m.group(2)}"
        for m in SECTION.finditer(text)
    }
    rows = set().union(*(numbers(m.group(1)) for m in ROWS.finditer(text)))
    return sections, rows


RULES_TEXT = RULES.read_text(encoding="utf-8")
SECTIONS = heading_sections(RULES_TEXT)
ROW_NUMBERS = table_rows(RULES_TEXT)
FILES = repository_files()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def test_the_rules_have_the_cited_numbering():
    assert {str(n) for n in range(16)} <= SECTIONS
    assert {"4.2", "4.10", "5.3", "13.4", "15"} <= SECTIONS
    assert set(range(1, 35)) <= ROW_NUMBERS


def test_the_parsers_read_lists_and_ranges():
    text = "see rules §4.3–§4.7 and rules §5.3, §5.4 with §15 rows 12, 14-16 and 20; §15 row 3"
    assert citations(text) == ({"4.3", "4.7", "5.3", "5.4", "15"}, {3, 12, 14, 15, 16, 20})
    assert heading_sections("## 4. Step\n### 4.10 Reward\n#### Derived\n") == {"4", "4.10"}
    assert table_rows("## 15. X\n| row |\n| 1 | a |\n| 15, 17 | b |\n## 16. Y\n| 99 |") == {
        1,
        15,
        17,
    }


def test_a_citation_of_a_missing_section_is_found():
    sections, rows = citations("rules §4." + "99 and rules §15 row " + "77")  # split: not cited
    assert sections - SECTIONS == {"4.99"} and rows - ROW_NUMBERS == {77}


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_every_citation_names_a_rule_that_exists(path: Path):
    sections, rows = citations(_read(path))
    assert sections <= SECTIONS, f"{path.name} cites missing sections {sorted(sections - SECTIONS)}"
    assert rows <= ROW_NUMBERS, f"{path.name} cites missing §15 rows {sorted(rows - ROW_NUMBERS)}"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_file_cites_a_document_outside_the_repository(path: Path):
    text = _read(path).splitlines()
    lines = [
        f"{path.name}:{i}: {line.strip()}" for i, line in enumerate(text, 1) if OUTSIDE.search(line)
    ]
    assert lines == [], "cite docs/rules.md (`rules §N.M`) instead:\n" + "\n".join(lines)
