"""Reading scenario sources: the built-in catalogue (`envs/*.toml`) and user scenario files,
parsed into agent types, maps, map generators, presets and scenario tables (no code runs)."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gigastep._util.resources import read_catalog_toml
from gigastep.game.maps import map_set_names
from gigastep.game.procmaps import ProcMaps, generator_names
from gigastep.game.types import MapSpec
from gigastep.scenarios.checks import _TYPE_TO_CONFIG, _check_env_table, _check_table_keys, _table
from gigastep.scenarios.names import AgentType, parse_name


@dataclass(frozen=True)
class _Catalog:
    """Parsed scenario data of one source (the built-in catalogue or a user file)."""

    source: str  # for error messages
    types: dict[str, AgentType]
    presets: dict[str, dict[str, Any]]
    maps: dict[str, MapSpec]  # maps defined by the source (not the built-in ones)
    scenarios: dict[str, dict[str, Any]]  # scenarios and distributions (tables with a draw)
    generators: dict[str, ProcMaps] = dataclasses.field(default_factory=dict)  # likewise


def _parse_rows(
    table: Any,
    where: str,
    kind: str,
    make: Callable[..., Any],
    fields: Collection[str],
    taken: Collection[str],
    lists_as_tuples: bool = False,
) -> dict[str, Any]:
    """`{name: make(name=name, **row)}` of each row of a named table (agent types, maps,
    generators): a name in `taken` (built in) or a key not in `fields` is refused, and an
    error of `make` names `where`. `lists_as_tuples` turns TOML arrays into tuples first (for
    frozen, hashable classes)."""
    out = {}
    for name, row in _table(table, where).items():
        if name in taken:
            raise ValueError(f"{where}: {kind} {name!r} is built in; choose another name")
        _check_table_keys(row, fields, f"{where}: {kind} {name!r}")
        if lists_as_tuples:
            row = {k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}
        try:
            out[name] = make(name=name, **row)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None
    return out


def _fields_but_name(cls: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "name"]


def _parse_types(table: Any, where: str, existing: Collection[str] = ()) -> dict[str, AgentType]:
    return _parse_rows(table, where, "agent type", AgentType, tuple(_TYPE_TO_CONFIG), existing)


def _parse_maps(table: Any, where: str) -> dict[str, MapSpec]:
    taken = set(map_set_names())
    return _parse_rows(table, where, "map", MapSpec, _fields_but_name(MapSpec), taken)


def _parse_generators(table: Any, where: str) -> dict[str, ProcMaps]:
    taken = {*map_set_names(), *generator_names()}
    fields = _fields_but_name(ProcMaps)
    return _parse_rows(table, where, "generator", ProcMaps, fields, taken, lists_as_tuples=True)


def _parse_presets(table: Any, where: str) -> dict[str, dict[str, Any]]:
    presets = {}
    for name, fields in _table(table, where).items():
        presets[name] = _check_env_table(fields, f"{where}: preset {name!r}")
    return presets


@cache
def _builtin_catalog() -> _Catalog:
    types_file = read_catalog_toml("agent_types.toml")
    scen_file = read_catalog_toml("scenarios.toml")
    dist_file = read_catalog_toml("distributions.toml")
    _check_table_keys(types_file, ("types",), "agent_types.toml")
    _check_table_keys(scen_file, ("presets", "suffixes", "scenarios"), "scenarios.toml")
    _check_table_keys(dist_file, ("distributions",), "distributions.toml")
    scenarios = dict(scen_file.get("scenarios", {}))
    distributions = dict(dist_file.get("distributions", {}))
    for name, table in distributions.items():
        if name in scenarios:
            raise ValueError(f"distributions.toml: {name!r} is also a scenario of scenarios.toml")
        if not isinstance(table, dict) or "draw" not in table:
            raise ValueError(f"distributions.toml: distribution {name!r} has no draw table")
    catalog = _Catalog(
        source="the built-in catalogue",
        types=_parse_types(types_file.get("types", {}), "agent_types.toml"),
        presets=_parse_presets(scen_file.get("presets", {}), "scenarios.toml"),
        maps={},
        scenarios={**scenarios, **distributions},
    )
    _check_base_names(catalog)
    return catalog


def _check_base_names(catalog: _Catalog) -> None:
    for name in catalog.scenarios:
        if parse_name(name).suffixes:
            raise ValueError(
                f"{catalog.source}: scenario name {name!r} ends in name suffixes; "
                "base names must not (the suffixes are added by the name grammar)"
            )


def _load_file(path: Path) -> _Catalog:
    if not path.is_file():
        raise FileNotFoundError(f"scenario file {str(path)!r} does not exist")
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"malformed scenario file {path}: {err}") from None
    where = str(path)
    _check_table_keys(data, ("types", "presets", "maps", "generators", "scenarios"), where)
    builtin = _builtin_catalog()
    scenarios = data.get("scenarios", {})
    if not isinstance(scenarios, dict) or not scenarios:
        raise ValueError(f"{where}: defines no scenario; add a [scenarios.NAME] table")
    catalog = _Catalog(
        source=where,
        types={**builtin.types, **_parse_types(data.get("types", {}), where, builtin.types)},
        presets={**builtin.presets, **_parse_presets(data.get("presets", {}), where)},
        maps=_parse_maps(data.get("maps", {}), where),
        scenarios=scenarios,
        generators=_parse_generators(data.get("generators", {}), where),
    )
    _check_base_names(catalog)
    return catalog


def agent_types() -> dict[str, AgentType]:
    """The built-in agent types by name, in catalogue order."""
    return dict(_builtin_catalog().types)
