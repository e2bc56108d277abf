"""Cross-play leagues and ratings: who beats whom, and one number per player with its error.

`play_league(players, scenario, games)` plays every pair of players (`gigastep.eval.matches`)
and fits ratings to all its games; `League.write(folder)` writes

- `matrix.csv`: the win rate of the row player against the column player,
- `results.csv`: one row per pair (wins, draws, losses, rates with Wilson intervals, returns),
- `ratings.csv`: one row per player (rating, standard error, 95% interval, record),
- `league.json`: the same per player in the marl-eval layout
  (`{"gigastep": {scenario: {player: {"seed_S": {"step_0": {...}, "absolute_metrics":
  {...}}}}}}`, every metric a one-element list),
- `heatmap.png`: the win-rate matrix, annotated.

Rating model (`fit_ratings`): Bradley-Terry on the Elo scale with Davidson's (1970) explicit
draw outcome. With strengths pi = exp(theta) and a draw parameter nu,
P(i beats j) = pi_i / D, P(draw) = nu sqrt(pi_i pi_j) / D, P(j beats i) = pi_j / D, where
D = pi_i + pi_j + nu sqrt(pi_i pi_j): a draw counts as evidence that two players are close,
not as half a win, and between equal players P(draw) = nu / (2 + nu). Given a decision,
P(i beats j) = 1 / (1 + 10^((R_j - R_i) / 400)) for ratings R = 1500 + 400 / ln 10 * theta,
centred on a mean of 1500. theta and log nu are fitted by maximum likelihood (scipy, trust
region with the exact Hessian) under a weak Gaussian prior on each rating (standard deviation
`prior_sd` Elo, default 1000) that keeps the rating of a player who wins or loses every game
finite; with mixed results the prior moves ratings by a few points at most. Standard errors
come from the inverse Hessian of the negative log posterior (the covariance of the centred
ratings). Without any draw the model is plain Bradley-Terry (nu = 0).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from gigastep._util.files import atomic_path, write_text
from gigastep.eval.matches import DEFAULT_SCENARIO, evaluate
from gigastep.eval.players import resolve_player
from gigastep.eval.statistics import MatchResult, normal_quantile

if TYPE_CHECKING:
    from gigastep.eval.matches import Progress
    from gigastep.eval.players import Device, Player, PlayerLike
    from gigastep.versus import EnvLike

Outcome: TypeAlias = "MatchResult | tuple[str, str, int, int, int]"
"""A match: a `MatchResult`, or (player_a, player_b, wins, draws, losses) counted for A."""

__all__ = ["ELO_SCALE", "League", "Rating", "Ratings", "fit_ratings", "play_league"]

ELO_SCALE = 400.0 / math.log(10.0)
"""Elo points per unit of natural log-strength."""

BASE_RATING = 1500.0
FILES = ("matrix.csv", "results.csv", "ratings.csv", "league.json", "heatmap.png")
"""What `League.write` writes."""
DRAW_PRIOR_SD = 10.0  # on log nu; only matters when every game is a draw


@dataclass(frozen=True)
class Rating:
    """One player's fitted rating and record."""

    player: str
    rating: float  # Elo scale, the players' mean is BASE_RATING
    se: float  # standard error, Elo points
    ci_low: float
    ci_high: float
    games: int
    wins: int
    draws: int
    losses: int

    @property
    def score(self) -> float:
        """(wins + draws / 2) / games."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else math.nan


@dataclass(frozen=True)
class Ratings:
    """Ratings of a set of players fitted to their games (see the module docstring)."""

    ratings: tuple[Rating, ...]  # in the order the players were given
    draw_parameter: float  # nu; 0 when no game was drawn
    prior_sd: float | None
    confidence: float

    def __getitem__(self, player: str) -> Rating:
        for r in self.ratings:
            if r.player == player:
                return r
        raise KeyError(f"no rating for {player!r}; players: {[r.player for r in self.ratings]}")

    def ranked(self) -> list[Rating]:
        """Best first."""
        return sorted(self.ratings, key=lambda r: -r.rating)

    @property
    def model(self) -> str:
        draws = (
            "no draws: plain Bradley-Terry"
            if self.draw_parameter == 0
            else (f"Davidson draws, nu = {self.draw_parameter:.3g}")
        )
        prior = "no prior" if self.prior_sd is None else f"prior sd {self.prior_sd:g} Elo"
        return f"Bradley-Terry (Elo scale), {draws}, {prior}"


def _records(outcomes: Iterable[Outcome]) -> list[tuple[str, str, int, int, int]]:
    out: list[tuple[str, str, int, int, int]] = []
    for o in outcomes:
        if isinstance(o, MatchResult):
            out.append((o.player_a, o.player_b, o.wins, o.draws, o.losses))
        else:
            a, b, wins, draws, losses = o
            if min(wins, draws, losses) < 0:
                raise ValueError(f"negative counts in {o!r}")
            if a == b:
                raise ValueError(f"a player cannot be rated against itself: {o!r}")
            out.append((str(a), str(b), int(wins), int(draws), int(losses)))
    return out


def _objective(
    x: np.ndarray,
    i: np.ndarray,
    j: np.ndarray,
    w: np.ndarray,
    d: np.ndarray,
    lost: np.ndarray,
    k: int,
    prior_var: float | None,
    draws: bool,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Negative log posterior, its gradient and Hessian in x = (theta_1..k[, log nu]).

    Per pair with n = w + d + l games and log D = logsumexp(ti, tj, eta + (ti + tj) / 2):
    NLL = n log D - w ti - l tj - d (eta + (ti + tj) / 2). A gauge term (sum theta)^2 / 2,
    to which the likelihood is blind, fixes the mean at 0 (then removed from the covariance).
    """
    theta = x[:k]
    ti, tj = theta[i], theta[j]
    eta = x[k] if draws else -np.inf
    logs = np.stack([ti, tj, eta + 0.5 * (ti + tj)])
    log_d = np.logaddexp.reduce(logs, axis=0)
    pa, pb, pc = np.exp(logs - log_d)
    n = w + d + lost
    value = np.sum(n * log_d - w * ti - lost * tj)
    if draws:
        value -= np.sum(d * (eta + 0.5 * (ti + tj)))
    g = np.stack([pa + pc / 2, pb + pc / 2, pc])  # d log D / d (ti, tj, eta)
    obs = np.stack([w + d / 2, lost + d / 2, d])
    per_pair = n * g - obs  # (3, P)
    second = np.stack(
        [
            np.stack([pa + pc / 4, pc / 4, pc / 2]),
            np.stack([pc / 4, pb + pc / 4, pc / 2]),
            np.stack([pc / 2, pc / 2, pc]),
        ]
    )
    hess_pair = n * (second - g[:, None] * g[None, :])  # (3, 3, P)
    size = k + int(draws)
    grad = np.zeros(size)
    hess = np.zeros((size, size))
    idx = [i, j, np.full_like(i, k)] if draws else [i, j]
    for r, ir in enumerate(idx):
        np.add.at(grad, ir, per_pair[r])
        for c, ic in enumerate(idx):
            np.add.at(hess, (ir, ic), hess_pair[r, c])
    total = theta.sum()
    value += 0.5 * total**2 + (0.5 * np.sum(theta**2) / prior_var if prior_var else 0.0)
    grad[:k] += total + (theta / prior_var if prior_var else 0.0)
    hess[:k, :k] += 1.0 + (np.eye(k) / prior_var if prior_var else 0.0)
    if draws:
        value += 0.5 * eta**2 / DRAW_PRIOR_SD**2
        grad[k] += eta / DRAW_PRIOR_SD**2
        hess[k, k] += 1.0 / DRAW_PRIOR_SD**2
    return value, grad, hess


