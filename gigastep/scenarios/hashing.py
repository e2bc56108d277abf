"""`scenario_hash`: the content hash that identifies the game an environment plays."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from gigastep.game.types import EnvConfig

ADDED_FIELDS = ("entity_max_allies", "entity_max_enemies", "map_generator", "team_draw")
"""EnvConfig fields added after 0.1.0. Each enters `scenario_hash` only when it differs from
its default, so every game that 0.1.0 could express keeps its 0.1.0 hash (recorded replays and
checkpoints still match it)."""


def scenario_hash(config: EnvConfig) -> str:
    """First 12 hex digits of the SHA-256 of a canonical JSON form of every field of `config`
    (a field of `ADDED_FIELDS` only where it differs from its default).

    Stable across processes, platforms and Python versions (no `hash()`), so it identifies the
    game an environment plays: any field that differs gives a different hash.
    """
    if not isinstance(config, EnvConfig):
        raise TypeError(f"scenario_hash takes an EnvConfig, got {type(config).__name__}")
    text = json.dumps(_canonical(config), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _canonical(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: _canonical(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not (
                isinstance(value, EnvConfig)
                and f.name in ADDED_FIELDS
                and getattr(value, f.name) == f.default
            )
        }
        return {"__type__": type(value).__name__, **fields}
    if isinstance(value, (tuple, list)):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot hash config value {value!r} of type {type(value).__name__}")
