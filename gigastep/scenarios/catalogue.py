"""The scenario catalogue: agent types and scenarios as data, the name grammar, and `make`.

The catalogue lives in TOML files (`envs/agent_types.toml`, `envs/scenarios.toml`, shipped in
the wheel as `gigastep/_envs`); loading it executes no code. A scenario resolves to a frozen
`EnvConfig`; `gigastep.make` (in `gigastep.registry`) wraps that in a `GigastepEnv`:

    env = gigastep.make("identical_5_vs_1_fobs_vec_void_disc")
    config = gigastep.make_config("identical_5_vs_1", obs_type="vector")   # no env built
    env = gigastep.make("my_scenarios.toml#duel")                          # a user file

Names are `<base>` or `<base>_<fobs|pobs>_<rgb|vec>_<maps|void>_<cont|disc>`; the suffix
meanings are the `[suffixes]` tables of `envs/scenarios.toml`. A bare base name uses the
scenario's own settings, which for every catalogue scenario equal `_pobs_rgb_maps_cont`.

Settings apply in this order, each over the previous: agent types and map of the scenario,
its presets (in order), its `env` table, the name's suffixes, and the keyword overrides.

A user scenario file has the catalogue's schema (see the header of `envs/scenarios.toml`) and
may also define agent types under `[types.NAME]` and obstacle maps under `[maps.NAME]` (fields of
`gigastep.MapSpec`, coordinates in the 10 x 10 reference world, scaled to `map_size`).

This module resolves names and files; its parts live beside it: `names` (value types, the name
grammar), `files` (reading TOML sources), `builder` (`ScenarioBuilder`), `checks` (keyword
and table checks) and `hashing` (`scenario_hash`).
"""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path
from typing import Any

from gigastep.game.maps import builtin_maps, map_set_names
from gigastep.game.procmaps import generator_names
from gigastep.game.rosters import TeamDraw
from gigastep.game.types import EnvConfig, closest
from gigastep.scenarios.builder import ScenarioBuilder
from gigastep.scenarios.checks import _apply, _check_env_table, _check_table_keys, _table
from gigastep.scenarios.files import _builtin_catalog, _Catalog, _load_file, agent_types
from gigastep.scenarios.hashing import scenario_hash
from gigastep.scenarios.names import (
    AgentType,
    ScenarioName,
    ScenarioSpec,
    _suffix_fields,
    _suffix_groups,
    parse_name,
)

__all__ = [
    "AgentType",
    "ScenarioBuilder",
    "ScenarioName",
    "ScenarioSpec",
    "agent_types",
    "base_scenarios",
    "list_distributions",
    "list_scenarios",
    "make_config",
    "parse_name",
    "resolve",
    "scenario_hash",
]

_SCENARIO_KEYS = ("version", "team0", "team1", "map", "map_size", "presets", "env", "draw")


# ------------------------------------------------------------------------------------------
# Catalogue loading
# ------------------------------------------------------------------------------------------


def _builder_from_table(catalog: _Catalog, name: str) -> ScenarioBuilder:
    """The builder that a scenario table of `catalog` describes."""
    where = f"scenario {name!r} in {catalog.source}"
    table = _check_table_keys(catalog.scenarios[name], _SCENARIO_KEYS, where)
    try:
        version = table.get("version", 1)
        builder = ScenarioBuilder(name=name, version=version)
        builder._where = where
        builder._types = dict(catalog.types)
        for team, key in enumerate(("team0", "team1")):
            members = _team_members(table.get(key, {}), key)
            if not members:
                raise ValueError(
                    f"{key} has no agents (got {table.get(key, 'nothing')!r}); a scenario "
                    f"needs at least one agent in each team, e.g. {key} = {{ default = 1 }}"
                )
            for type_name in members:
                builder.add_type(team, type_name)
        _select_map(builder, catalog, table.get("map", "all"))
        if "map_size" in table:
            builder.set_map_size(table["map_size"])
        presets = table.get("presets", [])
        if not isinstance(presets, list):
            raise TypeError(f"presets must be a list of preset names, got {presets!r}")
        for preset in presets:
            if preset not in catalog.presets:
                raise ValueError(
                    f"unknown preset {preset!r}; closest: {closest(str(preset), catalog.presets)}"
                )
            builder.set(**catalog.presets[preset])
        builder.set(**_check_env_table(table.get("env", {}), "env"))
        if "draw" in table:
            builder.set(team_draw=_parse_draw(table["draw"]))
    except (TypeError, ValueError) as err:
        raise type(err)(f"{where}: {err}") from None
    return builder