def fit_ratings(
    outcomes: Iterable[Outcome],
    players: Sequence[str] | None = None,
    prior_sd: float | None = 1000.0,
    confidence: float = 0.95,
) -> Ratings:
    """Fit Elo-scale Bradley-Terry-Davidson ratings to game outcomes (module docstring).

    Args:
        outcomes: `MatchResult`s or tuples (player_a, player_b, wins, draws, losses) of A.
        players: the players to rate, in output order (default: in order of appearance).
        prior_sd: standard deviation of the Gaussian prior on each rating, Elo points; None
            for plain maximum likelihood (which diverges if a player wins every game).
        confidence: of the intervals `ci_low`..`ci_high` (normal, +- z se).
    """
    try:
        from scipy.optimize import minimize
    except ImportError:
        raise ImportError("fitting ratings needs scipy: pip install 'gigastep[eval]'") from None

    records = _records(outcomes)
    names = (
        list(players)
        if players is not None
        else list(dict.fromkeys(n for r in records for n in r[:2]))
    )
    index: dict[Any, int] = {p: m for m, p in enumerate(names)}
    missing = sorted({n for r in records for n in r[:2]} - set(index))
    if missing:
        raise ValueError(f"outcomes name players {missing} that are not in players={names}")
    k = len(names)
    if k < 2 or not records:
        raise ValueError(f"ratings need games between at least 2 players; got {k} player(s)")
    i, j = (np.asarray([index[r[c]] for r in records]) for c in (0, 1))
    w, d, lost = (np.asarray([r[c] for r in records], np.float64) for c in (2, 3, 4))
    draws = bool(d.sum() > 0)
    prior_var = None if prior_sd is None else (prior_sd / ELO_SCALE) ** 2
    args = (i, j, w, d, lost, k, prior_var, draws)
    x0 = np.zeros(k + int(draws))
    fit = minimize(
        lambda x: _objective(x, *args)[:2],
        x0,
        jac=True,
        hess=lambda x: _objective(x, *args)[2],
        method="trust-exact",
        options={"gtol": 1e-9},
    )
    if not np.all(np.isfinite(fit.x)):
        raise ValueError(f"the rating fit did not converge ({fit.message})")
    cov = np.linalg.inv(_objective(fit.x, *args)[2])[:k, :k]
    centre = np.eye(k) - 1.0 / k  # the covariance of the centred ratings
    se = ELO_SCALE * np.sqrt(np.maximum(np.diag(centre @ cov @ centre), 0.0))
    theta = fit.x[:k] - fit.x[:k].mean()
    z = normal_quantile(confidence)
    out = []
    for m, name in enumerate(names):
        rec = [
            (r[2], r[3], r[4]) if r[0] == name else (r[4], r[3], r[2])
            for r in records
            if name in r[:2]
        ]
        wins, dr, losses = (int(sum(x[c] for x in rec)) for c in range(3))
        rating, err = BASE_RATING + ELO_SCALE * float(theta[m]), float(se[m])
        out.append(
            Rating(
                name,
                rating,
                err,
                rating - z * err,
                rating + z * err,
                wins + dr + losses,
                wins,
                dr,
                losses,
            )
        )
    nu = float(np.exp(fit.x[k])) if draws else 0.0
    return Ratings(tuple(out), nu, prior_sd, confidence)


