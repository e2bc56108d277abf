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
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import tomllib
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from gigastep._util.checks import check_team
from gigastep._util.resources import read_catalog_toml
from gigastep.game.maps import builtin_maps, map_set_names
from gigastep.game.procmaps import ProcMaps, generator_names
from gigastep.game.rosters import TeamDraw
from gigastep.game.types import EnvConfig, MapSpec, check_fields, closest

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
_SCENARIO_KEYS = ("version", "team0", "team1", "map", "map_size", "presets", "env", "draw")


# ------------------------------------------------------------------------------------------
# Public value types
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentType:
    """One row of the agent type table (`envs/agent_types.toml`)."""

    name: str
    sprite: int = 1
    """Sprite bit mask drawn in RGB observations (1 dot, 2 plus arms, 4 diagonals)."""
    max_health: float = 1.0
    """Health cap; agents start at full health."""
    detection_range: float = 1.0
    """Multiplier of the detection radius (as observer)."""
    damage_range: float = 1.0
    """Multiplier of the damage radius (as shooter); 0 means it never shoots."""
    thrust: float = 1.0
    """Throttle multiplier."""
    idle_reward: float = 0.0
    """Constant reward earned every step the agent starts alive."""

    def __post_init__(self) -> None:
        where = f"agent type {self.name!r}"
        sprite = self.sprite
        if isinstance(sprite, bool) or not isinstance(sprite, int):
            raise TypeError(
                f"{where}: sprite must be an integer bit mask in 0..7, "
                f"got {sprite!r} ({type(sprite).__name__})"
            )
        if not 0 <= sprite <= 7:
            raise ValueError(f"{where}: sprite must be in 0..7, got {sprite}")
        for name in ("max_health", "detection_range", "damage_range", "thrust", "idle_reward"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(
                    f"{where}: {name} must be a number, got {value!r} ({type(value).__name__})"
                )
            if not math.isfinite(value):
                raise ValueError(f"{where}: {name} must be finite, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.max_health <= 0:
            raise ValueError(f"{where}: max_health must be > 0, got {self.max_health}")
        for name in ("detection_range", "damage_range", "thrust"):
            if getattr(self, name) < 0:
                raise ValueError(f"{where}: {name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class ScenarioSpec:
    """Identity of a resolved scenario: its name, data version and content hash.

    `hash` is `scenario_hash(config)` of the exact config the environment runs, overrides
    included, so two environments with equal hashes play the same game.
    """

    name: str
    version: int
    hash: str


class ScenarioName(NamedTuple):
    """A scenario name split by the grammar: the base and its suffixes (none, or one per group)."""

    base: str
    suffixes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "_".join((self.base, *self.suffixes))


# ------------------------------------------------------------------------------------------
# Name grammar
# ------------------------------------------------------------------------------------------


@cache
def _suffix_groups() -> dict[str, dict[str, dict[str, Any]]]:
    """{group: {suffix: EnvConfig fields}} in name order, from `envs/scenarios.toml`."""
    groups = read_catalog_toml("scenarios.toml")["suffixes"]
    for group, suffixes in groups.items():
        for suffix, fields in suffixes.items():
            _check_config_keys(fields, f"suffix _{suffix} ({group}) in scenarios.toml")
    return groups


def parse_name(name: str) -> ScenarioName:
    """Split `name` into base and suffixes: `<base>` or `<base>_<s1>_<s2>_<s3>_<s4>`.

    A name whose last parts are not one valid suffix per group, in group order, is all base.
    `str(parse_name(name)) == name` for every name.
    """
    groups = list(_suffix_groups().values())
    parts = str(name).split("_")
    tail = parts[len(parts) - len(groups) :]
    if len(parts) > len(groups) and all(s in g for s, g in zip(tail, groups, strict=True)):
        return ScenarioName("_".join(parts[: -len(groups)]), tuple(tail))
    return ScenarioName(str(name))


def _suffix_fields(suffixes: tuple[str, ...]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for suffix, group in zip(suffixes, _suffix_groups().values(), strict=False):
        fields.update(group[suffix])
    return fields


# ------------------------------------------------------------------------------------------
# Catalogue loading
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Catalog:
    """Parsed scenario data of one source (the built-in catalogue or a user file)."""

    source: str  # for error messages
    types: dict[str, AgentType]
    presets: dict[str, dict[str, Any]]
    maps: dict[str, MapSpec]  # maps defined by the source (not the built-in ones)
    scenarios: dict[str, dict[str, Any]]  # scenarios and distributions (tables with a draw)
    generators: dict[str, ProcMaps] = dataclasses.field(default_factory=dict)  # likewise


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{where} must be a table, got {value!r}")
    return value


def _check_table_keys(table: Any, allowed: Collection[str], where: str) -> dict[str, Any]:
    for key in _table(table, where):
        if key not in allowed:
            raise ValueError(
                f"{where}: unknown key {key!r}; expected one of {list(allowed)} "
                f"(closest: {closest(key, allowed, 1)[0]!r})"
            )
    return table


def _parse_types(table: Any, where: str, existing: Collection[str] = ()) -> dict[str, AgentType]:
    fields = tuple(_TYPE_TO_CONFIG)
    types: dict[str, AgentType] = {}
    for name, row in _table(table, where).items():
        if name in existing:
            raise ValueError(f"{where}: agent type {name!r} is built in; choose another name")
        _check_table_keys(row, fields, f"{where}: agent type {name!r}")
        try:
            types[name] = AgentType(name=name, **row)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None
    return types


def _parse_maps(table: Any, where: str) -> dict[str, MapSpec]:
    fields = [f.name for f in dataclasses.fields(MapSpec) if f.name != "name"]
    builtin = set(map_set_names())
    maps = {}
    for name, row in _table(table, where).items():
        if name in builtin:
            raise ValueError(f"{where}: map {name!r} is built in; choose another name")
        _check_table_keys(row, fields, f"{where}: map {name!r}")
        try:
            maps[name] = MapSpec(name=name, **row)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None
    return maps


def _parse_generators(table: Any, where: str) -> dict[str, ProcMaps]:
    fields = [f.name for f in dataclasses.fields(ProcMaps) if f.name != "name"]
    taken = {*map_set_names(), *generator_names()}
    generators = {}
    for name, row in _table(table, where).items():
        if name in taken:
            raise ValueError(f"{where}: generator {name!r} is built in; choose another name")
        _check_table_keys(row, fields, f"{where}: generator {name!r}")
        row = {k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}
        try:
            generators[name] = ProcMaps(name=name, **row)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None
    return generators


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
# Validation of EnvConfig keyword sets
# ------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------
# The builder
# ------------------------------------------------------------------------------------------


class ScenarioBuilder:
    """Builds a scenario in code; every catalogue and file scenario is built by one.

    Agents keep the order of the calls. Each method returns the builder, so calls chain, and
    `gigastep.make(builder)` builds its environment:

        config = (ScenarioBuilder("duel")
               .add_type(0, "default").add_type(1, "super")
               .set_map("center_block", size=(20, 20))
               .set(obs_type="vector")
               .config())

    A new builder has no agents and the `"empty"` map set on a 10 x 10 world.
    """

    def __init__(self, name: str = "custom", version: int = 1):
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise TypeError(f"version must be an integer >= 1, got {version!r}")
        self.name = str(name)
        self.version = version
        self._types: dict[str, AgentType] = agent_types()
        self._agents: list[tuple[int, AgentType]] = []
        self._map_set = "empty"
        self._maps: tuple[MapSpec, ...] = ()  # () = the built-in set named by _map_set
        self._generator: ProcMaps | None = None  # draws the map at each reset when set
        self._size: tuple[float, float] | None = None
        self._env: dict[str, Any] = {}
        self._where = f"scenario {self.name!r}"  # prefix of error messages

    # --- agents ---------------------------------------------------------------------------
    def define_type(self, name: str, **fields: Any) -> ScenarioBuilder:
        """Add a row to this builder's type table (fields of `AgentType`)."""
        if name in self._types:
            raise ValueError(f"agent type {name!r} already exists")
        _check_table_keys(fields, tuple(_TYPE_TO_CONFIG), f"agent type {name!r}")
        self._types[name] = AgentType(name=name, **fields)
        return self

    def add_type(self, team: int, type_name: str, count: int = 1) -> ScenarioBuilder:
        """Append `count` agents of a named type to `team` (0 or 1)."""
        if type_name not in self._types:
            raise ValueError(
                f"unknown agent type {type_name!r}; closest: {closest(str(type_name), self._types)}"
                f" (known: {', '.join(self._types)})"
            )
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"count must be an integer >= 0, got {count!r}")
        if count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        team = check_team(team)
        self._agents += [(team, self._types[type_name])] * count
        return self

    def add(
        self,
        team: int = 0,
        sprite: int = 1,
        max_health: float = 1.0,
        range: float = 1.0,
        damage_range: float = 1.0,
        thrust: float = 1.0,
        idle_reward: float = 0.0,
        *,
        type_name: str = "custom",
    ) -> ScenarioBuilder:
        """Append one agent with the given properties (`range` sets its detection range)."""
        agent = AgentType(
            name=type_name,
            sprite=sprite,
            max_health=max_health,
            detection_range=range,
            damage_range=damage_range,
            thrust=thrust,
            idle_reward=idle_reward,
        )
        self._agents.append((check_team(team), agent))
        return self

    # --- maps -----------------------------------------------------------------------------
    def set_map(
        self, name: str, size: tuple[float, float] | list[float] | None = None, **map_fields: Any
    ) -> ScenarioBuilder:
        """Choose the maps: `"all"`, `"empty"`, a built-in map, a built-in map generator
        (`"procgen_dense"`: a new map drawn at every reset), or a new map.

        With `map_fields` (`boxes`, `start_team0`, ... of `MapSpec`, in 10 x 10 reference
        coordinates) it defines a new map called `name`. `size=(limit_x, limit_y)` sets the
        world size that the maps are scaled to.
        """
        self._generator = None
        if map_fields:
            self._map_set, self._maps = "empty", ()
            self.add_map(MapSpec(name=name, **map_fields))
        elif name in map_set_names() or name in generator_names():
            self._map_set, self._maps = name, ()
        else:
            names = (*map_set_names(), *generator_names())
            raise ValueError(
                f"unknown map {name!r}; expected one of {list(names)} "
                f"(closest: {closest(str(name), names)}), "
                "or give boxes=... to define a new map"
            )
        if size is not None:
            self.set_map_size(size)
        return self

    def set_map_generator(self, generator: ProcMaps) -> ScenarioBuilder:
        """Draw a new map at every reset with `generator` (a `gigastep.ProcMaps`), instead of
        choosing among maps; `set_map` or `add_map` go back to maps."""
        if not isinstance(generator, ProcMaps):
            raise TypeError(f"set_map_generator takes a gigastep.ProcMaps, got {generator!r}")
        self._generator = generator
        self._map_set, self._maps = generator.name, ()
        return self

    def add_map(self, spec: MapSpec) -> ScenarioBuilder:
        """Add a map to the set drawn at reset (replacing a built-in selection)."""
        self._generator = None
        if not isinstance(spec, MapSpec):
            raise TypeError(f"add_map takes a gigastep.MapSpec, got {spec!r}")
        if spec.name in map_set_names() and spec != builtin_maps().get(spec.name):
            raise ValueError(f"map {spec.name!r} is built in; give the new map another name")
        self._maps = (*self._maps, spec)
        self._map_set = "+".join(m.name for m in self._maps)
        return self

    def set_map_size(self, size: tuple[float, float] | list[float]) -> ScenarioBuilder:
        """Set the world to `size = (limit_x, limit_y)`."""
        if (
            not isinstance(size, (tuple, list))
            or len(size) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in size)
        ):
            raise TypeError(f"map size must be two numbers [limit_x, limit_y], got {size!r}")
        self._size = (float(size[0]), float(size[1]))
        return self

    # --- everything else ------------------------------------------------------------------
    def set(self, **env_overrides: Any) -> ScenarioBuilder:
        """Set EnvConfig fields (other than agents, maps and world size) for this scenario."""
        self._env.update(_check_env_table(env_overrides, self._where))
        return self

    def preset(self, name: str) -> ScenarioBuilder:
        """Apply a catalogue preset (`[presets.NAME]` of scenarios.toml), e.g. "waypoint"."""
        presets = _builtin_catalog().presets
        if name not in presets:
            raise ValueError(f"unknown preset {name!r}; closest: {closest(str(name), presets)}")
        return self.set(**presets[name])

    def config(self, **overrides: Any) -> EnvConfig:
        """The scenario's `EnvConfig`, with `overrides` (any EnvConfig field) applied last."""
        if not self._agents:
            raise ValueError(f"{self._where} has no agents; call add or add_type")
        fields: dict[str, Any] = {
            "teams": tuple(team for team, _ in self._agents),
            "type_names": tuple(t.name for _, t in self._agents),
            "map_set": self._map_set,
            "maps": self._maps,
            "map_generator": self._generator,
        }
        for type_field, config_field in _TYPE_TO_CONFIG.items():
            fields[config_field] = tuple(getattr(t, type_field) for _, t in self._agents)
        if self._size is not None:
            fields["limit_x"], fields["limit_y"] = self._size
        fields.update(self._env)
        try:
            config = EnvConfig(**fields)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{self._where}: {err}") from None
        return _apply(config, overrides, self._where)

    def spec(self, **overrides: Any) -> ScenarioSpec:
        """Name, version and hash of the config that `make(**overrides)` builds."""
        return ScenarioSpec(self.name, self.version, scenario_hash(self.config(**overrides)))

    def make(self, **overrides: Any) -> Any:
        """Deprecated (removed in 0.3): use `gigastep.make(builder, **overrides)`."""
        import warnings

        # The scenarios layer builds no environments; this edge up to the registry is the
        # deprecated path, listed in tests/architecture/test_imports.py until it goes.
        from gigastep.registry import make

        warnings.warn(
            "ScenarioBuilder.make() is deprecated; use gigastep.make(builder, **overrides)",
            DeprecationWarning,
            stacklevel=2,
        )
        return make(self, **overrides)


# ------------------------------------------------------------------------------------------
# Public functions
# ------------------------------------------------------------------------------------------


def agent_types() -> dict[str, AgentType]:
    """The built-in agent types by name, in catalogue order."""
    return dict(_builtin_catalog().types)


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
