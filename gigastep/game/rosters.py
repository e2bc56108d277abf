"""Team compositions drawn per episode: `TeamDraw` and the draw of the present agents.

A config with a draw (`EnvConfig.team_draw`) keeps a fixed roster of agent slots (the per-agent
tables of `EnvConfig`, so every shape is that of the roster). At each reset a composition is
drawn per team: its size k uniform in [min, max], then its type mix, one agent at a time, each
of a type chosen with probability proportional to the type's weight among the types that still
have free slots (a multinomial draw with caps). The first slots (in agent order) of each type,
as many as drawn, are present; the others are absent for the whole episode (rules: "Absent
agents"). The draw is a fixed amount of compute (no data-dependent loop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["DEFAULT_TYPE", "TEAM_DRAW_STREAM", "TeamDraw", "draw_present", "roster_types"]

DEFAULT_TYPE = "default"
"""The type of every agent of a config without `type_names`."""
TEAM_DRAW_STREAM = 0x7EA3
"""The reset key is folded with this number (`jax.random.fold_in`) to draw the composition,
so the map and placement draws of the reset are those of a config without a draw."""

Weights = tuple[tuple[str, float], ...]


def _pair(value: Any, where: str) -> tuple[int, int]:
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) for v in value)
    ):
        raise TypeError(f"{where} must be two integers (min, max), got {value!r}")
    lo, hi = int(value[0]), int(value[1])
    if not 1 <= lo <= hi:
        raise ValueError(f"{where} (min, max) must satisfy 1 <= min <= max, got {value!r}")
    return lo, hi


def _weights(value: Any, where: str) -> Weights:
    if isinstance(value, dict):
        value = tuple(value.items())
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{where} must map type names to weights, got {value!r}")
    out = []
    for item in value:
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
            raise TypeError(f"{where} must hold (type name, weight) pairs, got {item!r}")
        name, w = item
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
            raise TypeError(f"{where}: the weight of {name!r} must be a finite number, got {w!r}")
        if w < 0:
            raise ValueError(f"{where}: the weight of {name!r} must be >= 0, got {w!r}")
        out.append((name, float(w)))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{where} names a type twice: {names}")
    return tuple(out)


@dataclass(frozen=True)
class TeamDraw:
    """How the team compositions of a config with a roster are drawn at each reset.

    Attributes:
        sizes: per team (team 0, team 1), the (min, max) number of present agents; the size is
            uniform over min..max.
        weights: per team, (type name, weight) pairs: the chance of each type in the type mix
            (weights >= 0, normalised over the types that still have free slots). An empty
            tuple (the default) weighs every type of the team's roster equally.

    Example:
        >>> TeamDraw(sizes=((5, 8), (5, 8)), weights=((("default", 2), ("ranger", 1)), ()))
    """

    sizes: tuple[tuple[int, int], tuple[int, int]]
    weights: tuple[Weights, Weights] = ((), ())

    def __post_init__(self) -> None:
        sizes = self.sizes
        if not isinstance(sizes, (tuple, list)) or len(sizes) != 2:
            raise TypeError(f"TeamDraw.sizes must hold one (min, max) per team, got {sizes!r}")
        object.__setattr__(
            self, "sizes", tuple(_pair(s, f"TeamDraw.sizes[{t}]") for t, s in enumerate(sizes))
        )
        weights = self.weights
        if not isinstance(weights, (tuple, list)) or len(weights) != 2:
            raise TypeError(
                f"TeamDraw.weights must hold one table of type weights per team, got {weights!r}"
            )
        object.__setattr__(
            self,
            "weights",
            tuple(_weights(w, f"TeamDraw.weights[{t}]") for t, w in enumerate(weights)),
        )

    def check_roster(self, teams: tuple[int, ...], type_names: tuple[str, ...]) -> None:
        """ValueError unless this draw fits the roster (`EnvConfig.teams` and `type_names`):
        sizes within each team's slots, weights naming the team's types, a positive total
        weight, and enough slots of positively weighted types for the largest size."""
        types = roster_types(teams, type_names)
        for team in (0, 1):
            slots: dict[str, int] = {}
            for t, name in zip(teams, types, strict=True):
                if t == team:
                    slots[name] = slots.get(name, 0) + 1
            lo, hi = self.sizes[team]
            total = sum(slots.values())
            if hi > total:
                raise ValueError(
                    f"team_draw: team {team} may draw up to {hi} agents but its roster has "
                    f"{total} slots ({_describe(slots)}); lower the max size or add slots"
                )
            weights = dict(self.weights[team]) or dict.fromkeys(slots, 1.0)
            unknown = [n for n in weights if n not in slots]
            if unknown:
                from gigastep._util.checks import closest

                raise ValueError(
                    f"team_draw: team {team} weighs type {unknown[0]!r}, which its roster does "
                    f"not have (it has {_describe(slots)}; closest: "
                    f"{closest(unknown[0], slots)})"
                )
            if sum(weights.values()) <= 0:
                raise ValueError(
                    f"team_draw: the weights of team {team} must have a positive sum, got {weights}"
                )
            usable = sum(slots[n] for n, w in weights.items() if w > 0)
            if hi > usable:
                raise ValueError(
                    f"team_draw: team {team} may draw up to {hi} agents but only {usable} of its "
                    f"slots have a type of positive weight ({weights}); lower the max size or "
                    f"weigh more types"
                )

    def describe(self, team: int) -> str:
        """One line: team `team`'s size range and weights."""
        lo, hi = self.sizes[team]
        size = f"{lo}" if lo == hi else f"{lo}-{hi}"
        weights = self.weights[team]
        if not weights:
            return f"{size} agents, types weighed equally"
        total = sum(w for _, w in weights)
        mix = ", ".join(f"{n} {w / total:.0%}" for n, w in weights)
        return f"{size} agents, types {mix}"


