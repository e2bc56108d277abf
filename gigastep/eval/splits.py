"""Generalisation splits: frozen train / validation / test manifests and their zero-shot protocol.

A split is a versioned data file (`envs/splits/NAME.toml`, or any TOML file of the same
schema) that names the items a policy trains on and the items it is tested on. Each item is a
scenario (a catalogue name, a distribution name or a scenario file), optional EnvConfig
overrides and built-in maps, the opponents it is played against and the seed of its games.
A split belongs to one *family*, the axis along which its test items differ from its training
items (maps, team sizes, type mixes, opponents, observation settings, ...). Loading a split
checks that every item resolves and that no test item shares a value of the family's axis with
a training or validation item (mirror-image twins of a map count as one layout).

`split.hash` (12 hex digits of a SHA-256 over the manifest's content) is carried by every
result, so a number quoted as `maps-layout@3f2a...` names exactly the games it was measured on.

`evaluate_split(split, policy)` plays the frozen policy against each item's opponents (both
sides of a symmetric game), and the two reference players of the split against the same
opponents on the same games, and reports per item: games, win rate with its Wilson interval,
points (win 1, draw 1/2, loss 0) and the normalised score

    (points - points_low) / (points_high - points_low)

0 for the split's weaker reference player (default `random`), 1 for the stronger (default
`pursuit`). Per split: the mean normalised score of the training and of the test items, the
gap, and the interquartile mean (IQM) of the test items' normalised scores with a stratified
percentile bootstrap interval over games (`gigastep.eval.aggregates`; needs scipy).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gigastep._util.checks import check_positive_int, closest
from gigastep._util.resources import catalog_dir
from gigastep.eval.matches import evaluate
from gigastep.eval.players import Device, PlayerLike, resolve_player
from gigastep.eval.statistics import MatchResult, wilson_interval
from gigastep.game.maps import MapSpec, builtin_maps
from gigastep.game.types import EnvConfig
from gigastep.opponents import POLICIES

__all__ = [
    "FAMILIES",
    "FEW_SHOT_SEED_OFFSET",
    "FineTunable",
    "ItemResult",
    "MIN_REFERENCE_SPAN",
    "Scored",
    "Split",
    "SplitItem",
    "SplitResult",
    "evaluate_split",
    "load_split",
    "split_names",
]

ROLES = ("train", "validation", "test")
_SPLIT_KEYS = ("name", "version", "family", "description", "games", "reference", "items")
_ITEM_KEYS = ("id", "role", "scenario", "maps", "env", "opponents", "seed")


# ------------------------------------------------------------------------------------------
# The families: the axis a split's test items are held out on
# ------------------------------------------------------------------------------------------


def _layout(spec: MapSpec) -> tuple[tuple[float, ...], ...]:
    """A map's obstacle layout: its boxes, sorted (a map and its flipped twin share it)."""
    return tuple(sorted(tuple(float(v) for v in box) for box in spec.boxes))


def _maps_axis(config: EnvConfig, item: SplitItem) -> frozenset[Any]:
    return frozenset(_layout(m) for m in config.maps)


def _team_sizes_axis(config: EnvConfig, item: SplitItem) -> frozenset[Any]:
    """Every (size of team 0, size of team 1) the item can play: the fixed sizes, or every
    pair a team draw can give."""
    draw = config.team_draw
    if draw is None:
        return frozenset([tuple(config.team_sizes)])
    (lo0, hi0), (lo1, hi1) = draw.sizes
    return frozenset(itertools.product(range(lo0, hi0 + 1), range(lo1, hi1 + 1)))


def _team_mixes(config: EnvConfig, team: int) -> set[tuple[tuple[str, int], ...]]:
    """Every type mix (sorted (type, count) pairs, zero counts left out) team `team` can field."""
    names = [t for t, k in zip(config.type_names, config.teams, strict=True) if k == team]
    slots = {n: names.count(n) for n in dict.fromkeys(names)}
    draw = config.team_draw
    if draw is None:
        return {tuple(sorted(slots.items()))}
    lo, hi = draw.sizes[team]
    weights = dict(draw.weights[team]) or dict.fromkeys(slots, 1.0)
    usable = [n for n in slots if weights.get(n, 0) > 0]
    mixes = set()
    for counts in itertools.product(*(range(slots[n] + 1) for n in usable)):
        if lo <= sum(counts) <= hi:
            mixes.add(tuple(sorted((n, c) for n, c in zip(usable, counts, strict=True) if c)))
    return mixes


