"""The results of a match and their statistics: per-seat tallies, win/draw/loss rates with
Wilson score intervals, returns and episode lengths.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


__all__ = ["MatchResult", "SeatResult", "normal_quantile", "wilson_interval"]


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
