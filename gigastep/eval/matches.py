"""Play games between two players and count who wins: win/draw/loss with confidence intervals.

A *player* is one of:

- a scripted policy name, `"random"`, `"circle"`, `"pursuit"` or `"evade"`
  (`gigastep.opponents`);
- a pure JAX callable `policy(config, state, key) -> actions` of all agents of one game (a
  scripted player: the evaluator keeps the rows of the team it plays);
- a `TorchPlayer` (below), such as a trained policy;
- a path to a checkpoint file that a registered loader turns into a `TorchPlayer`.

Checkpoint files are dicts saved with `torch.save` and loaded with
`torch.load(path, weights_only=True, map_location="cpu")` (no code is ever unpickled). The key
`"gigastep_player"` names the loader: a function `fn(checkpoint: dict, device) -> TorchPlayer`
registered with `register_player_loader(name, fn)` or declared as an entry point of the group
`gigastep.players` (value `module:function`) by an installed package. This library imports no
loader itself; the repository's PPO baseline declares one.

`evaluate(a, b, scenario, games)` plays `games` complete episodes, fully batched: games between
scripted players run as one compiled JAX loop (segments of `lax.scan` over
`gigastep.env.batched_step` until every game has finished), games with a `TorchPlayer` run
over `gigastep.adapters.torch.TorchVecEnv` with the actor in the loop and a scripted side, if any,
inside its compiled step (`gigastep.adapters.torch.ScriptedTeam`). In a symmetric
scenario (both teams have the same agent types in the same order) A plays team 0 in
ceil(games / 2) games and team 1 in the rest, from the same start positions. Each batch slot
counts only its first episode: counting the first `games` episodes to finish instead would
favour short episodes (decisive games end early, draws last until the time limit).

Outcomes are those of `gigastep.env.episode_winner`: a win when only A's team has agents
alive at the end, a loss when only B's has, otherwise a draw (time limit, or both eliminated
in the same step). Win and loss rates come with Wilson score intervals.

Example:
    >>> from gigastep.eval.matches import evaluate
    >>> result = evaluate("pursuit", "random", "identical_5_vs_5_fobs_vec_void_disc", games=64)
    >>> result.wins + result.draws + result.losses == result.games
    True
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from importlib.metadata import EntryPoint
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from gigastep import env as _env
from gigastep._util.checks import check_positive_int
from gigastep.game.types import PER_AGENT_FIELDS, EnvConfig, EnvState, closest
from gigastep.opponents import POLICIES, EnvLike, Policy, resolve_env

if TYPE_CHECKING:
    import torch
    from jax.typing import DTypeLike

    from gigastep.adapters.torch import TorchObservation

Device: TypeAlias = "torch.device | str"
"""A torch device, or its name ("cpu", "cuda", "cuda:1")."""

Progress: TypeAlias = Callable[[int], object]
"""`progress(finished_games)`, called as games finish."""

__all__ = [
    "DEFAULT_SCENARIO",
    "MatchResult",
    "ScriptedPlayer",
    "SeatResult",
    "TorchActor",
    "TorchPlayer",
    "evaluate",
    "load_player",
    "player_loaders",
    "register_player_loader",
    "resolve_player",
    "symmetric",
    "wilson_interval",
]

DEFAULT_SCENARIO = "identical_5_vs_5_fobs_vec_void_disc"
"""The game `evaluate` and the command line play when none is named."""

CHECKPOINT_KEY = "gigastep_player"
ENTRY_POINT_GROUP = "gigastep.players"
SEGMENT_STEPS = 32  # steps per compiled call of the scripted loop (progress, early exit)


# ------------------------------------------------------------------------------------------
# Players
# ------------------------------------------------------------------------------------------


@runtime_checkable
class TorchActor(Protocol):
    """One team of `num_envs` games, played by a (possibly recurrent) torch policy.

    The actor is stateful: it keeps its own recurrent state for each game and restarts it
    where `first` is True.
    """

    def __call__(self, obs: TorchObservation, first: torch.Tensor) -> torch.Tensor:
        """Actions of the team for one step.

        Args:
            obs: the team's observations as `TorchVecEnv` returns them, the rows of that team
                only: float32 (B, m, L) (vector), uint8 (B, m, res_x, res_y, 3) (rgb), or the
                tuple (rgb, vector).
            first: bool (B,), True where this observation is the first of an episode (after
                a reset, and after a step whose `ep_dones` was True, since games restart
                automatically).

        Returns:
            int (B, m) action indices (discrete) or float32 (B, m, 3) (continuous), on the
            same device as `obs`.
        """
        ...


@runtime_checkable
class TorchPlayer(Protocol):
    """A player backed by PyTorch (a trained policy, or anything that acts on observations).

    Attributes:
        name: a short label for tables and plots.

    Optionally a `scenario` attribute (a scenario name) says which game it was trained on;
    the command line plays that game when none is named.
    """

    name: str

    def check(self, config: EnvConfig, team: int) -> None:
        """Raise ValueError with a clear message if this player cannot play team `team` of
        the game `config` (observation type or shape, action type, team size, agent types)."""
        ...

    def actor(
        self, config: EnvConfig, team: int, num_envs: int, device: Device, seed: int
    ) -> TorchActor:
        """A fresh actor for team `team` of `num_envs` games of `config` on torch `device`."""
        ...


@dataclass(frozen=True)
class ScriptedPlayer:
    """A pure JAX policy `policy(config, state, key) -> actions` of all n agents of a game."""

    name: str
    policy: Policy

    def check(self, config: EnvConfig, team: int) -> None:
        """Scripted policies read the state, so they play either team of any game."""


Player = ScriptedPlayer | TorchPlayer

PlayerLike: TypeAlias = "Player | Policy | str | os.PathLike[str]"
"""Any player form `resolve_player` takes: a player, a policy callable, a scripted policy's
name, or a checkpoint path."""

PlayerLoader: TypeAlias = Callable[[dict[str, Any], Device], TorchPlayer]
"""`fn(checkpoint: dict, device) -> TorchPlayer`, a checkpoint loader."""

_LOADERS: dict[str, PlayerLoader] = {}


def register_player_loader(name: str, fn: PlayerLoader, *, replace: bool = False) -> None:
    """Make checkpoints whose `"gigastep_player"` entry is `name` load with
    `fn(checkpoint: dict, device) -> TorchPlayer`.

    Raises:
        ValueError: `name` is already registered (pass `replace=True` to override it).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a loader name is a non-empty string, got {name!r}")
    if not callable(fn):
        raise TypeError(f"a loader is a callable fn(checkpoint, device); got {type(fn).__name__}")
    if name in _LOADERS and _LOADERS[name] is not fn and not replace:
        raise ValueError(
            f"a player loader named {name!r} is already registered; pass replace=True to "
            "override it"
        )
    _LOADERS[name] = fn