def _type_mix_axis(config: EnvConfig, item: SplitItem) -> frozenset[Any]:
    """Every (team 0's mix, team 1's mix) the item can play."""
    return frozenset(itertools.product(_team_mixes(config, 0), _team_mixes(config, 1)))


def _opponents_axis(config: EnvConfig, item: SplitItem) -> frozenset[Any]:
    return frozenset(item.opponents)


_SENSING = (
    "obs_type",
    "cone_depth",
    "cone_angle",
    "detection_range",
    "communication_range",
    "stochastic_obs",
    "stochastic_comm",
    "max_agents_in_vec_obs",
)


def _observation_axis(config: EnvConfig, item: SplitItem) -> frozenset[Any]:
    return frozenset([tuple((f, getattr(config, f)) for f in _SENSING)])


def _level_axis(config: EnvConfig, item: SplitItem) -> frozenset[Any]:
    """The item's levels: (generator without its seeds, lo, hi); a generator without level
    seeds draws from every key, so it holds every level [0, 2^31). An item of fixed maps
    (`maps = [...]`, no generator) holds each layout as a level of its own, (layout, 0, 1):
    a procedural split can test on the built-in maps, and a layout (or its flipped twin) on
    both sides is refused like a shared level."""
    from gigastep.game.procmaps import MAX_SEED

    generator = config.map_generator
    if generator is None:
        if item.maps:
            return frozenset((f"map layout {_layout(m)}", 0, 1) for m in config.maps)
        raise ValueError(
            f"item {item.id!r} of a procedural_maps split needs a map generator (map_set = a "
            f"generator's name, or [items.env] map_generator = {{ base = ..., seeds = [lo, hi] }})"
            f" or fixed maps (maps = [...])"
        )
    lo, hi = generator.seeds if generator.seeds is not None else (0, MAX_SEED)
    return frozenset([(repr(dataclasses.replace(generator, seeds=None)), lo, hi)])


def _shared_levels(a: frozenset[Any], b: frozenset[Any]) -> frozenset[Any]:
    """Level ranges of one generator that meet: [max lo, min hi)."""
    return frozenset(
        gen if gen.startswith("map layout") else f"levels [{max(lo, lo2)}, {min(hi, hi2)})"
        for gen, lo, hi in a
        for gen2, lo2, hi2 in b
        if gen == gen2 and max(lo, lo2) < min(hi, hi2)
    )


@dataclass(frozen=True)
class Family:
    """The axis along which a split of this family holds its test items out."""

    name: str
    axis: str  # what the held-out values are, for errors and docs
    values: Callable[[EnvConfig, SplitItem], frozenset[Any]]
    # the values two items share (default: the same values)
    shared: Callable[[frozenset[Any], frozenset[Any]], frozenset[Any]] = frozenset.intersection


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("maps", "obstacle layouts (boxes; a map and its flipped twin are one)", _maps_axis),
        Family("team_sizes", "team sizes (agents of team 0, agents of team 1)", _team_sizes_axis),
        Family("type_mix", "agent-type counts of each team", _type_mix_axis),
        Family("opponents", "opponent players (scripted names)", _opponents_axis),
        Family("populations", "opponent players (checkpoints of other runs)", _opponents_axis),
        Family("observation", f"sensing settings ({', '.join(_SENSING)})", _observation_axis),
        Family(
            "procedural_maps",
            "procedural levels (a generator's level seeds)",
            _level_axis,
            _shared_levels,
        ),
    )
}
"""Every family a split may name, by name."""


