"""Ratings (Bradley-Terry-Davidson on the Elo scale) and leagues (gigastep.eval.ratings)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from PIL import Image

from gigastep.eval.ratings import ELO_SCALE, fit_ratings, play_league

SCENARIO = "identical_5_vs_5_fobs_vec_void_disc"
LIMIT = {"max_episode_length": 200}
GAMES = 128  # as in test_evaluation.py: the same compiled loop


@pytest.fixture(scope="module")
def league():
    return play_league(["random", "circle", "pursuit"], SCENARIO, GAMES, seed=0, **LIMIT)


# ------------------------------------------------------------------------------------------
# The fit against closed forms
# ------------------------------------------------------------------------------------------


def test_two_players_without_draws_differ_by_400_log10_of_the_win_ratio():
    # Bradley-Terry maximum likelihood for one pair: P(a wins) = w / n, so
    # R_a - R_b = 400 log10(w / l); var(theta_a - theta_b) = n / (w l), each centred rating
    # carrying half the difference.
    r = fit_ratings([("a", "b", 30, 0, 10)], prior_sd=None)
    assert r["a"].rating - r["b"].rating == pytest.approx(400 * math.log10(3), abs=1e-6)
    assert r["a"].rating + r["b"].rating == pytest.approx(3000, abs=1e-9)
    assert r["a"].se == pytest.approx(ELO_SCALE * 0.5 * math.sqrt(40 / 300), rel=1e-6)
    assert r.draw_parameter == 0.0


def test_draws_are_a_third_outcome_with_their_own_parameter():
    # Davidson's model, saturated for one pair: P(win), P(draw), P(loss) = w/n, d/n, l/n, so
    # theta_a - theta_b = ln(w / l) and nu = d / sqrt(w l). The draws do not move the rating
    # difference (they are not half wins).
    r = fit_ratings([("a", "b", 30, 20, 10)], prior_sd=None)
    assert r["a"].rating - r["b"].rating == pytest.approx(400 * math.log10(3), abs=0.05)
    assert r.draw_parameter == pytest.approx(20 / math.sqrt(300), rel=1e-3)
    assert (r["a"].games, r["a"].wins, r["a"].draws, r["b"].losses) == (60, 30, 20, 30)


def test_a_player_who_wins_every_game_gets_a_finite_rating_under_the_prior():
    r = fit_ratings([("a", "b", 20, 0, 0), ("b", "c", 10, 0, 10)])
    assert all(np.isfinite([x.rating for x in r.ratings] + [x.se for x in r.ratings]))
    assert [x.player for x in r.ranked()][0] == "a"
    assert r["a"].ci_low < r["a"].rating < r["a"].ci_high


def test_the_prior_moves_mixed_results_by_a_few_points_only():
    outcomes = [("a", "b", 30, 5, 10), ("b", "c", 25, 5, 15), ("a", "c", 35, 2, 8)]
    free = fit_ratings(outcomes, prior_sd=None)
    weak = fit_ratings(outcomes)
    for p in "abc":
        assert weak[p].rating == pytest.approx(free[p].rating, abs=3.0)


def test_the_ratings_explain_the_outcomes_they_were_fitted_to():
    # At the maximum likelihood every player's expected score equals its actual score
    # (the score equations of the model): check them with the fitted ratings and nu.
    outcomes = [("a", "b", 30, 5, 10), ("b", "c", 25, 5, 15), ("a", "c", 35, 2, 8)]
    r = fit_ratings(outcomes, prior_sd=None)
    nu = r.draw_parameter
    for player in "abc":
        expected = actual = 0.0
        for a, b, w, d, lost in outcomes:
            if player not in (a, b):
                continue
            sa, sb = (math.exp((r[x].rating - 1500) / ELO_SCALE) for x in (a, b))
            den = sa + sb + nu * math.sqrt(sa * sb)
            p_win, p_draw = (sa if player == a else sb) / den, nu * math.sqrt(sa * sb) / den
            expected += (w + d + lost) * (p_win + p_draw / 2)
            actual += (w if player == a else lost) + d / 2
        assert expected == pytest.approx(actual, abs=1e-5)


def test_fit_ratings_rejects_bad_outcomes():
    with pytest.raises(ValueError, match="against itself"):
        fit_ratings([("a", "a", 1, 0, 1)])
    with pytest.raises(ValueError, match="not in players"):
        fit_ratings([("a", "b", 1, 0, 1)], players=["a"])
    with pytest.raises(ValueError, match="at least 2 players"):
        fit_ratings([])


# ------------------------------------------------------------------------------------------
# Leagues of the scripted policies
# ------------------------------------------------------------------------------------------


def test_fitted_ratings_order_random_below_circle_below_pursuit(league):
    # Measured here (128 games per pair, seed 0): random ~1190, circle ~1580, pursuit ~1730
    # Elo. circle beats random because random flies off the map; pursuit beats both.
    r = league.ratings
    assert r["random"].ci_high < r["circle"].ci_low, league.summary()
    assert r["circle"].rating < r["pursuit"].rating, league.summary()
    assert [x.player for x in r.ranked()] == ["pursuit", "circle", "random"]


def test_the_matrix_holds_each_pairs_win_rate_and_its_complement(league):
    m = league.win_matrix()
    assert np.isnan(np.diag(m)).all()
    (a, b), result = league.pairs[0], league.results[0]
    assert m[a, b] == result.win_rate and m[b, a] == result.loss_rate
    off = ~np.eye(3, dtype=bool)
    assert np.allclose((m + m.T + league.draw_matrix())[off], 1.0)  # win + loss + draw


def test_a_league_writes_matrix_ratings_json_and_heat_map(league, tmp_path):
    paths = league.write(tmp_path / "out")
    with open(paths["matrix.csv"]) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["player", "random", "circle", "pursuit"]
    assert rows[1][1] == "" and float(rows[3][1]) == pytest.approx(
        league.win_matrix()[2, 0], abs=5e-5
    )
    with open(paths["ratings.csv"]) as f:
        ratings = list(csv.DictReader(f))
    assert [r["player"] for r in ratings] == ["pursuit", "circle", "random"]
    assert int(ratings[0]["games"]) == 2 * GAMES
    with open(paths["results.csv"]) as f:
        assert len(list(csv.DictReader(f))) == 3
    data = json.loads(open(paths["league.json"]).read())
    per_player = data["gigastep"][SCENARIO]
    assert set(per_player) == {"random", "circle", "pursuit"}
    run = per_player["pursuit"]["seed_0"]
    assert run["step_0"]["step_count"] == 0
    assert set(run["absolute_metrics"]) <= set(run["step_0"])
    assert all(len(v) == 1 for v in run["absolute_metrics"].values())
    with Image.open(paths["heatmap.png"]) as png:
        assert png.format == "PNG" and min(png.size) > 200
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(paths)


def test_self_play_fills_the_diagonal_and_is_not_rated():
    lg = play_league(["pursuit", "circle"], SCENARIO, GAMES, seed=0, self_play=True, **LIMIT)
    assert len(lg.results) == 3
    m = lg.win_matrix()
    assert not np.isnan(np.diag(m)).any()
    assert lg.ratings["pursuit"].games == GAMES  # only the game against circle


def test_repeated_player_names_are_told_apart():
    lg = play_league(["circle", "circle"], SCENARIO, GAMES, seed=0, **LIMIT)
    assert lg.players == ["circle", "circle #2"]