def _parse_draw(table: Any) -> TeamDraw:
    """The `TeamDraw` of a distribution's `draw` table: {team0 = {sizes, weights}, team1 = ...}."""
    _check_table_keys(table, ("team0", "team1"), "draw")
    sizes, weights = [], []
    for key in ("team0", "team1"):
        if key not in table:
            raise ValueError(f"draw has no {key} table; give draw.{key} = {{ sizes = [MIN, MAX] }}")
        team = _check_table_keys(table[key], ("sizes", "weights"), f"draw.{key}")
        if "sizes" not in team:
            raise ValueError(f"draw.{key} has no sizes; give sizes = [MIN, MAX]")
        sizes.append(tuple(team["sizes"]) if isinstance(team["sizes"], list) else team["sizes"])
        weights.append(tuple(_table(team.get("weights", {}), f"draw.{key}.weights").items()))
    return TeamDraw(sizes=(sizes[0], sizes[1]), weights=(weights[0], weights[1]))


def _team_members(team: Any, key: str) -> list[str]:
    """Type name of each agent of a team given as {type: count} or as [type, type, ...]."""
    if isinstance(team, list):
        if not all(isinstance(t, str) for t in team):
            raise TypeError(f"{key} as a list must hold agent type names, got {team!r}")
        return list(team)
    if not isinstance(team, dict):
        raise TypeError(f"{key} must be a table {{type = count}} or a list of types, got {team!r}")
    members = []
    for type_name, count in team.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise TypeError(
                f"{key}: the count of {type_name!r} must be an integer >= 0, got {count!r}"
            )
        members += [type_name] * count
    return members


def _select_map(builder: ScenarioBuilder, catalog: _Catalog, choice: Any) -> None:
    names = [choice] if isinstance(choice, str) else choice
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"map must be a map name or a list of map names, got {choice!r}")
    if isinstance(choice, str) and choice in catalog.generators:
        builder.set_map_generator(catalog.generators[choice])
        return
    if isinstance(choice, str) and choice not in catalog.maps:
        builder.set_map(choice)
        return
    known = {**builtin_maps(), **catalog.maps}
    builder._map_set, builder._maps = "empty", ()
    for n in names:
        if n in catalog.generators or n in generator_names():
            raise ValueError(
                f"map {n!r} is a map generator; choose it alone (map = {n!r}), not in a list"
            )
        if n not in known:
            raise ValueError(
                f"unknown map {n!r}; closest: "
                f"{closest(n, [*known, *map_set_names(), *generator_names()])}"
            )
        builder.add_map(known[n])


@cache
def _builtin_base(base: str) -> tuple[int, EnvConfig]:
    """Version and config of a catalogue base scenario (before suffixes)."""
    builder = _builder_from_table(_builtin_catalog(), base)
    return builder.version, builder.config()


# ------------------------------------------------------------------------------------------
# Public functions
# ------------------------------------------------------------------------------------------


def base_scenarios() -> tuple[str, ...]:
    """The 18 base scenario names, in catalogue order."""
    catalog = _builtin_catalog()
    return tuple(n for n, t in catalog.scenarios.items() if "draw" not in t)