# ------------------------------------------------------------------------------------------
# Manifests
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitItem:
    """One item of a split: a game, the opponents it is played against and its seed."""

    id: str
    role: str  # "train", "validation" or "test"
    scenario: str
    opponents: tuple[str, ...]
    seed: int = 0
    maps: tuple[str, ...] = ()  # built-in map names replacing the scenario's maps
    env: tuple[tuple[str, Any], ...] = ()  # EnvConfig overrides, sorted by field

    def config(self, base: Path | None = None) -> EnvConfig:
        """The item's EnvConfig (a scenario file is looked up relative to `base`)."""
        from gigastep.scenarios import make_config

        scenario: str | Path = self.scenario
        if self.scenario.split("#")[0].endswith(".toml") and base is not None:
            file, _, name = self.scenario.partition("#")
            scenario = str(base / file) + (f"#{name}" if name else "")
        overrides: dict[str, Any] = dict(self.env)
        if self.maps:
            known = builtin_maps()
            overrides["maps"] = tuple(known[m] for m in self.maps)
        return make_config(scenario, **overrides)


@dataclass(frozen=True)
class Split:
    """A frozen generalisation split (see the module docstring)."""

    name: str
    version: int
    family: str
    description: str
    games: int
    reference: tuple[str, str]  # (weaker, stronger) reference players of the normalised score
    items: tuple[SplitItem, ...]
    source: str = field(default="", compare=False)  # the file it was read from

    @property
    def hash(self) -> str:
        """12 hex digits of the SHA-256 of the manifest's content (not of its file's bytes:
        comments and key order do not change it)."""
        content = dataclasses.asdict(self)
        content.pop("source")
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    @property
    def label(self) -> str:
        """`name@hash`, the split's name in every result."""
        return f"{self.name}@{self.hash}"

    def role(self, role: str) -> tuple[SplitItem, ...]:
        """The items of one role ("train", "validation" or "test")."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {list(ROLES)}, got {role!r}")
        return tuple(i for i in self.items if i.role == role)

    def config(self, item: SplitItem) -> EnvConfig:
        """An item's EnvConfig (scenario files resolve next to the split's file)."""
        base = Path(self.source).parent if self.source else catalog_dir() / "splits"
        return item.config(base)

    def opponent(self, name: str) -> str:
        """An opponent as `evaluate` takes it: a scripted name as is, a checkpoint file
        relative to the split's file."""
        if name in POLICIES or os.path.isabs(name) or not self.source:
            return name
        return str(Path(self.source).parent / name)

    def check(self) -> None:
        """Every item resolves, and no test item shares a value of the family's axis with a
        training or validation item. Raises ValueError naming the items and the values."""
        family = FAMILIES[self.family]
        values: dict[str, frozenset[Any]] = {}
        for item in self.items:
            try:
                config = self.config(item)
            except (TypeError, ValueError, FileNotFoundError) as err:
                raise ValueError(f"split {self.name!r}, item {item.id!r}: {err}") from None
            values[item.id] = family.values(config, item)
            for o in item.opponents:
                if o not in POLICIES and not os.path.isfile(self.opponent(o)):
                    raise ValueError(
                        f"split {self.name!r}, item {item.id!r}: opponent checkpoint {o!r} "
                        f"not found (looked for {self.opponent(o)})"
                    )
        for test in self.role("test"):
            for other in (*self.role("train"), *self.role("validation")):
                shared = family.shared(values[test.id], values[other.id])
                if shared:
                    raise ValueError(
                        f"split {self.name!r} ({self.family}): test item {test.id!r} shares "
                        f"{family.axis} {sorted(map(str, shared))} with {other.role} item "
                        f"{other.id!r}; a test item must differ from every training and "
                        f"validation item on the family's axis"
                    )


def split_names() -> list[str]:
    """The names of the splits shipped in the catalogue (`envs/splits/`)."""
    folder = catalog_dir() / "splits"
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def load_split(name_or_path: str | os.PathLike[str]) -> Split:
    """A shipped split by name (`split_names()`) or a split file (a path ending in .toml),
    parsed (no code runs), validated and checked (`Split.check`)."""
    text = os.fspath(name_or_path)
    if text.endswith(".toml"):
        path = Path(text)
        if not path.is_file():
            raise FileNotFoundError(f"split file {text!r} does not exist")
    else:
        names = split_names()
        if text not in names:
            raise ValueError(
                f"unknown split {text!r}; expected one of {names} (closest: "
                f"{closest(text, names)}), or a split file ending in .toml"
            )
        path = catalog_dir() / "splits" / f"{text}.toml"
    with open(path, "rb") as f:
        try:
            table = tomllib.load(f)
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"malformed split file {path}: {err}") from None
    split = _parse(table, str(path))
    split.check()
    return split