def _entry_points() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def player_loaders() -> list[str]:
    """Names of the known checkpoint loaders (registered and installed entry points)."""
    return sorted({*_LOADERS, *_entry_points()})


def _loader(name: str) -> PlayerLoader:
    if name in _LOADERS:
        return _LOADERS[name]
    eps = _entry_points()
    if name not in eps:
        known = player_loaders()
        hint = f"closest: {closest(name, known)}" if known else "no loader is installed"
        raise ValueError(
            f"no player loader named {name!r} ({hint}). Install the package that provides "
            f"it (an entry point in the group {ENTRY_POINT_GROUP!r}; for the repository's "
            "PPO baseline: pip install -e . in the checkout) or call "
            "gigastep.eval.matches.register_player_loader"
        )
    try:
        return eps[name].load()
    except Exception as err:  # an entry point's import can fail in any way
        raise ValueError(
            f"the player loader {name!r} ({eps[name].value}) failed to import: {err}"
        ) from None


def _read_checkpoint(path: str) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"loading the checkpoint {path!r} needs PyTorch: pip install 'gigastep[torch]'"
        ) from None
    import pickle

    try:
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(
            f"refusing to load {path!r}: it holds pickled Python objects beyond tensors and "
            f"plain containers, and checkpoints are loaded without running code ({first})"
        ) from None
    except Exception as err:  # torch.load fails in many ways on files it does not know
        raise ValueError(
            f"{path!r} is not a Gigastep checkpoint (torch.load failed: {err})"
        ) from None
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint:
        keys = sorted(map(str, checkpoint))[:8] if isinstance(checkpoint, dict) else None
        what = f"a dict with keys {keys}" if keys is not None else type(checkpoint).__name__
        raise ValueError(
            f"{path!r} is not a Gigastep player checkpoint: expected a dict with a "
            f"{CHECKPOINT_KEY!r} entry naming its loader, got {what}"
        )
    return checkpoint


