"""A griffe extension for the API reference: doctest examples render as Python code.

The docstrings hold doctest runs (`>>>` lines, their `...` continuations and output) under
`Example:` headers or in running text. Markdown would read `>>>` as nested quotes; this
extension fences each run as a `pycon` code block before the docstring is parsed. It changes
only what the site shows, never the docstrings themselves.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

PROMPT = re.compile(r"^(\s*)>>> ")


def fence_doctests(text: str) -> str:
    """`text` with every run of doctest lines (from a `>>>` line to the next blank line or a
    line indented less than the prompt) wrapped in a fenced `pycon` block."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        m = PROMPT.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        indent = m.group(1)
        run = []
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            run.append(lines[i][len(indent) :])
            i += 1
        out += [f"{indent}```pycon", *(indent + line for line in run), f"{indent}```"]
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    """Fence the doctest runs of every docstring (see `fence_doctests`)."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>> " in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
