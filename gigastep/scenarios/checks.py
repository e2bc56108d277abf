"""Checks of scenario data shared by the catalogue's files, names and builder: EnvConfig
keyword sets (a scenario's `env` table, overrides, suffix tables) and the tables of a TOML
source."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gigastep.game.types import EnvConfig, MapSpec, check_fields, closest

# Per-agent type fields and the EnvConfig table each one fills.
_TYPE_TO_CONFIG = {
    "sprite": "sprites",
    "max_health": "max_health",
    "detection_range": "detection_range",
    "damage_range": "damage_range",
    "thrust": "thrust",
    "idle_reward": "idle_reward",
}


# Fields a scenario sets through its agents, map and map size rather than its `env` table.
_STRUCTURAL = {
    **{
        f: "list agents with add/add_type (team0/team1 in a file)"
        for f in ("teams", "type_names", *_TYPE_TO_CONFIG.values())
    },
    "maps": "choose maps with set_map/add_map (`map` in a file)",
    "map_set": "choose maps with set_map/add_map (`map` in a file)",
    "limit_x": "set the world size with set_map(size=...) (`map_size` in a file)",
    "limit_y": "set the world size with set_map(size=...) (`map_size` in a file)",
}


def _check_config_keys(fields: dict[str, Any], where: str) -> None:
    """Unknown EnvConfig keys fail with their new name or the closest fields (`check_fields`)."""
    check_fields(fields, where)
    maps = fields.get("maps")
    if isinstance(maps, str):
        raise TypeError(
            f"{where}: maps takes gigastep.MapSpec objects, got the name {maps!r}; "
            f"choose a map set by name with map_set={maps!r}"
        )


def _check_env_table(fields: Any, where: str) -> dict[str, Any]:
    """A scenario's own settings: EnvConfig fields other than agents, maps and world size."""
    if not isinstance(fields, dict):
        raise TypeError(f"{where} must be a table of EnvConfig fields, got {fields!r}")
    _check_config_keys(fields, where)
    for key in fields:
        if key in _STRUCTURAL:
            raise ValueError(f"{where}: {key!r} cannot be set here; {_STRUCTURAL[key]}")
    return fields


def _apply(config: EnvConfig, changes: dict[str, Any], where: str) -> EnvConfig:
    """`config` with `changes` (EnvConfig fields), validated, errors prefixed with `where`."""
    if not changes:
        return config
    _check_config_keys(changes, where)
    changes = dict(changes)
    maps = changes.get("maps")
    if "map_set" not in changes and isinstance(maps, (tuple, list)) and maps:
        if all(isinstance(m, MapSpec) for m in maps):
            changes["map_set"] = "+".join(m.name for m in maps)
    try:
        new = config.replace(**changes)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{where}: {err}") from None
    if min(config.team_sizes) >= 1 and min(new.team_sizes) < 1:
        empty = new.team_sizes.index(0)
        raise ValueError(
            f"{where}: the overrides leave team {empty} with no agents (teams={new.teams}); "
            f"a game of two teams needs at least one agent in each, or no one can win it"
        )
    return new


def _check_table_keys(table: Any, allowed: Collection[str], where: str) -> dict[str, Any]:
    for key in _table(table, where):
        if key not in allowed:
            raise ValueError(
                f"{where}: unknown key {key!r}; expected one of {list(allowed)} "
                f"(closest: {closest(key, allowed, 1)[0]!r})"
            )
    return table


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{where} must be a table, got {value!r}")
    return value