def load_player(path: str | os.PathLike[str], device: Device = "cpu") -> TorchPlayer:
    """The `TorchPlayer` stored in a checkpoint file (see the module docstring)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint file {path!r}")
    checkpoint = _read_checkpoint(path)
    name = checkpoint[CHECKPOINT_KEY]
    if not isinstance(name, str):
        raise ValueError(f"{path!r}: {CHECKPOINT_KEY!r} must name a loader, got {name!r}")
    try:
        player = _loader(name)(checkpoint, device)
    except ValueError as err:  # a loader's refusal names the file, as every error here does
        if path in str(err):
            raise
        raise ValueError(f"{path!r}: {err}") from None
    if not isinstance(player, TorchPlayer):
        raise TypeError(
            f"the loader {name!r} returned {type(player).__name__}, which is not a TorchPlayer "
            "(it needs a `name`, `check(config, team)` and `actor(config, team, num_envs, "
            "device, seed)`)"
        )
    return player


def resolve_player(player: PlayerLike, device: Device = "cpu") -> Player:
    """A `ScriptedPlayer` or `TorchPlayer` from any player form (see the module docstring).

    Raises:
        ValueError / FileNotFoundError: an unknown name (with the closest policy names) or a
            checkpoint that cannot be loaded.
    """
    if isinstance(player, (ScriptedPlayer, TorchPlayer)):
        return player
    if isinstance(player, os.PathLike):
        return load_player(player, device)
    if isinstance(player, str):
        if player in POLICIES:
            return ScriptedPlayer(player, POLICIES[player])
        if os.path.exists(player):
            return load_player(player, device)
        raise ValueError(
            f"unknown player {player!r}: not a scripted policy (closest: "
            f"{closest(player, POLICIES)}; all: {sorted(POLICIES)}) and no such checkpoint file"
        )
    if callable(player):
        return ScriptedPlayer(getattr(player, "__name__", repr(player)), player)
    raise TypeError(
        "a player is a scripted policy name, a policy(config, state, key) callable, a "
        f"TorchPlayer or a checkpoint path; got {type(player).__name__}"
    )


# ------------------------------------------------------------------------------------------
# Statistics and results
# ------------------------------------------------------------------------------------------


def normal_quantile(confidence: float) -> float:
    """z, the two-sided standard normal quantile of `confidence` in (0, 1) (1.96 for 0.95):
    the half-width, in standard errors, of a normal confidence interval."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion.

    With p = k / n and z the two-sided normal quantile of `confidence`:
    (p + z^2 / 2n ± z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n).
    `trials == 0` gives (0, 1): nothing is known.
    """
    if trials < 0 or not 0 <= successes <= max(trials, 0):
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return (0.0, 1.0)
    z = normal_quantile(confidence)
    p, n = successes / trials, trials
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    # The bounds at k = 0 and k = n are exactly 0 and 1 (the formula leaves rounding there).
    lo = 0.0 if successes == 0 else max(0.0, (centre - half) / scale)
    hi = 1.0 if successes == trials else min(1.0, (centre + half) / scale)
    return (lo, hi)


def _rate(k: int, n: int) -> float:
    return k / n if n else math.nan


def _mean(total: float, n: int) -> float:
    return total / n if n else math.nan


@dataclass
class SeatResult:
    """The games in which player A played team `team`."""

    team: int
    games: int
    wins: int
    draws: int
    losses: int
    return_a: float  # summed over those games: A's team return (sum over its agents)
    return_b: float
    length: int  # summed episode lengths

    @property
    def win_rate(self) -> float:
        return _rate(self.wins, self.games)


@dataclass
class MatchResult:
    """Games between player A and player B; every count is from A's point of view.

    `games` counts completed episodes only; games still running after `max_steps` steps are
    in `unfinished` and nowhere else. Returns are team returns: the sum over a team's agents
    of their episode returns, averaged over the counted games.
    """

    player_a: str
    player_b: str
    scenario: str
    scenario_hash: str
    seats: tuple[SeatResult, ...]
    requested_games: int
    unfinished: int
    max_steps: int
    seed: int
    confidence: float = 0.95
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def games(self) -> int:
        return sum(s.games for s in self.seats)

    @property
    def wins(self) -> int:
        return sum(s.wins for s in self.seats)

    @property
    def draws(self) -> int:
        return sum(s.draws for s in self.seats)

    @property
    def losses(self) -> int:
        return sum(s.losses for s in self.seats)

    @property
    def win_rate(self) -> float:
        return _rate(self.wins, self.games)

    @property
    def draw_rate(self) -> float:
        return _rate(self.draws, self.games)

    @property
    def loss_rate(self) -> float:
        return _rate(self.losses, self.games)

    @property
    def win_rate_ci(self) -> tuple[float, float]:
        return wilson_interval(self.wins, self.games, self.confidence)

    @property
    def loss_rate_ci(self) -> tuple[float, float]:
        return wilson_interval(self.losses, self.games, self.confidence)

    @property
    def decided_win_rate(self) -> float:
        """A's share of the games that had a winner."""
        return _rate(self.wins, self.wins + self.losses)

    @property
    def mean_return_a(self) -> float:
        return _mean(sum(s.return_a for s in self.seats), self.games)

    @property
    def mean_return_b(self) -> float:
        return _mean(sum(s.return_b for s in self.seats), self.games)

    @property
    def mean_episode_length(self) -> float:
        return _mean(sum(s.length for s in self.seats), self.games)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (NaN where nothing was counted becomes None)."""

        def clean(x: object) -> object:
            if isinstance(x, float) and math.isnan(x):
                return None
            if isinstance(x, (tuple, list)):
                return [clean(v) for v in x]
            return x

        out = {
            "player_a": self.player_a,
            "player_b": self.player_b,
            "scenario": self.scenario,
            "scenario_hash": self.scenario_hash,
            "games": self.games,
            "wins": self.wins,
            "draws": self.draws,
            "losses": self.losses,
            "win_rate": self.win_rate,
            "draw_rate": self.draw_rate,
            "loss_rate": self.loss_rate,
            "win_rate_ci": self.win_rate_ci,
            "loss_rate_ci": self.loss_rate_ci,
            "decided_win_rate": self.decided_win_rate,
            "confidence": self.confidence,
            "mean_return_a": self.mean_return_a,
            "mean_return_b": self.mean_return_b,
            "mean_episode_length": self.mean_episode_length,
            "seats": [
                {
                    "a_team": s.team,
                    "games": s.games,
                    "wins": s.wins,
                    "draws": s.draws,
                    "losses": s.losses,
                }
                for s in self.seats
            ],
            "requested_games": self.requested_games,
            "unfinished": self.unfinished,
            "max_steps": self.max_steps,
            "seed": self.seed,
            "notes": list(self.notes),
        }
        return {k: clean(v) for k, v in out.items()}

    def summary(self) -> str:
        """A few lines for people."""
        pct = int(round(100 * self.confidence))
        lo, hi = self.win_rate_ci
        llo, lhi = self.loss_rate_ci
        seats = ", ".join(f"{s.games} as team {s.team}" for s in self.seats)
        lines = [
            f"{self.player_a} vs {self.player_b} on {self.scenario} ({self.scenario_hash}): "
            f"{self.games} games ({seats})",
            f"  {self.player_a}: {self.wins} wins, {self.draws} draws, {self.losses} losses",
            f"  win rate  {self.win_rate:.3f}  ({pct}% CI {lo:.3f}-{hi:.3f})",
            f"  loss rate {self.loss_rate:.3f}  ({pct}% CI {llo:.3f}-{lhi:.3f})",
            f"  mean team return {self.player_a} {self.mean_return_a:.2f}, {self.player_b} "
            f"{self.mean_return_b:.2f}; mean episode length {self.mean_episode_length:.1f} steps",
        ]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


# ------------------------------------------------------------------------------------------
# Seats
# ------------------------------------------------------------------------------------------


def symmetric(config: EnvConfig) -> bool:
    """Whether both teams have the same agent types in the same order (so that swapping the
    teams gives the same game)."""
    teams = np.asarray(config.teams)
    rows = [np.flatnonzero(teams == t) for t in (0, 1)]
    if len(rows[0]) != len(rows[1]):
        return False
    tables = [getattr(config, t) for t in PER_AGENT_FIELDS]
    if config.type_names:
        tables.append(config.type_names)
    return all([tab[i] for i in rows[0]] == [tab[i] for i in rows[1]] for tab in tables)


def _seat_plan(config: EnvConfig, games: int, a_team: int | None) -> list[tuple[int, int]]:
    """[(team A plays, games)] : both teams (A as team 0 in ceil(games / 2)) when `a_team` is
    None and the game is symmetric, else all games with A as `a_team` (default 0)."""
    if a_team is None and symmetric(config):
        first = -(-games // 2)
        return [(0, first), (1, games - first)] if games - first else [(0, first)]
    team = 0 if a_team is None else a_team
    if isinstance(team, bool) or team not in (0, 1):
        raise ValueError(f"a_team must be 0, 1 or None (both, in symmetric games), got {a_team!r}")
    return [(team, games)]


# ------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------


@dataclass
class _Tally:
    """The first episode of each of B game slots (host NumPy copies)."""

    finished: np.ndarray  # (B,) bool
    winner: np.ndarray  # (B,) int32
    returns: np.ndarray  # (B, n) float32
    length: np.ndarray  # (B,) int32


def _seat_result(config: EnvConfig, a_team: int, tally: _Tally, rows: slice) -> SeatResult:
    teams = np.asarray(config.teams)
    done = tally.finished[rows]
    winner = tally.winner[rows][done]
    team_return = [tally.returns[rows][done][:, teams == t].sum(axis=1) for t in (0, 1)]
    return SeatResult(
        team=a_team,
        games=int(done.sum()),
        wins=int(np.sum(winner == a_team)),
        draws=int(np.sum(winner == -1)),
        losses=int(np.sum(winner == 1 - a_team)),
        return_a=float(team_return[a_team].sum()),
        return_b=float(team_return[1 - a_team].sum()),
        length=int(tally.length[rows][done].sum()),
    )


def evaluate(
    player_a: PlayerLike,
    player_b: PlayerLike,
    scenario: EnvLike = DEFAULT_SCENARIO,
    games: int = 256,
    *,
    seed: int = 0,
    a_team: int | None = None,
    max_steps: int | None = None,
    batch_size: int = 4096,
    device: Device = "cpu",
    confidence: float = 0.95,
    progress: Progress | None = None,
    **overrides: Any,
) -> MatchResult:
    """Play `games` complete episodes of `scenario` between two players.

    Args:
        player_a, player_b: players (a scripted policy name, a policy callable, a
            `TorchPlayer` or a checkpoint path).
        scenario: a scenario name, `GigastepEnv` or `EnvConfig` (EnvConfig `overrides` are
            applied to it).
        games: episodes to count. In a symmetric game A plays team 0 in ceil(games / 2) of
            them and team 1 in the others (`a_team` fixes A's team instead).
        seed: seeds the start positions and every random draw (the two halves use the same
            start positions with the sides swapped).
        max_steps: steps after which unfinished games are given up (not counted, noted in the
            result); default the scenario's `max_episode_length`, by which every game ends.
        batch_size: games played at once (more are played in rounds).
        device: torch device for TorchPlayers ("cpu", "cuda", ...).
        progress: optional callable `progress(finished_games)` called as games finish.

    Returns:
        A `MatchResult`.
    """
    env = resolve_env(scenario, **overrides)
    config = env.config
    for name, value in (("games", games), ("batch_size", batch_size)):
        check_positive_int(value, name)
    steps = config.max_episode_length if max_steps is None else max_steps
    if steps is None:
        raise ValueError(
            "this scenario has no time limit (max_episode_length=None): pass max_steps, after "
            "which unfinished games are not counted"
        )
    check_positive_int(steps, "max_steps")
    plan = _seat_plan(config, games, a_team)
    a, b = resolve_player(player_a, device), resolve_player(player_b, device)
    for team, _ in plan:
        _check_player(a, config, team, "A")
        _check_player(b, config, 1 - team, "B")
    seats = _play_rounds(config, a, b, plan, steps, seed, batch_size, device, progress)
    unfinished = games - sum(s.games for s in seats)
    notes = []
    if unfinished:
        notes.append(
            f"{unfinished} of {games} games had not ended after {steps} steps and are not counted"
        )
    spec = getattr(env, "spec", None)
    name = spec.name if spec is not None else "custom"
    from gigastep.scenarios import scenario_hash

    return MatchResult(
        player_a=a.name,
        player_b=b.name,
        scenario=name,
        scenario_hash=scenario_hash(config),
        seats=tuple(seats),
        requested_games=games,
        unfinished=unfinished,
        max_steps=steps,
        seed=seed,
        confidence=confidence,
        notes=tuple(notes),
    )


def _check_player(player: Player, config: EnvConfig, team: int, which: str) -> None:
    try:
        player.check(config, team)
    except ValueError as err:
        raise ValueError(f"player {which} ({player.name}) cannot play team {team}: {err}") from None


def _slots(plan: list[tuple[int, int]], batch_size: int) -> int:
    """Game slots per seat and round: the largest seat's games rounded up to a power of two
    (so that evaluations of different sizes share compiled loops), at most batch_size over
    the seats. Every round has the same slots; those of the last round that are not needed
    play along uncounted."""
    most = max(count for _, count in plan)
    return max(1, min(1 << (most - 1).bit_length(), batch_size // len(plan)))


def _play_rounds(
    config: EnvConfig,
    a: Player,
    b: Player,
    plan: list[tuple[int, int]],
    steps: int,
    seed: int,
    batch_size: int,
    device: Device,
    progress: Progress | None,
) -> list[SeatResult]:
    """Play the seat plan in rounds of at most `batch_size` games; one SeatResult per seat."""
    totals = {team: SeatResult(team, 0, 0, 0, 0, 0.0, 0.0, 0) for team, _ in plan}
    remaining = dict(plan)
    size = _slots(plan, batch_size)
    groups = [(team, size) for team, _ in plan]
    done, round_index = 0, 0
    while any(remaining.values()):
        want = [min(remaining[team], size) for team, _ in plan]

        def report(n: int, base: int = done, cap: int = sum(want)) -> None:  # noqa: B008 (bound per round)
            if progress is not None:
                progress(base + min(n, cap))

        tally = _play(config, a, b, groups, steps, seed + 7919 * round_index, device, report)
        for g, ((team, _), count) in enumerate(zip(plan, want, strict=True)):
            rows = slice(g * size, g * size + count)
            _add(totals[team], _seat_result(config, team, tally, rows))
            remaining[team] -= count
            done += count
        round_index += 1
        if progress is not None:
            progress(done)
    return [totals[team] for team, _ in plan]


def _add(total: SeatResult, part: SeatResult) -> None:
    for f in dataclasses.fields(SeatResult):
        if f.name != "team":
            setattr(total, f.name, getattr(total, f.name) + getattr(part, f.name))


def _play(
    config: EnvConfig,
    a: Player,
    b: Player,
    groups: list[tuple[int, int]],
    steps: int,
    seed: int,
    device: Device,
    report: Callable[[int], None],
) -> _Tally:
    """One round: game slots grouped by A's team, A's games in each group first."""
    if isinstance(a, ScriptedPlayer) and isinstance(b, ScriptedPlayer):
        return _play_scripted(config, a, b, groups, steps, seed, report)
    return _play_torch(config, a, b, groups, steps, seed, device, report)


# ------------------------------------------------------------------------------------------
# Scripted vs scripted: one compiled JAX loop
# ------------------------------------------------------------------------------------------


def _policy_table(*players: ScriptedPlayer) -> tuple[tuple[Policy, ...], list[int]]:
    """The built-in policies followed by any other policy of `players` (a static table, so
    that every pairing of built-ins shares one compiled loop), and each player's index."""
    table = list(POLICIES.values())
    for p in players:
        if p.policy not in table:
            table.append(p.policy)
    return tuple(table), [table.index(p.policy) for p in players]


def _all_policies(
    config: EnvConfig, table: tuple[Policy, ...], state: EnvState, key: jax.Array
) -> jax.Array:
    """(P, n, ...) the actions of every policy of the table for one game."""
    return jnp.stack([p(config, state, key).astype(_action_dtype(config)) for p in table])


def _action_dtype(config: EnvConfig) -> DTypeLike:
    return jnp.int32 if config.discrete_actions else jnp.float32


def _joint_actions(
    config: EnvConfig, table: tuple[Policy, ...], seat: jax.Array, state: EnvState, key: jax.Array
) -> jax.Array:
    """All agents' actions of one game: team 0 by policy table[seat[0]], team 1 by
    table[seat[1]]. Every policy of the table is computed (they are cheap next to a step)
    and the two are picked, so the seat is data and one compiled loop plays every pairing."""
    actions = _all_policies(config, table, state, key)
    team0 = np.asarray(config.teams) == 0
    mask = jnp.asarray(team0.reshape((-1,) + (1,) * (actions.ndim - 2)))
    return jnp.where(mask, actions[seat[0]], actions[seat[1]])


def _record(
    rec: _Record,
    states: EnvState,
    ep_done: jax.Array,
    t: jax.Array,
    config: EnvConfig,
    steps: jax.Array,
) -> _Record:
    """Keep the outcome of each slot's first episode if it ends at step t (< steps)."""
    finished, winner, returns, length = rec
    new = ep_done & ~finished & (t < steps)
    won = _env.episode_winner(config, states.agents.alive, ep_done)
    return (
        finished | new,
        jnp.where(new, won, winner),
        jnp.where(new[:, None], states.episode.returns, returns),
        jnp.where(new, states.episode.step, length),
    )


@lru_cache(maxsize=32)
def _scripted_segment(
    config: EnvConfig, table: tuple[Policy, ...]
) -> Callable[..., tuple[EnvState, jax.Array, _Record, jax.Array]]:
    """Compiled: (states, key, rec, t, seats (B, 2), steps) -> (states, key, rec, t) after
    SEGMENT_STEPS steps of `gigastep.env.batched_step`. Finished games are not reset: each
    slot plays one episode, and what it does after its end is never read."""
    joint = jax.vmap(partial(_joint_actions, config, table))

    def body(carry: _Carry, _: object) -> tuple[_Carry, None]:
        states, key, rec, t, seats, steps = carry
        key, k_act, k_step = jax.random.split(key, 3)
        b = seats.shape[0]
        actions = joint(seats, states, jax.random.split(k_act, b))
        _, states, _, _, ep_done = _env.batched_step(
            config, states, actions, jax.random.split(k_step, b)
        )
        rec = _record(rec, states, ep_done, t, config, steps)
        return (states, key, rec, t + 1, seats, steps), None

    def run(
        states: EnvState,
        key: jax.Array,
        rec: _Record,
        t: jax.Array,
        seats: jax.Array,
        steps: jax.Array,
    ) -> tuple[EnvState, jax.Array, _Record, jax.Array]:
        carry, _ = jax.lax.scan(body, (states, key, rec, t, seats, steps), length=SEGMENT_STEPS)
        return carry[:4]

    return jax.jit(run, donate_argnums=(0, 2))


_Record: TypeAlias = tuple[jax.Array, jax.Array, jax.Array, jax.Array]
"""(finished (B,), winner (B,), returns (B, n), length (B,)) of each slot's first episode."""

_Carry: TypeAlias = tuple[EnvState, jax.Array, _Record, jax.Array, jax.Array, jax.Array]
"""(states, key, record, t, seats, steps) of the scripted loop."""


def _empty_record(b: int, n: int) -> _Record:
    return (
        jnp.zeros(b, bool),
        jnp.full(b, -1, jnp.int32),
        jnp.zeros((b, n), jnp.float32),
        jnp.zeros(b, jnp.int32),
    )


def _play_scripted(
    config: EnvConfig,
    a: ScriptedPlayer,
    b: ScriptedPlayer,
    groups: list[tuple[int, int]],
    steps: int,
    seed: int,
    report: Callable[[int], None],
) -> _Tally:
    table, (ia, ib) = _policy_table(a, b)
    seats = np.concatenate(
        [np.tile([(ia, ib) if team == 0 else (ib, ia)], (size, 1)) for team, size in groups]
    )
    total = len(seats)
    states = _groups_from_one_start(config, groups, seed)
    key = jax.random.PRNGKey(seed + 1)
    rec = _empty_record(total, config.n_agents)
    run = _scripted_segment(config, table)
    t, limit, seat_ids = jnp.int32(0), jnp.int32(steps), jnp.asarray(seats, jnp.int32)
    for _ in range(-(-steps // SEGMENT_STEPS)):
        states, key, rec, t = run(states, key, rec, t, seat_ids, limit)
        count = int(jnp.sum(rec[0]))  # one host read per segment
        report(count)
        if count == total:
            break
    return _Tally(*(np.asarray(x) for x in rec))


class _Side:
    """One team of one group of games, played by an actor (torch) or, inside TorchVecEnv's
    compiled step, by a scripted policy."""

    def __init__(
        self, player: Player, config: EnvConfig, team: int, rows: slice, device: Device, seed: int
    ) -> None:
        self.player, self.team, self.rows = player, team, rows
        self.index = np.flatnonzero(np.asarray(config.teams) == team)
        lo, hi = int(self.index[0]), int(self.index[-1]) + 1
        self.agents: slice | list[int] = (
            slice(lo, hi) if hi - lo == len(self.index) else list(self.index)
        )
        self.discrete = config.discrete_actions
        self.actor: TorchActor | None = None
        if not isinstance(player, ScriptedPlayer):
            self.actor = player.actor(config, team, rows.stop - rows.start, device, seed)

    def observe(self, obs: TorchObservation) -> TorchObservation:
        """This side's observations: its games' rows, its team's agents, contiguous."""
        return jax.tree_util.tree_map(lambda x: x[self.rows][:, self.agents].contiguous(), obs)

    def act(self, obs: TorchObservation, first: torch.Tensor, check: bool) -> torch.Tensor:
        assert self.actor is not None  # only the sides played by an actor act
        out = self.actor(self.observe(obs), first[self.rows])
        if check:
            _check_actor_output(out, self, obs)
        return out


def _check_actor_output(actions: Any, side: _Side, obs: TorchObservation) -> None:
    # `actions` is whatever an actor returned: this checks that it is a tensor of the right form
    import torch

    b, m = side.rows.stop - side.rows.start, len(side.index)
    leaf = jax.tree_util.tree_leaves(obs)[0]
    discrete = side.discrete
    shape = (b, m) if discrete else (b, m, 3)
    ok = isinstance(actions, torch.Tensor) and tuple(actions.shape) == shape
    if ok and actions.device != leaf.device:
        raise ValueError(
            f"the actor of {side.player.name} returned actions on {actions.device}; the "
            f"observations are on {leaf.device}"
        )
    if not ok or actions.is_floating_point() == discrete:
        what = "integer" if discrete else "float32"
        got = (
            f"{actions.dtype} of shape {tuple(actions.shape)}"
            if isinstance(actions, torch.Tensor)
            else type(actions).__name__
        )
        raise ValueError(
            f"the actor of {side.player.name} (team {side.team}) must return {what} actions "
            f"of shape {shape} (games, team agents{'' if discrete else ', 3'}); got {got}"
        )


def _groups_from_one_start(config: EnvConfig, groups: list[tuple[int, int]], seed: int) -> EnvState:
    """Start states of all slots: every group starts from the same positions."""
    sizes = [size for _, size in groups]
    keys = jax.random.split(jax.random.PRNGKey(seed), max(sizes))
    return _env.GigastepEnv(config).v_reset(jnp.concatenate([keys[:s] for s in sizes]))[1]


def _play_torch(
    config: EnvConfig,
    a: Player,
    b: Player,
    groups: list[tuple[int, int]],
    steps: int,
    seed: int,
    device: Device,
    report: Callable[[int], None],
) -> _Tally:
    import torch

    from gigastep.adapters.torch import ScriptedTeam, TorchVecEnv

    total = sum(size for _, size in groups)
    sides: list[_Side] = []
    start = 0
    for team_a, size in groups:
        rows = slice(start, start + size)
        for player, team in ((a, team_a), (b, 1 - team_a)):
            sides.append(_Side(player, config, team, rows, device, seed + len(sides)))
        start += size
    # Scripted sides play inside the compiled step; the actors' rows come from the caller.
    # (a side without an actor is a ScriptedPlayer's)
    scripted = [
        ScriptedTeam(s.rows.start, s.rows.stop, s.team, cast(ScriptedPlayer, s.player).policy)
        for s in sides
        if s.actor is None
    ]
    venv = TorchVecEnv(
        config, num_envs=total, seed=seed, device=device, final_obs=False, scripted=scripted
    )
    obs = venv.reset_to(_groups_from_one_start(config, groups, seed))
    dev = venv.device
    dtype = torch.int32 if config.discrete_actions else torch.float32
    shape = (total, config.n_agents) + (() if config.discrete_actions else (3,))
    actions = torch.zeros(shape, dtype=dtype, device=dev)  # scripted rows stay ignored zeros
    first = torch.ones(total, dtype=torch.bool, device=dev)
    finished = torch.zeros(total, dtype=torch.bool, device=dev)
    winner = torch.full((total,), -1, dtype=torch.int32, device=dev)
    returns = torch.zeros(total, config.n_agents, device=dev)
    length = torch.zeros(total, dtype=torch.int32, device=dev)
    for t in range(steps):
        for side in sides:
            if side.actor is not None:
                actions[side.rows, side.agents] = side.act(obs, first, check=t == 0).to(dtype)
        obs, _, _, ep_dones, info = venv.step(actions)
        new = ep_dones & ~finished
        finished |= new
        winner = torch.where(new, info["winner"], winner)
        returns = torch.where(new[:, None], info["episode_return"], returns)
        length = torch.where(new, info["episode_length"], length)
        first = ep_dones
        if t % SEGMENT_STEPS == SEGMENT_STEPS - 1 or t == steps - 1:
            count = int(finished.sum())  # one host read per segment
            report(count)
            if count == total:
                break
    venv.close()
    return _Tally(*(x.cpu().numpy() for x in (finished, winner, returns, length)))
