"""Static configuration and traced state of the Gigastep game.

`EnvConfig` is frozen and hashable: it is the only static argument of the compiled functions and
holds everything that decides shapes or is constant for an environment (agent counts, the
per-agent type tables, maps, flags, physics constants, reward weights, resolution).
`EnvState` holds arrays only, so it is a pytree that `jit`, `vmap`, `pmap` and `lax.scan` carry.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import chex
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from gigastep._util.checks import closest, float_tuple
from gigastep._util.pytree import PytreeData, pytree_dataclass
from gigastep.game.maps import MapSpec, map_set, map_set_names
from gigastep.game.procmaps import ProcMaps, builtin_generators, generator_names
from gigastep.game.rosters import TeamDraw

__all__ = [
    "OBS_TYPES",
    "PER_AGENT_FIELDS",
    "AgentState",
    "EnvConfig",
    "EnvState",
    "EpisodeState",
    "MapSpec",
    "ProcMaps",
    "StepInfo",
    "StepNoise",
    "TeamDraw",
    "check_fields",
    "closest",
]

OBS_TYPES = ("vector", "rgb", "rgb_vector", "entity")

Pair = tuple[float, float]

VectorLike: TypeAlias = "ArrayLike | Sequence[float]"
"""Per-agent values as an array, a scalar (broadcast) or a sequence of numbers."""

Observation: TypeAlias = "jax.Array | tuple[jax.Array, jax.Array]"
"""The observations of one game (or a batch): (n, L) float32 for "vector", (n, res_x, res_y, 3)
uint8 for "rgb", the pair (rgb, vector) for "rgb_vector", (n, entity_size) float32 for "entity"
(with any leading batch axes)."""


# Keyword names of the 2023 library that this project renamed (old name -> new name).
RENAMED_FIELDS = {
    "range": "detection_range",
    "use_stochastic_obs": "stochastic_obs",
    "use_stochastic_comm": "stochastic_comm",
    "max_agent_in_vec_obs": "max_agents_in_vec_obs",
    "min_tracking_time": "min_tracking_steps",
    "max_tracking_time": "max_tracking_steps",
    "very_close_cone_depth": "very_close_depth",
    "per_agent_sprites": "sprites",
    "per_agent_thrust": "thrust",
    "per_agent_max_health": "max_health",
    "per_agent_range": "detection_range",
    "per_agent_damage_range": "damage_range",
    "per_agent_team": "teams",
    "per_agent_idle_reward": "idle_reward",
    "n_agents": "teams",
}


def check_fields(names: Iterable[str], where: str = "") -> None:
    """Raise a TypeError for the first name in `names` that is not an `EnvConfig` field.

    The message names the field, and either its new name (a keyword of the 2023 library that
    was renamed, `RENAMED_FIELDS`) or at most three close fields. `where` prefixes it.
    """
    valid = EnvConfig.__dataclass_fields__
    for key in names:
        if key in valid:
            continue
        prefix = f"{where}: " if where else ""
        if key in RENAMED_FIELDS:
            hint = f"the 2023 name {key!r} is called {RENAMED_FIELDS[key]!r} in this library"
        else:
            # the fields that really look alike (difflib's 0.6 cutoff), else the three nearest
            near = difflib.get_close_matches(str(key), valid, n=3) or closest(str(key), valid)
            hint = "closest: " + ", ".join(repr(c) for c in near)
        raise TypeError(
            f"{prefix}unknown EnvConfig field {key!r} ({hint}); "
            f"help(gigastep.EnvConfig) documents all {len(valid)} fields"
        )


# The per-agent type table of `EnvConfig`: one entry per agent each (indexed by agent).
PER_AGENT_FIELDS = (
    "sprites",
    "max_health",
    "detection_range",
    "damage_range",
    "thrust",
    "idle_reward",
)
_PER_AGENT_DEFAULT = {
    "sprites": 1,
    "max_health": 1.0,
    "detection_range": 1.0,
    "damage_range": 1.0,
    "thrust": 1.0,
    "idle_reward": 0.0,
}
MAX_MAGNITUDE = 1e6
"""The largest magnitude of a float field (and of a per-agent number): squares, products and
sums of several such values over an episode stay far inside float32 (about 3.4e38)."""
MIN_POSITIVE = 1e-6
"""The smallest value of a field that must be positive (world size, time step, cone depth,
waypoint size): quotients such as limit / dt stay inside float32, and no such value rounds to
zero in float32 (1e-300 does)."""
INT32_MAX = 2**31 - 1
"""The largest step count (`max_episode_length`, the tracking steps, `reset_max_rounds`): the
counters they are compared with are int32."""
RESOLUTION_MAX = 4096
"""The largest RGB image side (`resolution_x`, `resolution_y`)."""
ENTITY_FEATURES = 25
"""Features per row of the entity observation (`gigastep.game.observations.entity`)."""
ENTITY_SLOTS_MAX = 1024
"""The most ally or enemy slots of the entity observation (`entity_max_allies`,
`entity_max_enemies`)."""
NON_NEGATIVE_DYNAMICS = (
    "heading_rate",
    "dive_rate",
    "dive_speed_exchange",
    "throttle_rate",
    "gravity",
)
"""Dynamics constants that must be >= 0 (a negative one reverses a control or makes the speed
exchange produce a negative squared speed)."""
REWARD_FIELDS = (
    "reward_game_won",
    "reward_defeat_one_opponent",
    "reward_detection",
    "reward_damage",
    "reward_idle",
    "reward_agent_disabled",
    "reward_collision_agent",
    "reward_collision_obstacle",
    "reward_hit_waypoint",
)


@dataclass(frozen=True)
class EnvConfig:
    """Everything static about one Gigastep environment.

    Per-agent tables are tuples with one entry per agent (team 0 agents conventionally first).
    Lists are accepted and converted to tuples; an empty per-agent table means "the default
    for every agent". Build one directly, or through `gigastep.make` / `ScenarioBuilder`.
    """

    # --- agents --------------------------------------------------------------------------
    teams: tuple[int, ...] = (0,) * 5 + (1,) * 5
    """Team id (0 or 1) of each agent; its length is the number of agents."""
    sprites: tuple[int, ...] = ()
    """Sprite bit mask of each agent (1 dot, 2 plus arms, 4 diagonals)."""
    max_health: tuple[float, ...] = ()
    """Health cap of each agent; agents start at full health."""
    detection_range: tuple[float, ...] = ()
    """Multiplier of the detection radius of each agent (as observer)."""
    damage_range: tuple[float, ...] = ()
    """Multiplier of the damage radius of each agent (as shooter); 0 means it never shoots."""
    thrust: tuple[float, ...] = ()
    """Throttle multiplier of each agent."""
    idle_reward: tuple[float, ...] = ()
    """Constant reward each agent earns every step it starts alive (hiders)."""
    type_names: tuple[str, ...] = ()
    """Agent type name of each agent (informational: printed by `gigastep info`)."""

    # --- world ---------------------------------------------------------------------------
    limit_x: float = 10.0
    """Width of the world; agents live in [0, limit_x] x [0, limit_y]."""
    limit_y: float = 10.0
    """Height of the world."""
    z_max: float = 10.0
    """Ceiling of the altitude range [0, z_max]."""
    maps: tuple[MapSpec, ...] = ()
    """Maps drawn uniformly at each reset (empty tuple: the built-in set named by `map_set`)."""
    map_set: str = "empty"
    """Name of the map set (`"all"`, `"empty"`, a built-in map name, a built-in generator
    name such as `"procgen_dense"`, or a custom name)."""
    map_generator: ProcMaps | None = None
    """Procedural maps: a new layout drawn at every reset (replaces `maps`); None: the maps."""

    # --- dynamics ------------------------------------------------------------------------
    dt: float = 0.1
    """Seconds per step."""
    heading_rate: float = 4.0
    """Turn rate at full heading input, rad/s."""
    dive_rate: float = 5.0
    """Climb/dive rate at full dive input, altitude units/s."""
    dive_speed_exchange: float = 0.5
    """Fraction of g converting altitude lost into squared speed gained."""
    throttle_rate: float = 1.5
    """Acceleration at full throttle (times the agent's thrust), units/s^2."""
    min_speed: float = 1.3
    """Speed floor."""
    gravity: float = 9.81
    """Gravitational acceleration used by the speed exchange."""
    drag: float = 0.4
    """Quadratic drag coefficient."""

    # --- sensing and combat --------------------------------------------------------------
    very_close_depth: float = 1.0
    """Enemies closer than this are always detected, whatever the angle."""
    cone_depth: float = 3.0
    """Detection radius (times the observer's detection_range)."""
    cone_angle: float = 0.75 * math.pi
    """Detection half-angle, radians (strict)."""
    damage_cone_depth: float = 2.05
    """Damage radius (times the shooter's damage_range)."""
    damage_cone_angle: float = 0.25 * math.pi
    """Damage half-angle, radians (strict)."""
    damage_per_second: float = 1.0
    """Health lost per second per unit of tracking damage."""
    min_tracking_steps: int = 3
    """A lock deals damage once it has lasted more than this many consecutive steps."""
    max_tracking_steps: int = 10
    """Lock length (steps) at which damage per step stops growing."""
    healing_per_second: float = 0.1
    """Health regained per second by alive agents."""
    communication_range: float = 8.0
    """Range of stochastic team communication, world units."""
    stochastic_obs: bool = True
    """Probabilistic detection inside the cone (else deterministic within cone and depth)."""
    stochastic_comm: bool = True
    """Probabilistic sharing of detections within a team (else the team shares everything)."""
    collision_range: float = 0.4
    """Radius of the agent-agent collision cylinder (0 disables collisions)."""
    collision_altitude: float = 0.5
    """Half-height of the collision cylinder."""

    # --- waypoints -----------------------------------------------------------------------
    enable_waypoints: bool = False
    """Waypoint mechanics, their observation features and drawing."""
    waypoint_size: float = 0.6
    """Side length of the square waypoint, world units."""
    waypoint_spawn_prob: float = 0.05
    """Chance per step that a waypoint appears while none is active."""
    waypoint_lifetime: Pair = (5.0, 10.0)
    """Lifetime of a new waypoint, seconds, drawn uniformly in [lo, hi)."""

    # --- rewards (a term applies whenever its weight is non-zero) -------------------------
    reward_game_won: float = 10.0
    """Paid once to each survivor of the team that eliminates the other."""
    reward_defeat_one_opponent: float = 100.0
    """Shared by survivors per enemy killed (minus per teammate lost)."""
    reward_detection: float = 0.0
    """Weight of (0.5 x enemies detected - 0.2 x detected by) x dt."""
    reward_damage: float = 0.0
    """Weight of (damage dealt - 0.5 x damage taken) x dt."""
    reward_idle: float = 0.0
    """Penalty 0.01 x dt per step alive."""
    reward_agent_disabled: float = 0.0
    """Penalty on the step an agent dies."""
    reward_collision_agent: float = 0.0
    """Penalty for an agent-agent collision."""
    reward_collision_obstacle: float = 0.0
    """Penalty for dying by leaving the map or hitting a box."""
    reward_hit_waypoint: float = 0.0
    """Reward for collecting a waypoint."""
    divide_reward_by_team_size: bool = True
    """Divide each agent's reward by the size of its own team."""

    # --- interface -----------------------------------------------------------------------
    obs_type: str = "rgb"
    """"vector", "rgb", "rgb_vector" or "entity"."""
    discrete_actions: bool = False
    """Discrete(27) lookup-table actions instead of continuous [-1, 1]^3."""
    resolution_x: int = 84
    """RGB image size along world x (first image axis)."""
    resolution_y: int = 84
    """RGB image size along world y (second image axis)."""
    max_agents_in_vec_obs: int = 15
    """Rows of the vector observation (ego first, then nearest seen agents)."""
    entity_max_allies: int = 8
    """Ally slots of the entity observation (nearest seen teammates; 0..1024)."""
    entity_max_enemies: int = 8
    """Enemy slots of the entity observation (nearest seen opponents; 0..1024)."""
    max_episode_length: int | None = 500
    """Time limit in steps (the step reaching it is truncated); None for no limit."""
    episode_ends_one_team_dead: bool = True
    """End the episode when either team is eliminated (else when both are)."""
    reset_max_rounds: int = 100
    """Most redraws of conflicting start positions at reset (the loop stops as soon as none
    conflicts; 10 left 9% of identical_20_vs_5's games starting with a close pair)."""

    # --- team compositions ---------------------------------------------------------------
    team_draw: TeamDraw | None = None
    """Draw the team compositions at each reset from the agents above as a roster (sizes and
    type weights per team, `gigastep.game.rosters`); agents left out are absent for the
    episode (rules: "Absent agents"). None: every agent plays every episode."""

    def __post_init__(self) -> None:
        teams = tuple(self.teams)
        n = len(teams)
        if n < 1:
            raise ValueError(f"an environment needs at least 1 agent, got teams={self.teams!r}")
        bad = [t for t in teams if t not in (0, 1)]
        if bad:
            raise ValueError(f"teams must contain only 0 and 1, got {sorted(set(bad))}")
        _set(self, "teams", tuple(int(t) for t in teams))
        for name in PER_AGENT_FIELDS:
            values = tuple(getattr(self, name))
            if not values:
                values = (_PER_AGENT_DEFAULT[name],) * n
            if len(values) != n:
                raise ValueError(
                    f"{name} has {len(values)} entries but there are {n} agents (len(teams))"
                )
            if name == "sprites" and any(
                isinstance(v, bool) or not float(v).is_integer()
                for v in values
                if isinstance(v, (int, float))
            ):
                raise TypeError(f"sprites must hold integer bit masks 0..7, got {values!r}")
            cast = int if name == "sprites" else float
            try:
                values = tuple(cast(v) for v in values)
            except (TypeError, ValueError, OverflowError):
                raise TypeError(f"{name} must hold numbers, got {values!r}") from None
            if not all(math.isfinite(v) for v in values):
                raise ValueError(f"{name} must be finite, got {values!r}")
            if any(abs(v) > MAX_MAGNITUDE for v in values):
                raise ValueError(
                    f"{name} must be within [-{MAX_MAGNITUDE:g}, {MAX_MAGNITUDE:g}] (float32 "
                    f"arithmetic on larger values overflows), got {values!r}"
                )
            _set(self, name, values)
        if any(h <= 0 for h in self.max_health):
            raise ValueError(f"max_health must be > 0 for every agent, got {self.max_health}")
        for name in ("detection_range", "damage_range", "thrust"):
            if any(v < 0 for v in getattr(self, name)):
                raise ValueError(f"{name} must be >= 0 for every agent, got {getattr(self, name)}")
        if any(not 0 <= s <= 7 for s in self.sprites):
            raise ValueError(f"sprites are bit masks in 0..7, got {self.sprites}")
        if self.type_names and len(self.type_names) != n:
            raise ValueError(f"type_names has {len(self.type_names)} entries for {n} agents")
        _set(self, "type_names", tuple(str(t) for t in self.type_names))
        if self.obs_type not in OBS_TYPES:
            raise ValueError(
                f"obs_type must be one of {OBS_TYPES}, got {self.obs_type!r}"
                f" (closest: {closest(str(self.obs_type), OBS_TYPES, 1)[0]!r})"
            )
        self._check_numbers()
        generator = self.map_generator
        if generator is None and not self.maps and self.map_set in generator_names():
            generator = builtin_generators()[self.map_set]
        if isinstance(generator, dict):  # a TOML table: a built-in generator's name and changes
            generator = _generator_from_table(generator)
        if generator is not None:
            if not isinstance(generator, ProcMaps):
                raise TypeError(
                    f"map_generator must be a gigastep.ProcMaps or None, got {generator!r}"
                )
            _set(self, "map_generator", generator)
            _set(self, "map_set", generator.name)
            _set(self, "maps", (generator.start_map(),))
        elif not self.maps:
            if self.map_set not in map_set_names():
                names = (*map_set_names(), *generator_names())
                raise ValueError(
                    f"unknown map set {self.map_set!r}; expected one of {list(names)} "
                    f"(closest: {closest(str(self.map_set), names)})"
                )
            _set(self, "maps", map_set(self.map_set))
        else:
            maps = tuple(self.maps)
            if not all(isinstance(m, MapSpec) for m in maps):
                raise TypeError("maps must be a tuple of gigastep.MapSpec")
            _set(self, "maps", maps)
        high = [m for m in self.maps if m.height[1] > self.z_max]
        if high:
            raise ValueError(
                f"map {high[0].name!r} starts agents at heights {high[0].height}, above "
                f"z_max={self.z_max}; lower the map's height or raise z_max"
            )
        lifetime = float_tuple(self.waypoint_lifetime, 2, "waypoint_lifetime")
        if not 0.0 <= lifetime[0] <= lifetime[1] <= MAX_MAGNITUDE:
            raise ValueError(
                f"waypoint_lifetime (lo, hi) must satisfy 0 <= lo <= hi <= {MAX_MAGNITUDE:g} "
                f"seconds, got {self.waypoint_lifetime!r}"
            )
        _set(self, "waypoint_lifetime", lifetime)
        if isinstance(self.team_draw, dict):
            _set(self, "team_draw", TeamDraw(**self.team_draw))
        if self.team_draw is not None:
            if not isinstance(self.team_draw, TeamDraw):
                raise TypeError(
                    f"team_draw must be a gigastep.TeamDraw or None, got {self.team_draw!r}"
                )
            self.team_draw.check_roster(self.teams, self.type_names)

    def _check_numbers(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("float", "float | None") and isinstance(value, (int, float)):
                if isinstance(value, bool) or not math.isfinite(value):
                    raise ValueError(f"{f.name} must be a finite number, got {value!r}")
                if abs(value) > MAX_MAGNITUDE:
                    raise ValueError(
                        f"{f.name} must be within [-{MAX_MAGNITUDE:g}, {MAX_MAGNITUDE:g}] (float32 "
                        f"arithmetic on larger values overflows), got {value!r}"
                    )
                _set(self, f.name, float(value))
            elif f.type == "bool" and not isinstance(value, bool):
                raise TypeError(f"{f.name} must be True or False, got {value!r}")
            elif f.type in ("int", "int | None") and value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"{f.name} must be an integer, got {value!r}")
                if value > INT32_MAX:
                    raise ValueError(
                        f"{f.name} must be at most 2**31 - 1 = {INT32_MAX} (an int32 count), "
                        f"got {value}"
                    )
            elif f.type == "float" and not isinstance(value, (int, float)):
                raise TypeError(f"{f.name} must be a number, got {value!r}")
        positive = ("limit_x", "limit_y", "z_max", "dt", "cone_depth", "waypoint_size")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
            if getattr(self, name) < MIN_POSITIVE:
                raise ValueError(
                    f"{name} must be at least {MIN_POSITIVE:g} (smaller positive values round "
                    f"to zero or overflow a quotient in float32), got {getattr(self, name)}"
                )
        non_negative = (
            "very_close_depth",
            "damage_cone_depth",
            "damage_per_second",
            "healing_per_second",
            "communication_range",
            "collision_range",
            "collision_altitude",
            "min_speed",
            "cone_angle",
            "damage_cone_angle",
            "drag",
            "min_tracking_steps",
        )
        for name in (*non_negative, *NON_NEGATIVE_DYNAMICS):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_tracking_steps < self.min_tracking_steps:
            raise ValueError(
                f"max_tracking_steps ({self.max_tracking_steps}) must be >= "
                f"min_tracking_steps ({self.min_tracking_steps})"
            )
        if not (
            8 <= self.resolution_x <= RESOLUTION_MAX and 8 <= self.resolution_y <= RESOLUTION_MAX
        ):
            raise ValueError(
                f"resolution must be at least 8 x 8 and at most {RESOLUTION_MAX} x "
                f"{RESOLUTION_MAX}, got {self.resolution_x} x {self.resolution_y}"
            )
        if self.max_agents_in_vec_obs < 1:
            raise ValueError(
                f"max_agents_in_vec_obs must be >= 1, got {self.max_agents_in_vec_obs}"
            )
        for name in ("entity_max_allies", "entity_max_enemies"):
            if not 0 <= getattr(self, name) <= ENTITY_SLOTS_MAX:
                raise ValueError(
                    f"{name} must be an integer 0..{ENTITY_SLOTS_MAX} (slots of the entity "
                    f"observation), got {getattr(self, name)}"
                )
        if self.max_episode_length is not None and self.max_episode_length < 1:
            raise ValueError(
                f"max_episode_length must be >= 1 or None, got {self.max_episode_length}"
            )
        self._check_speed_bound()
        if not 0.0 <= self.waypoint_spawn_prob <= 1.0:
            raise ValueError(
                f"waypoint_spawn_prob must be in [0, 1], got {self.waypoint_spawn_prob}"
            )
        if self.reset_max_rounds < 0:
            raise ValueError(f"reset_max_rounds must be >= 0, got {self.reset_max_rounds}")

    def _check_speed_bound(self) -> None:
        """Refuse dynamics constants whose speed update (`gigastep.game.dynamics`) leaves
        float32: the explicit drag step v2 = v1 - dt drag v1^2 keeps |v2| <= v1 only while
        dt drag v1 <= 2 (beyond, |v2| grows each step), where v1 is at most the speed at
        which throttle and drag balance (plus a full dive); without drag the speed grows by
        dt throttle_rate thrust each step for max_episode_length steps, and its square must
        stay finite."""
        gain = self.dt * self.throttle_rate * max(self.thrust)  # speed gained per step
        dive = math.sqrt(self.dive_speed_exchange * self.gravity * self.z_max)
        start = max(self.min_speed, 1.0) + dive  # reset speed (1) or the floor, plus a dive
        if self.drag > 0:
            balance = math.sqrt(self.throttle_rate * max(self.thrust) / self.drag)
            v1 = max(start, balance + dive) + gain
            if self.dt * self.drag * v1 > 2.0:
                raise ValueError(
                    f"dt ({self.dt:g}) x drag ({self.drag:g}) x the top speed ({v1:.3g}: "
                    f"throttle_rate, thrust, drag, dive_speed_exchange x gravity x z_max) is "
                    f"{self.dt * self.drag * v1:.3g}; it must be <= 2, or the speed update "
                    f"overshoots, grows every step and overflows float32 (lower dt or drag)"
                )
        else:
            steps = self.max_episode_length or INT32_MAX
            if start + steps * gain > 1e15:
                raise ValueError(
                    f"without drag the speed grows by dt x throttle_rate x thrust = {gain:.3g} "
                    f"per step, reaching {start + steps * gain:.3g} in max_episode_length "
                    f"({self.max_episode_length}) steps; it must stay below 1e15 (its square "
                    f"overflows float32): set drag > 0 or a shorter max_episode_length"
                )

    # --- derived quantities ---------------------------------------------------------------
    @property
    def n_agents(self) -> int:
        return len(self.teams)

    @property
    def team_sizes(self) -> tuple[int, int]:
        """Number of agents in team 0 and in team 1."""
        n1 = sum(self.teams)
        return (self.n_agents - n1, n1)

    @property
    def vec_agents(self) -> int:
        """Rows M of the vector observation: min(n_agents, max_agents_in_vec_obs)."""
        return min(self.n_agents, self.max_agents_in_vec_obs)

    @property
    def max_boxes(self) -> int:
        """Boxes per map after zero padding (the largest box count in the map set, or the
        generator's slots)."""
        if self.map_generator is not None:
            return self.map_generator.slots
        return max(len(m.boxes) for m in self.maps)

    @property
    def vector_size(self) -> int:
        """Length L of the vector observation: 9 M + 5 [waypoints] + 4 B."""
        return 9 * self.vec_agents + 5 * int(self.enable_waypoints) + 4 * self.max_boxes

    @property
    def entity_rows(self) -> int:
        """Rows G of the entity observation: 1 (self) + allies + enemies + box slots
        + 1 if waypoints are enabled."""
        return (
            1
            + self.entity_max_allies
            + self.entity_max_enemies
            + self.max_boxes
            + int(self.enable_waypoints)
        )

    @property
    def entity_size(self) -> int:
        """Length of the entity observation: G rows of `ENTITY_FEATURES` (25) features."""
        return self.entity_rows * ENTITY_FEATURES

    @property
    def resolution(self) -> tuple[int, int]:
        return (self.resolution_x, self.resolution_y)

    def replace(self, **changes: Any) -> EnvConfig:
        """A copy with some fields changed (validated like a new config)."""
        check_fields(changes)
        if "map_set" in changes and "maps" not in changes:
            changes["maps"] = ()
        if "map_set" in changes and "map_generator" not in changes:
            changes["map_generator"] = None  # a generator's name resolves to it again
        if "map_generator" in changes:
            changes.setdefault("maps", ())
            if changes["map_generator"] is None and self.map_generator is not None:
                changes.setdefault("map_set", "empty")
        return dataclasses.replace(self, **changes)


def _generator_from_table(table: dict[str, Any]) -> ProcMaps:
    """A `ProcMaps` from a table: `base` (a built-in generator's name, default the defaults)
    and any `ProcMaps` fields that change it, e.g. {"base": "procgen_dense", "seeds": [0, 16]}."""
    fields = dict(table)
    base = fields.pop("base", None)
    known = builtin_generators()
    if base is not None and base not in known:
        raise ValueError(
            f"map_generator: unknown base generator {base!r}; expected one of {list(known)} "
            f"(closest: {closest(str(base), known)})"
        )
    names = [f.name for f in dataclasses.fields(ProcMaps)]
    for key in fields:
        if key not in names:
            raise ValueError(
                f"map_generator: unknown field {key!r}; expected 'base' or one of {names} "
                f"(closest: {closest(key, names)})"
            )
    for key in ("count", "box_width", "box_height", "seeds", "start_team0", "start_team1"):
        if isinstance(fields.get(key), list):
            fields[key] = tuple(fields[key])
    return dataclasses.replace(known[base] if base else ProcMaps(), **fields)


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


# ------------------------------------------------------------------------------------------
# Traced state
# ------------------------------------------------------------------------------------------


FINITE_FIELDS = ("x", "y", "z", "v", "heading")  # what `check_finite_state` requires finite


def check_finite_state(state: EnvState, where: str) -> None:
    """Refuse a state (any leading batch axes) whose positions, speeds or headings are not all
    finite: a ValueError naming `where`, the field, the game (when batched) and the agent.

    Traced states (inside `jax.jit`) are not checked: their values are unknown there.
    """
    import jax
    import numpy as np

    for name in FINITE_FIELDS:
        value = getattr(state.agents, name)
        if isinstance(value, jax.core.Tracer):
            return
        value = np.asarray(value)
        bad = ~np.isfinite(value)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            *game, agent = index
            at = f"game {game[0] if len(game) == 1 else tuple(game)}, " if game else ""
            raise ValueError(
                f"{where}: {name} of {at}agent {agent} is {float(value[index])}; positions "
                f"(x, y, z), speeds (v) and headings must be finite ({int(bad.sum())} "
                f"non-finite value{'s' if bad.sum() > 1 else ''} in {name})"
            )


@pytree_dataclass
class AgentState(PytreeData):
    """Per-agent state, struct of arrays with one leading agent axis."""

    x: chex.Array  # (n,) float32, world units
    y: chex.Array  # (n,) float32, world units
    z: chex.Array  # (n,) float32, altitude in [0, z_max]
    v: chex.Array  # (n,) float32, speed
    heading: chex.Array  # (n,) float32, radians in [-pi, pi)
    health: chex.Array  # (n,) float32, in [0, max_health]
    alive: chex.Array  # (n,) bool; once False it stays False within an episode
    tracked: chex.Array  # (n, n) int32; [i, j] = consecutive steps shooter j has locked target i


@pytree_dataclass
class EpisodeState(PytreeData):
    """Per-game quantities."""

    map_idx: chex.Array  # () int32, index into config.maps
    waypoint: chex.Array  # (4,) float32, [x1, y1, x2, y2] of the waypoint square
    waypoint_time: chex.Array  # () float32, remaining lifetime in seconds (active iff > 0)
    aux_rewards_factor: chex.Array  # () float32, curriculum factor of every term but game-won
    step: chex.Array  # () int32, steps taken in this episode
    returns: chex.Array  # (n,) float32, undiscounted reward summed over this episode
    present: chex.Array | None = None  # (n,) bool, the agents drawn into this episode
    # (`EnvConfig.team_draw`); None without a draw (every agent present)
    # The map drawn at reset by `config.map_generator`, in world units (None without one, so a
    # config with fixed maps keeps its state's leaves); read through `arena.episode_boxes`.
    boxes: chex.Array | None = None  # (B, 4) float32 [x1, y1, x2, y2], zero where not valid
    box_valid: chex.Array | None = None  # (B,) bool


@pytree_dataclass
class EnvState(PytreeData):
    """The whole traced state of one game."""

    agents: AgentState
    episode: EpisodeState

    @staticmethod
    def create(
        config: EnvConfig,
        x: VectorLike,
        y: VectorLike,
        z: VectorLike | None = None,
        v: VectorLike | None = None,
        heading: VectorLike | None = None,
        health: VectorLike | None = None,
        alive: VectorLike | None = None,
        tracked: ArrayLike | Sequence[Sequence[int]] | None = None,
        map_idx: ArrayLike = 0,
        waypoint: VectorLike | None = None,
        waypoint_time: ArrayLike = 0.0,
        aux_rewards_factor: ArrayLike = 1.0,
        step: ArrayLike = 0,
        present: VectorLike | None = None,
        boxes: ArrayLike | None = None,
        box_valid: ArrayLike | None = None,
    ) -> EnvState:
        """Build a state by hand (tests, scripted starts). Unspecified fields take reset values.

        Args:
            config: the environment's config (gives n and max health).
            x, y: (n,) positions. z defaults to 0, v to 1, heading to 0, health to max_health,
                alive to True (to `present` when given), tracked to 0.
            present: (n,) bool, the agents present in the episode (configs with a
                `team_draw` only; default all). An absent agent starts dead, at health 0.
            boxes, box_valid: the drawn map of a config with a `map_generator`, (B, 4) world
                units and (B,) bool (default: no boxes); ignored without one.

        Raises:
            ValueError: a position, speed or heading is not finite (NaN or infinite).
        """
        n = config.n_agents
        if present is not None and config.team_draw is None:
            raise ValueError(
                "present is only for configs with a team_draw (without one every agent is present)"
            )

        def vec(
            value: VectorLike | None, default: VectorLike, dtype: DTypeLike = jnp.float32
        ) -> jax.Array:
            arr = jnp.broadcast_to(jnp.asarray(default if value is None else value, dtype), (n,))
            return jnp.array(arr)

        mask = None
        if config.team_draw is not None:
            mask = vec(present, True, jnp.bool_)
            if alive is None:
                alive = mask
            if health is None:
                health = jnp.where(mask, jnp.asarray(config.max_health, jnp.float32), 0.0)
        agents = AgentState(
            x=vec(x, 0.0),
            y=vec(y, 0.0),
            z=vec(z, 0.0),
            v=vec(v, 1.0),
            heading=vec(heading, 0.0),
            health=vec(health, config.max_health),
            alive=vec(alive, True, jnp.bool_),
            tracked=jnp.zeros((n, n), jnp.int32)
            if tracked is None
            else jnp.asarray(tracked, jnp.int32),
        )
        episode = EpisodeState(
            map_idx=jnp.asarray(map_idx, jnp.int32),
            waypoint=jnp.zeros(4, jnp.float32)
            if waypoint is None
            else jnp.asarray(waypoint, jnp.float32),
            waypoint_time=jnp.asarray(waypoint_time, jnp.float32),
            aux_rewards_factor=jnp.asarray(aux_rewards_factor, jnp.float32),
            step=jnp.asarray(step, jnp.int32),
            returns=jnp.zeros(n, jnp.float32),
            present=mask,
        )
        if config.map_generator is not None:  # the same leaves as a reset state's
            b = config.max_boxes
            episode = episode.replace(
                boxes=jnp.zeros((b, 4), jnp.float32)
                if boxes is None
                else jnp.asarray(boxes, jnp.float32).reshape(b, 4),
                box_valid=jnp.zeros(b, bool)
                if box_valid is None
                else jnp.asarray(box_valid, bool).reshape(b),
            )
        state = EnvState(agents=agents, episode=episode)
        check_finite_state(state, "EnvState.create")
        return state


@pytree_dataclass
class StepNoise(PytreeData):
    """Every random number one step consumes, drawn up front from the step's key.

    Making the randomness an explicit input lets tests replay a step exactly (for example
    against the NumPy reference) and keeps the number of key splits independent of flags.
    """

    detection: chex.Array  # (n, n) float32 U[0, 1); [i, j] for target i, observer j
    comm: chex.Array  # (n, n) float32 U[0, 1); [e, j] for ego e, sender j
    waypoint: chex.Array  # (4,) float32 U[0, 1): appear, x, y, lifetime


@pytree_dataclass
class StepInfo(PytreeData):
    """Extra outputs of the auto-resetting step (`GigastepEnv.step_autoreset`)."""

    terminated: chex.Array  # () bool, a team was eliminated this step
    truncated: chex.Array  # () bool, the time limit ended the episode (and it did not terminate)
    final_obs: Observation  # observation of the last step of a finished episode (else of this step)
    episode_return: chex.Array  # (n,) float32, the finished episode's return (else running sum)
    episode_length: chex.Array  # () int32, the finished episode's length (else running length)
    winner: chex.Array  # () int32, the team left alone at the end (0 or 1), else -1 (draw, or
    # the episode goes on); see `gigastep.env.episode_winner`
    final_state: EnvState | None = None  # the EnvState the step ended in, before any reset
    # (when asked)
    score: chex.Array | None = None  # (n,) float32, the step's rewards under the weights of
    # another config (when asked: `gigastep.env.step_autoreset`'s `score`)