# ------------------------------------------------------------------------------------------
# Leagues
# ------------------------------------------------------------------------------------------


@dataclass
class League:
    """Every pair of a list of players, each pair playing the same number of games."""

    players: list[str]
    scenario: str
    scenario_hash: str
    games_per_pair: int
    seed: int
    results: list[MatchResult]  # results[m] is players[pairs[m][0]] vs players[pairs[m][1]]
    pairs: list[tuple[int, int]]
    ratings: Ratings

    def win_matrix(self) -> np.ndarray:
        """(k, k) float: the win rate of row against column (NaN where they did not play)."""
        k = len(self.players)
        m = np.full((k, k), np.nan)
        for (a, b), r in zip(self.pairs, self.results, strict=True):
            m[a, b] = r.win_rate
            if a != b:
                m[b, a] = r.loss_rate
        return m

    def draw_matrix(self) -> np.ndarray:
        """(k, k) float: the draw rate of each pair (symmetric; NaN where they did not play)."""
        k = len(self.players)
        m = np.full((k, k), np.nan)
        for (a, b), r in zip(self.pairs, self.results, strict=True):
            m[a, b] = m[b, a] = r.draw_rate
        return m

    def summary(self) -> str:
        """The ratings table and the matrix as text."""
        lines = [
            f"league on {self.scenario} ({self.scenario_hash}), {self.games_per_pair} "
            f"games per pair; {self.ratings.model}",
            f"{'player':<20} {'rating':>8} {'+-se':>6} {'games':>6} {'W':>5} {'D':>5} {'L':>5}",
        ]
        for r in self.ratings.ranked():
            lines.append(
                f"{r.player:<20} {r.rating:8.1f} {r.se:6.1f} {r.games:6d} "
                f"{r.wins:5d} {r.draws:5d} {r.losses:5d}"
            )
        return "\n".join(lines)

    # --- files --------------------------------------------------------------------------
    def write(self, folder: str | os.PathLike[str]) -> dict[str, str]:
        """Write matrix.csv, results.csv, ratings.csv, league.json and heatmap.png into
        `folder` (created if needed); returns {name: path}."""
        os.makedirs(folder, exist_ok=True)
        paths = {n: os.path.join(folder, n) for n in FILES}
        write_text(paths["matrix.csv"], self._matrix_csv())
        write_text(paths["results.csv"], self._results_csv())
        write_text(paths["ratings.csv"], self._ratings_csv())
        write_text(paths["league.json"], json.dumps(self.marl_eval(), indent=2) + "\n")
        self.heatmap(paths["heatmap.png"])
        return paths

    def _matrix_csv(self) -> str:
        m = self.win_matrix()
        rows = [["player", *self.players]]
        for p, row in zip(self.players, m, strict=True):
            rows.append([p, *("" if math.isnan(v) else f"{v:.4f}" for v in row)])
        return _csv(rows)

    def _results_csv(self) -> str:
        head = [
            "player_a",
            "player_b",
            "games",
            "wins",
            "draws",
            "losses",
            "win_rate",
            "win_ci_low",
            "win_ci_high",
            "loss_rate",
            "loss_ci_low",
            "loss_ci_high",
            "mean_return_a",
            "mean_return_b",
            "mean_episode_length",
            "unfinished",
        ]
        rows: list[list[Any]] = [head]
        for r in self.results:
            rows.append(
                [
                    r.player_a,
                    r.player_b,
                    r.games,
                    r.wins,
                    r.draws,
                    r.losses,
                    *_fmt(
                        r.win_rate,
                        *r.win_rate_ci,
                        r.loss_rate,
                        *r.loss_rate_ci,
                        r.mean_return_a,
                        r.mean_return_b,
                        r.mean_episode_length,
                    ),
                    r.unfinished,
                ]
            )
        return _csv(rows)

    def _ratings_csv(self) -> str:
        head = [
            "player",
            "rating",
            "se",
            "ci_low",
            "ci_high",
            "games",
            "wins",
            "draws",
            "losses",
            "score",
        ]
        rows: list[list[Any]] = [head]
        for r in self.ratings.ranked():
            rows.append(
                [
                    r.player,
                    *_fmt(r.rating, r.se, r.ci_low, r.ci_high),
                    r.games,
                    r.wins,
                    r.draws,
                    r.losses,
                    *_fmt(r.score),
                ]
            )
        return _csv(rows)

    def marl_eval(self) -> dict[str, Any]:
        """Per-player metrics in marl-eval's raw-data layout (one-element metric lists)."""
        per_player = {}
        for m, name in enumerate(self.players):
            mine = [
                (r, a == m)
                for (a, b), r in zip(self.pairs, self.results, strict=True)
                if m in (a, b) and a != b
            ]
            games = sum(r.games for r, _ in mine)
            wins = sum(r.wins if first else r.losses for r, first in mine)
            draws = sum(r.draws for r, _ in mine)
            ret = sum(
                (r.mean_return_a if first else r.mean_return_b) * r.games
                for r, first in mine
                if r.games
            )
            rating = self.ratings[name]
            metrics = {
                "win_rate": [wins / games if games else None],
                "draw_rate": [draws / games if games else None],
                "loss_rate": [(games - wins - draws) / games if games else None],
                "mean_episode_return": [ret / games if games else None],
                "rating": [rating.rating],
                "rating_se": [rating.se],
                "games": [games],
            }
            per_player[name] = {
                f"seed_{self.seed}": {
                    "step_0": {"step_count": 0, **metrics},
                    "absolute_metrics": metrics,
                }
            }
        return {"gigastep": {self.scenario: per_player}}

    def heatmap(self, path: str | os.PathLike[str]) -> None:
        """Save the annotated win-rate matrix as a PNG (matplotlib)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError(
                "the heat map needs matplotlib: pip install 'gigastep[eval]'"
            ) from None
        m = self.win_matrix()
        k = len(self.players)
        size = 1.6 + 0.9 * k
        fig, ax = plt.subplots(figsize=(size + 1.2, size))
        image = ax.imshow(np.ma.masked_invalid(m), vmin=0.0, vmax=1.0, cmap="RdYlGn")
        draws = self.draw_matrix()
        for a in range(k):
            for b in range(k):
                if math.isnan(m[a, b]):
                    ax.text(b, a, "-", ha="center", va="center", fontsize=10)
                    continue
                ink = "white" if abs(m[a, b] - 0.5) > 0.3 else "black"  # dark ends of the map
                ax.text(
                    b, a - 0.08, f"{m[a, b]:.2f}", ha="center", va="center", fontsize=10, color=ink
                )
                ax.text(
                    b,
                    a + 0.22,
                    f"draws {draws[a, b]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color=ink,
                )
        ax.set_xticks(range(k), self.players, rotation=30, ha="right")
        ax.set_yticks(range(k), self.players)
        ax.set_xlabel("opponent")
        ax.set_ylabel("player")
        ax.set_title(
            f"win rate of row vs column (and draw rate)\n{self.scenario}, "
            f"{self.games_per_pair} games per pair",
            fontsize=10,
        )
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="win rate")
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100, format="png")
        plt.close(fig)


def _fmt(*values: float | None) -> list[Any]:
    return ["" if (v is None or math.isnan(v)) else f"{v:.4f}" for v in values]


def _csv(rows: Iterable[Iterable[Any]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def play_league(
    players: Sequence[PlayerLike],
    scenario: EnvLike = DEFAULT_SCENARIO,
    games: int = 64,
    *,
    seed: int = 0,
    self_play: bool = False,
    device: Device = "cpu",
    prior_sd: float = 1000.0,
    progress: Progress | None = None,
    **kwargs: Any,
) -> League:
    """Play every pair of `players` (`games` games each, `gigastep.eval.matches.evaluate`) and
    fit ratings to all the games.

    Args:
        players: at least 2 players in any form `evaluate` takes; labels repeated names.
        self_play: also play each player against itself (the matrix diagonal; not rated).
        progress: optional callable `progress(finished_games_in_the_league)`.
        kwargs: passed to `evaluate` (max_steps, batch_size, a_team, EnvConfig overrides).
    """
    if len(players) < 2:
        raise ValueError(f"a league needs at least 2 players, got {len(players)}")
    resolved = [resolve_player(p, device) for p in players]
    labels = _player_labels(resolved)
    pairs = [
        (a, b) for a in range(len(labels)) for b in range(a, len(labels)) if a != b or self_play
    ]
    results, done = [], 0
    for a, b in pairs:

        def step(n: int, base: int = done) -> None:
            if progress is not None:
                progress(base + n)

        r = evaluate(
            resolved[a],
            resolved[b],
            scenario,
            games,
            seed=seed,
            device=device,
            progress=step,
            **kwargs,
        )
        r.player_a, r.player_b = labels[a], labels[b]
        results.append(r)
        done += games
    rated = [r for (a, b), r in zip(pairs, results, strict=True) if a != b]
    ratings = fit_ratings(rated, players=labels, prior_sd=prior_sd)
    first = results[0]
    return League(labels, first.scenario, first.scenario_hash, games, seed, results, pairs, ratings)


def _player_labels(players: Sequence[Player]) -> list[str]:
    """Labels for players, made unique by appending #2, #3, ... to repeated names."""
    seen: dict[str, int] = {}
    out = []
    for p in players:
        seen[p.name] = seen.get(p.name, 0) + 1
        out.append(p.name if seen[p.name] == 1 else f"{p.name} #{seen[p.name]}")
    return out
