"""`ScenarioBuilder`: a scenario assembled in code (agents by type, maps, settings) into an
`EnvConfig`, the same way the catalogue's TOML tables are."""

from __future__ import annotations

from typing import Any

from gigastep._util.checks import check_team
from gigastep.game.maps import builtin_maps, map_set_names
from gigastep.game.procmaps import ProcMaps, generator_names
from gigastep.game.types import EnvConfig, MapSpec, closest
from gigastep.scenarios.checks import _TYPE_TO_CONFIG, _apply, _check_env_table, _check_table_keys
from gigastep.scenarios.files import _builtin_catalog, agent_types
from gigastep.scenarios.hashing import scenario_hash
from gigastep.scenarios.names import AgentType, ScenarioSpec


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