def _describe(slots: dict[str, int]) -> str:
    return ", ".join(f"{c} {n}" for n, c in slots.items())


def roster_types(teams: tuple[int, ...], type_names: tuple[str, ...]) -> tuple[str, ...]:
    """The type name of every slot (`DEFAULT_TYPE` for all when `type_names` is empty)."""
    return tuple(type_names) if type_names else (DEFAULT_TYPE,) * len(teams)


def _groups(
    teams: tuple[int, ...], type_names: tuple[str, ...]
) -> tuple[list[list[tuple[str, int]]], np.ndarray, np.ndarray]:
    """Static tables of the roster: per team, its types in order of first slot with their slot
    counts; the group (team, type) index of every slot and its rank among its group's slots."""
    types = roster_types(teams, type_names)
    per_team: list[list[tuple[str, int]]] = [[], []]
    group_of: dict[tuple[int, str], int] = {}
    group = np.zeros(len(teams), np.int32)
    rank = np.zeros(len(teams), np.int32)
    counts: dict[tuple[int, str], int] = {}
    for team in (0, 1):
        for i, (t, name) in enumerate(zip(teams, types, strict=True)):
            if t != team:
                continue
            if (t, name) not in group_of:
                group_of[(t, name)] = len(group_of)
            rank[i] = counts.get((t, name), 0)
            counts[(t, name)] = rank[i] + 1
            group[i] = group_of[(t, name)]
    for (t, name), _ in sorted(group_of.items(), key=lambda kv: kv[1]):
        per_team[t].append((name, counts[(t, name)]))
    return per_team, group, rank


def _team_counts(
    lo: int, hi: int, caps: list[int], weights: list[float], u: jax.Array
) -> jax.Array:
    """(T,) int32: agents of each of the team's T types, from uniforms u (1 + hi,).

    u[0] draws the size k in lo..hi; pick j < k draws a type from u[1 + j] by inverse CDF over
    weight x [free slots left]."""
    k = jnp.minimum(lo + jnp.floor(u[0] * (hi - lo + 1)).astype(jnp.int32), hi)
    if len(caps) == 1:
        return k[None]
    cap = jnp.asarray(caps, jnp.int32)
    w = jnp.asarray(weights, jnp.float32)
    counts = jnp.zeros(len(caps), jnp.int32)
    for j in range(hi):
        p = w * (counts < cap)
        cdf = jnp.cumsum(p)
        # the first type whose cumulative weight exceeds u x total; a zero-weight type is
        # never chosen (its cdf step is empty)
        pick = jnp.sum(cdf <= u[1 + j] * cdf[-1])
        pick = jnp.minimum(pick, len(caps) - 1)
        counts = counts + ((jnp.arange(len(caps)) == pick) & (j < k)).astype(jnp.int32)
    return counts


def draw_present(
    draw: TeamDraw, teams: tuple[int, ...], type_names: tuple[str, ...], key: jax.Array
) -> jax.Array:
    """(n,) bool: the agents present in an episode drawn from `key` (module doc), for the
    roster `teams` / `type_names` (`EnvConfig` fields, already checked by `check_roster`).

    Fixed compute: one size and `max` type picks per team.
    """
    per_team, group, rank = _groups(teams, type_names)
    keys = jax.random.split(key, 2)
    counts = []
    for team in (0, 1):
        lo, hi = draw.sizes[team]
        names = [name for name, _ in per_team[team]]
        caps = [c for _, c in per_team[team]]
        table = dict(draw.weights[team]) or dict.fromkeys(names, 1.0)
        weights = [table.get(name, 0.0) for name in names]
        u = jax.random.uniform(keys[team], (1 + hi,), jnp.float32)
        counts.append(_team_counts(lo, hi, caps, weights, u))
    per_group = jnp.concatenate(counts)
    return jnp.asarray(rank) < per_group[jnp.asarray(group)]