def _keys(table: Any, allowed: Sequence[str], required: Sequence[str], where: str) -> None:
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table, got {table!r}")
    for key in table:
        if key not in allowed:
            raise ValueError(
                f"{where}: unknown key {key!r}; expected one of {list(allowed)} "
                f"(closest: {closest(key, allowed)})"
            )
    missing = [k for k in required if k not in table]
    if missing:
        raise ValueError(f"{where}: missing {missing}")


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not value:
        raise ValueError(f"{where} must be a non-empty list of strings, got {value!r}")
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a non-empty list of strings, got {value!r}")
    return tuple(value)


def _int(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{where} must be an integer >= {low}, got {value!r}")
    return value


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, list) else value


def _parse(table: dict[str, Any], source: str) -> Split:
    where = f"split file {source}"
    _keys(table, _SPLIT_KEYS, ("name", "version", "family", "items"), where)
    name = table["name"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: name must be a non-empty string, got {name!r}")
    family = table["family"]
    if family not in FAMILIES:
        raise ValueError(
            f"{where}: unknown family {family!r}; expected one of {list(FAMILIES)} "
            f"(closest: {closest(str(family), FAMILIES)})"
        )
    reference = _str_list(table.get("reference", ["random", "pursuit"]), f"{where}: reference")
    if len(reference) != 2 or reference[0] == reference[1]:
        raise ValueError(
            f"{where}: reference must name two different players (weaker, stronger), got "
            f"{list(reference)}"
        )
    items_table = table["items"]
    if not isinstance(items_table, list) or not items_table:
        raise ValueError(f"{where}: items must be a non-empty array of tables ([[items]])")
    known_maps = builtin_maps()
    items = []
    for k, raw in enumerate(items_table):
        at = f"{where}, item {k}"
        _keys(raw, _ITEM_KEYS, ("id", "role", "scenario", "opponents"), at)
        at = f"{where}, item {raw['id']!r}"
        if raw["role"] not in ROLES:
            raise ValueError(f"{at}: role must be one of {list(ROLES)}, got {raw['role']!r}")
        maps = _str_list(raw["maps"], f"{at}: maps") if "maps" in raw else ()
        for m in maps:
            if m not in known_maps:
                raise ValueError(
                    f"{at}: unknown map {m!r}; expected one of {list(known_maps)} "
                    f"(closest: {closest(m, known_maps)})"
                )
        env = raw.get("env", {})
        if not isinstance(env, dict):
            raise ValueError(f"{at}: env must be a table of EnvConfig fields, got {env!r}")
        opponents = _str_list(raw["opponents"], f"{at}: opponents")
        for o in opponents:
            if o not in POLICIES and not o.endswith(".pt"):
                raise ValueError(
                    f"{at}: unknown opponent {o!r}; expected a scripted player "
                    f"{list(POLICIES)} (closest: {closest(o, POLICIES)}) or a checkpoint file"
                )
        items.append(
            SplitItem(
                id=str(raw["id"]),
                role=raw["role"],
                scenario=str(raw["scenario"]),
                opponents=opponents,
                seed=_int(raw.get("seed", 0), f"{at}: seed", 0),
                maps=maps,
                env=tuple(sorted((k, _freeze(v)) for k, v in env.items())),
            )
        )
    ids = [i.id for i in items]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"{where}: item ids must be unique; repeated: {duplicated}")
    for role in ("train", "test"):
        if not any(i.role == role for i in items):
            raise ValueError(f"{where}: a split needs at least one {role} item")
    return Split(
        name=name,
        version=_int(table["version"], f"{where}: version", 1),
        family=family,
        description=str(table.get("description", "")),
        games=_int(table.get("games", 512), f"{where}: games", 1),
        reference=(reference[0], reference[1]),
        items=tuple(items),
        source=source,
    )