def list_distributions() -> list[str]:
    """The base names of the catalogue's distributions (`envs/distributions.toml`): scenarios
    whose team compositions are drawn per episode. Each takes the name suffixes too."""
    catalog = _builtin_catalog()
    return [n for n, t in catalog.scenarios.items() if "draw" in t]


@cache
def _all_names() -> tuple[str, ...]:
    combos = list(itertools.product(*_suffix_groups().values()))
    return tuple(str(ScenarioName(b, c)) for b in base_scenarios() for c in combos)


def list_scenarios() -> list[str]:
    """Every suffixed scenario name (18 bases x 24 suffix combinations = 432), in order: the
    288 names of the 2023 library and, with the suffix `ent`, 144 with the entity observation.

    Bases in catalogue order; within a base, suffix combinations in the order of the
    `[suffixes]` tables (fobs before pobs, rgb before vec before ent, maps before void, cont before
    disc).
    """
    return list(_all_names())


def resolve(name_or_path: str | Path, **overrides: Any) -> tuple[ScenarioSpec, EnvConfig]:
    """The `ScenarioSpec` and `EnvConfig` of a scenario name or user file, with overrides.

    Args:
        name_or_path: a catalogue name (`list_scenarios()`, or a bare base name), or a TOML
            file (`str` ending in ".toml" or a `Path`), optionally followed by
            `#scenario_name` (a scenario of the file, suffixes allowed). A file holding one
            scenario needs no name.
        **overrides: EnvConfig fields applied last.
    """
    version, config, parsed = _find(name_or_path)
    where = f"scenario {str(parsed)!r}"
    config = _apply(config, _suffix_fields(parsed.suffixes), where)
    config = _apply(config, overrides, where)
    return ScenarioSpec(str(parsed), version, scenario_hash(config)), config


def make_config(name_or_path: str | Path, **overrides: Any) -> EnvConfig:
    """The `EnvConfig` of a scenario (see `resolve`); builds no environment."""
    return resolve(name_or_path, **overrides)[1]


def _find(name_or_path: str | Path) -> tuple[int, EnvConfig, ScenarioName]:
    """Version and base config (no suffixes applied) of a name or file reference, and its name."""
    path, name = _split_path(name_or_path)
    if path is None:
        assert name is not None  # a catalogue name (`_split_path` returns one with no file)
        parsed = parse_name(name)
        if parsed.base not in _builtin_catalog().scenarios:
            choices = [*base_scenarios(), *_all_names(), *list_distributions()]
            raise ValueError(
                f"unknown scenario {name!r}; closest: {closest(name, choices)}. "
                f"gigastep.list_scenarios() lists all {len(_all_names())} names, "
                f"gigastep.list_distributions() the {len(list_distributions())} distributions"
            )
        return (*_builtin_base(parsed.base), parsed)
    catalog = _load_file(path)
    if name is None:
        if len(catalog.scenarios) > 1:
            raise ValueError(
                f"{path} defines {len(catalog.scenarios)} scenarios "
                f"({', '.join(catalog.scenarios)}); choose one as '{path}#NAME'"
            )
        name = next(iter(catalog.scenarios))
    parsed = parse_name(name)
    if parsed.base not in catalog.scenarios:
        raise ValueError(
            f"{path} has no scenario {parsed.base!r}; closest: "
            f"{closest(parsed.base, catalog.scenarios)}"
        )
    builder = _builder_from_table(catalog, parsed.base)
    return builder.version, builder.config(), parsed


def _split_path(ref: str | Path) -> tuple[Path | None, str | None]:
    """(file, scenario name in it) for a file reference; (None, name) for a catalogue name."""
    if isinstance(ref, Path):
        return ref, None
    if not isinstance(ref, str):
        raise TypeError(f"a scenario is a name or a path to a .toml file, got {ref!r}")
    file, sep, name = ref.rpartition("#")
    if sep and file.endswith(".toml"):
        return Path(file), name or None
    if ref.endswith(".toml"):
        return Path(ref), None
    return None, ref
