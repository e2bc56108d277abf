"""Locating the data catalogue (`envs/`) in an installed wheel or a source checkout."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["catalog_dir", "read_catalog_toml"]


def catalog_dir() -> Path:
    """The folder holding the TOML catalogue.

    In an installed wheel the top-level `envs/` folder ships as `gigastep/_envs`; in a source
    checkout (or an editable install) it is `envs/` beside the package.
    """
    packaged = Path(str(resources.files("gigastep"))) / "_envs"
    if packaged.is_dir():
        return packaged
    source = Path(__file__).resolve().parents[2] / "envs"
    if source.is_dir():
        return source
    raise FileNotFoundError(
        f"gigastep's scenario catalogue was not found (looked in {packaged} and {source}); "
        "reinstall the package"
    )


@cache
def read_catalog_toml(name: str) -> dict[str, Any]:
    """Parse one file of the catalogue (e.g. ``"maps.toml"``). Parsing executes no code."""
    path = catalog_dir() / name
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"malformed catalogue file {path}: {err}") from None