# ------------------------------------------------------------------------------------------
# The zero-shot protocol
# ------------------------------------------------------------------------------------------


MIN_REFERENCE_SPAN = 0.1
"""The least difference in points (wins + draws / 2, per game) between the two reference
players for a row to get a normalised score. The score divides by that difference: where the
references play alike (`random` and `pursuit` on dense procedural maps differ by 0.02-0.06
points) it would scale a few games' noise into scores of 5 or 20. Such rows keep their win
rate and points and are left out of the means, the gap and the IQM."""


def _points(result: MatchResult) -> float:
    return (result.wins + 0.5 * result.draws) / result.games if result.games else math.nan


@dataclass
class Scored:
    """A player's games against one opponent, beside the two reference players' games
    against the same opponent on the same games."""

    result: MatchResult | None  # None when the player cannot play (see `error`)
    low: MatchResult  # the weaker reference player
    high: MatchResult  # the stronger one
    error: str = ""

    @property
    def points(self) -> float:
        """(wins + draws / 2) / games of the player; NaN when it could not play."""
        return _points(self.result) if self.result is not None else math.nan

    @property
    def reference_span(self) -> float:
        """Points of the stronger reference minus those of the weaker (NaN without games)."""
        return _points(self.high) - _points(self.low)

    @property
    def normalised(self) -> float | None:
        """(points - low) / (high - low); None when the player could not play or the
        references are less than `MIN_REFERENCE_SPAN` points apart on this row."""
        # (the tolerance: 0.6 - 0.5 is 0.0999... in floating point)
        if self.result is None or not abs(self.reference_span) >= MIN_REFERENCE_SPAN - 1e-12:
            return None
        low = _points(self.low)
        return (self.points - low) / self.reference_span

    def outcomes(self) -> np.ndarray:
        """The player's points game by game (1, 1/2 or 0), for bootstrap intervals."""
        r = self.result
        if r is None:
            return np.zeros(0)
        return np.repeat([1.0, 0.5, 0.0], [r.wins, r.draws, r.losses])


@dataclass
class ItemResult(Scored):
    """The policy against one opponent on one item (zero-shot), and after fine-tuning."""

    item: str = ""
    role: str = ""
    opponent: str = ""
    few_shot: dict[int, Scored] = field(default_factory=dict)  # by fine-tuning agent-steps


@dataclass
class SplitResult:
    """Every item's results and the split's aggregates."""

    split: str  # name@hash
    family: str
    policy: str
    reference: tuple[str, str]
    games: int
    rows: list[ItemResult]
    confidence: float = 0.95
    few_shot: tuple[int, ...] = ()  # fine-tuning budgets in agent-steps

    def _normalised(self, role: str) -> list[float]:
        return [v for r in self.rows if r.role == role and (v := r.normalised) is not None]

    def mean_few_shot(self, agent_steps: int) -> float | None:
        """The mean normalised score of the test rows after fine-tuning for `agent_steps`."""
        values = [
            v
            for r in self.rows
            if agent_steps in r.few_shot and (v := r.few_shot[agent_steps].normalised) is not None
        ]
        return sum(values) / len(values) if values else None

    def mean_normalised(self, role: str) -> float | None:
        """The mean normalised score of a role's rows (None if none is defined)."""
        values = self._normalised(role)
        return sum(values) / len(values) if values else None

    @property
    def gap(self) -> float | None:
        """Mean normalised score on training items minus that on test items."""
        train, test = self.mean_normalised("train"), self.mean_normalised("test")
        return None if train is None or test is None else train - test

    def test_iqm(self, resamples: int = 2000, seed: int = 0) -> tuple[float, float, float] | None:
        """(IQM, low, high) of the test rows' normalised scores; the interval is a stratified
        percentile bootstrap over each row's games (the reference scores held fixed)."""
        from gigastep.eval.aggregates import interquartile_mean, stratified_bootstrap_ci

        rows = [r for r in self.rows if r.role == "test" and r.normalised is not None]
        if not rows:
            return None
        lows = [_points(r.low) for r in rows]
        spans = [_points(r.high) - _points(r.low) for r in rows]
        samples = [r.outcomes() for r in rows]

        def iqm_of(groups: list[Any]) -> float:
            scores = [
                (float(np.mean(g)) - lo) / span
                for g, lo, span in zip(groups, lows, spans, strict=True)
            ]
            return interquartile_mean([scores])

        point = iqm_of(samples)
        low, high = stratified_bootstrap_ci(
            samples, iqm_of, confidence=self.confidence, resamples=resamples, seed=seed
        )
        return point, low, high

    def table(self) -> str:
        """A markdown table: one row per (item, opponent), then the split's aggregates."""
        low_name, high_name = self.reference
        lines = [
            f"split {self.split} ({self.family}), policy {self.policy}; normalised score: "
            f"0 = {low_name}, 1 = {high_name} against the same opponent on the same games",
            "",
            "| role | item | opponent | games | win rate [95% CI] | points | "
            f"{low_name} | {high_name} | normalised |"
            + "".join(f" {k:,} steps |" for k in self.few_shot),
            "|---|---|---|---:|---|---:|---:|---:|---:|" + "---:|" * len(self.few_shot),
        ]
        for r in self.rows:
            if r.result is None:
                win = f"cannot play: {r.error}"
                n, points = "", ""
            else:
                lo, hi = wilson_interval(r.result.wins, r.result.games, self.confidence)
                win = f"{r.result.win_rate:.3f} [{lo:.3f}, {hi:.3f}]"
                n, points = str(r.result.games), f"{r.points:.3f}"
            few = ""
            for k in self.few_shot:
                shot = r.few_shot.get(k)
                if shot is None:
                    few += " |"
                elif shot.result is None:
                    few += f" {shot.error} |"
                else:
                    few += f" {_fmt(shot.normalised)} |"
            lines.append(
                f"| {r.role} | {r.item} | {r.opponent} | {n} | {win} | {points} | "
                f"{_points(r.low):.3f} | {_points(r.high):.3f} | {_normalised_cell(r)} |" + few
            )
        lines.append("")
        train, test, gap = self.mean_normalised("train"), self.mean_normalised("test"), self.gap
        lines.append(
            f"mean normalised score: train {_fmt(train)}, test {_fmt(test)}, gap {_fmt(gap)}"
        )
        iqm = self.test_iqm()
        if iqm is not None:
            lines.append(
                f"test IQM of normalised scores: {iqm[0]:.3f} [{iqm[1]:.3f}, {iqm[2]:.3f}] "
                f"({self.confidence:.0%} stratified bootstrap over games)"
            )
        for k in self.few_shot:
            lines.append(
                f"mean normalised test score after {k:,} agent-steps of fine-tuning: "
                f"{_fmt(self.mean_few_shot(k))} (games from the item's seed + "
                f"{FEW_SHOT_SEED_OFFSET:,})"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Everything as plain JSON data (the split's label included)."""

        def match(m: MatchResult | None) -> dict[str, Any] | None:
            if m is None:
                return None
            return {
                "games": m.games,
                "wins": m.wins,
                "draws": m.draws,
                "losses": m.losses,
                "win_rate_ci": list(wilson_interval(m.wins, m.games, self.confidence)),
                "points": _points(m),
                "scenario_hash": m.scenario_hash,
                "seed": m.seed,
            }

        iqm = self.test_iqm()
        return {
            "split": self.split,
            "family": self.family,
            "policy": self.policy,
            "reference": list(self.reference),
            "games": self.games,
            "rows": [
                {
                    "item": r.item,
                    "role": r.role,
                    "opponent": r.opponent,
                    "policy": match(r.result),
                    "reference_low": match(r.low),
                    "reference_high": match(r.high),
                    "normalised": r.normalised,
                    "reference_span": None if r.result is None else r.reference_span,
                    "error": r.error,
                    "few_shot": {
                        str(k): {
                            "policy": match(shot.result),
                            "reference_low": match(shot.low),
                            "reference_high": match(shot.high),
                            "normalised": shot.normalised,
                            "error": shot.error,
                        }
                        for k, shot in r.few_shot.items()
                    },
                }
                for r in self.rows
            ],
            "mean_normalised": {
                role: self.mean_normalised(role) for role in ROLES if self._rows_of(role)
            },
            "gap": self.gap,
            "few_shot_agent_steps": list(self.few_shot),
            "mean_few_shot": {str(k): self.mean_few_shot(k) for k in self.few_shot},
            "test_iqm": None if iqm is None else {"iqm": iqm[0], "low": iqm[1], "high": iqm[2]},
        }

    def _rows_of(self, role: str) -> list[ItemResult]:
        return [r for r in self.rows if r.role == role]

    def marl_eval(self) -> dict[str, Any]:
        """marl-eval's raw-data layout: environment "gigastep", one task per (item,
        opponent) named `split@hash/item/opponent`, one run; per-game points, wins and
        normalised score in `absolute_metrics`."""
        tasks: dict[str, Any] = {}
        for r in self.rows:
            if r.result is None:
                continue
            metrics = {
                "points": r.outcomes().tolist(),
                "win_rate": [r.result.win_rate],
                "normalised_score": [r.normalised],
            }
            tasks[f"{self.split}/{r.item}/{r.opponent}"] = {
                self.policy: {
                    "seed_0": {
                        "step_0": {"step_count": 0, **metrics},
                        "absolute_metrics": metrics,
                    }
                }
            }
        return {"gigastep": tasks}


def _normalised_cell(row: Scored) -> str:
    if row.result is None:
        return ""
    if row.normalised is None:
        return f"refs {row.reference_span:.3f} apart"
    return f"{row.normalised:.3f}"


def _fmt(value: float | None, missing: str = "n/a") -> str:
    return missing if value is None else f"{value:.3f}"


FEW_SHOT_SEED_OFFSET = 1_000_000
"""A few-shot row plays its games from the item's seed plus this offset: fresh games, neither
the zero-shot row's nor (for a trainer that seeds its games from small integers) the
fine-tuning's."""


@runtime_checkable
class FineTunable(Protocol):
    """A player that can be fine-tuned for the few-shot protocol (the PPO checkpoint player
    of the baselines is one)."""

    name: str

    def finetune(
        self, config: EnvConfig, opponents: tuple[str, ...], agent_steps: int, seed: int
    ) -> PlayerLike:
        """A new player: this one trained further for `agent_steps` agent-steps on `config`
        against `opponents`, from training seed `seed`."""
        ...


def evaluate_split(
    split: Split | str | os.PathLike[str],
    policy: PlayerLike,
    *,
    roles: Iterable[str] = ("train", "test"),
    items: Iterable[str] | None = None,
    games: int | None = None,
    few_shot: Sequence[int] = (),
    few_shot_seed: int = 0,
    batch_size: int = 4096,
    device: Device = "cpu",
    confidence: float = 0.95,
    progress: Callable[[str], object] | None = None,
    reference_cache: dict[tuple[str, str, int], tuple[MatchResult, MatchResult]] | None = None,
) -> SplitResult:
    """The zero-shot protocol, and optionally the few-shot one.

    Zero-shot: the frozen `policy` and the split's two reference players each play `games`
    (default the split's) fresh games against every opponent of every item of `roles`.
    Few-shot (test items only): for each budget K in `few_shot`, the policy is fine-tuned
    for K agent-steps on the item against its opponents (`policy.finetune`, see
    `FineTunable`; training seed `few_shot_seed`), then it and the references play `games`
    games from the item's seed plus `FEW_SHOT_SEED_OFFSET`.

    `items` keeps only the items with these ids (of `roles`): a policy trained on one of a
    split's training items is scored on that one (`levels-v1`: `levels-16` or `levels-1024`).
    `reference_cache`, a dict shared by calls with the same split, games and options, keeps the
    references' results per (item, opponent, seed), so that evaluating several checkpoints
    plays the references once.

    A policy that cannot play an item (its `check` refuses the item's observation or action
    layout) gets a row saying why instead of a result; the others still run.
    """
    if not isinstance(split, Split):
        split = load_split(split)
    roles = tuple(roles)
    for role in roles:
        if role not in ROLES:
            raise ValueError(f"roles must be among {list(ROLES)}, got {role!r}")
    chosen = [i.id for i in split.items if i.role in roles]
    if items is not None:
        if isinstance(items, str):
            raise TypeError(f"items is a list of item ids, got the string {items!r}")
        wanted = tuple(items)
        for name in wanted:
            if name not in chosen:
                raise ValueError(
                    f"items: {split.label} has no item {name!r} among its "
                    f"{'/'.join(roles)} items (closest: {', '.join(closest(name, chosen))}; "
                    f"all: {', '.join(chosen)})"
                )
        chosen = [i for i in chosen if i in wanted]
    n = split.games if games is None else games
    check_positive_int(n, "games")
    budgets = tuple(few_shot)
    for k in budgets:
        check_positive_int(k, "few_shot budget (agent-steps)")
    player = resolve_player(policy, device)
    if budgets and not isinstance(player, FineTunable):
        raise ValueError(
            f"few-shot evaluation fine-tunes the policy, but {player.name!r} "
            f"({type(player).__name__}) has no finetune method; give a trained checkpoint "
            f"of a trainer that provides one (the PPO baselines do), or no few-shot budgets"
        )
    low, high = (resolve_player(p, device) for p in split.reference)
    options = dict(games=n, batch_size=batch_size, device=device, confidence=confidence)
    rows = []
    for item in split.items:
        if item.role not in roles or item.id not in chosen:
            continue
        config = split.config(item)
        tuned: dict[int, PlayerLike | str] = {}
        if item.role == "test":
            for k in budgets:
                if progress is not None:
                    progress(f"{item.id}: fine-tuning for {k} agent-steps")
                assert isinstance(player, FineTunable)
                try:
                    tuned[k] = player.finetune(config, item.opponents, k, few_shot_seed)
                except ValueError as err:
                    tuned[k] = f"cannot fine-tune: {err}"
        for opponent in item.opponents:
            if progress is not None:
                progress(f"{item.id} vs {opponent}")
            rival = split.opponent(opponent)
            cached = (
                None
                if reference_cache is None
                else reference_cache.get((item.id, opponent, item.seed))
            )
            row = _scored(player, low, high, rival, config, item.seed, options, cached)
            if reference_cache is not None:
                reference_cache[(item.id, opponent, item.seed)] = row[1:3]
            fresh = item.seed + FEW_SHOT_SEED_OFFSET
            refs: tuple[MatchResult, MatchResult] | None = None
            few: dict[int, Scored] = {}
            for k, p in tuned.items():
                if isinstance(p, str):
                    if refs is None:
                        refs = _scored(low, low, high, rival, config, fresh, options)[1:3]
                    few[k] = Scored(None, *refs, error=p)
                    continue
                few[k] = Scored(*_scored(p, low, high, rival, config, fresh, options, refs))
                refs = (few[k].low, few[k].high)
            rows.append(
                ItemResult(*row, item=item.id, role=item.role, opponent=opponent, few_shot=few)
            )
    return SplitResult(
        split=split.label,
        family=split.family,
        policy=player.name,
        reference=split.reference,
        games=n,
        rows=rows,
        confidence=confidence,
        few_shot=budgets,
    )


def _scored(
    player: PlayerLike,
    low: PlayerLike,
    high: PlayerLike,
    opponent: str,
    config: EnvConfig,
    seed: int,
    options: dict[str, Any],
    refs: tuple[MatchResult, MatchResult] | None = None,
) -> tuple[MatchResult | None, MatchResult, MatchResult, str]:
    """(player's result or None, low's, high's, error): the three against `opponent` on the
    same games (`refs`: the references' results of these games, already played)."""

    def play(a: PlayerLike) -> MatchResult:
        return evaluate(a, opponent, config, seed=seed, **options)

    low_result, high_result = refs if refs is not None else (play(low), play(high))
    try:
        return play(player), low_result, high_result, ""
    except ValueError as err:
        return None, low_result, high_result, str(err)
