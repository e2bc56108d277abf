"""Evaluation (gigastep.eval.matches): outcomes, seats, intervals, players and checkpoints.

Every match here plays 5 vs 5 vector games with discrete actions, a time limit of 200 steps and
GAMES games (64 per seat), so that one compiled loop serves all scripted matches of the file.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gigastep.eval.matches import (
    MatchResult,
    ScriptedPlayer,
    SeatResult,
    _seat_plan,
    evaluate,
    load_player,
    register_player_loader,
    resolve_player,
    symmetric,
    wilson_interval,
)
from gigastep.scenarios import make_config
from gigastep.types import EnvConfig

SCENARIO = "identical_5_vs_5_fobs_vec_void_disc"
LIMIT = {"max_episode_length": 200}
GAMES = 128
Z = 1.959963984540054  # two-sided 95% normal quantile


@pytest.fixture(scope="module")
def pursuit_vs_random():
    return evaluate("pursuit", "random", SCENARIO, GAMES, seed=0, **LIMIT)


# ------------------------------------------------------------------------------------------
# Wilson intervals
# ------------------------------------------------------------------------------------------


def _wilson_by_roots(k: int, n: int) -> tuple[float, float]:
    """The Wilson interval from its definition: the p with (k/n - p)^2 = z^2 p (1 - p) / n,
    i.e. the roots of (1 + z^2/n) p^2 - (2 k/n + z^2/n) p + (k/n)^2 = 0."""
    p = k / n
    roots = np.roots([1 + Z * Z / n, -(2 * p + Z * Z / n), p * p])
    return tuple(sorted(float(r.real) for r in roots))


@pytest.mark.parametrize("k, n", [(8, 10), (1, 20), (50, 100), (127, 128)])
def test_wilson_interval_solves_the_score_equation(k, n):
    lo, hi = wilson_interval(k, n)
    expected = _wilson_by_roots(k, n)
    assert lo == pytest.approx(expected[0], abs=1e-12)
    assert hi == pytest.approx(expected[1], abs=1e-12)


def test_wilson_interval_of_no_successes_is_zero_to_z2_over_n_plus_z2():
    # k = 0: the lower root is 0 and the upper one z^2 / (n + z^2) (= 0.27753 for n = 10).
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0
    assert hi == pytest.approx(Z * Z / (10 + Z * Z), abs=1e-12)
    assert hi == pytest.approx(0.27753, abs=1e-5)


def test_wilson_interval_of_no_trials_is_everything():
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_wilson_interval_rejects_impossible_counts():
    with pytest.raises(ValueError, match="successes <= trials"):
        wilson_interval(5, 4)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 4, confidence=1.5)


# ------------------------------------------------------------------------------------------
# Outcomes
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pursuit_beats_random_clearly(pursuit_vs_random):
    r = pursuit_vs_random
    assert r.games == GAMES and r.unfinished == 0
    assert r.wins + r.draws + r.losses == GAMES
    assert r.win_rate_ci[0] > 0.7, r.summary()
    assert r.loss_rate_ci[1] < 0.3, r.summary()


def test_a_policy_against_itself_wins_about_half_of_the_decided_games():
    r = evaluate("random", "random", SCENARIO, GAMES, seed=0, **LIMIT)
    decided = r.wins + r.losses
    assert decided > GAMES // 2
    lo, hi = wilson_interval(r.wins, decided)
    assert lo < 0.5 < hi, r.summary()


def test_a_deterministic_policy_against_itself_wins_exactly_as_often_as_it_loses():
    # Both halves start from the same positions with the sides swapped, and pursuit draws
    # no random numbers in a full-observation game: every game has its mirror image.
    r = evaluate("pursuit", "pursuit", SCENARIO, GAMES, seed=0, **LIMIT)
    assert r.wins == r.losses
    assert r.seats[0].wins == r.seats[1].losses


def test_in_a_symmetric_game_each_player_plays_both_teams_half_the_time(pursuit_vs_random):
    seats = pursuit_vs_random.seats
    assert [(s.team, s.games) for s in seats] == [(0, GAMES // 2), (1, GAMES // 2)]
    odd = evaluate("pursuit", "random", SCENARIO, GAMES - 1, seed=0, **LIMIT)
    assert [(s.team, s.games) for s in odd.seats] == [(0, 64), (1, 63)]  # ceil as team 0


def test_an_asymmetric_game_keeps_player_a_on_team_0():
    config = make_config("identical_5_vs_1_fobs_vec_void_disc")
    assert not symmetric(config)
    assert symmetric(make_config(SCENARIO))
    assert _seat_plan(config, 8, None) == [(0, 8)]
    assert _seat_plan(config, 8, 1) == [(1, 8)]
    assert _seat_plan(make_config(SCENARIO), 7, 1) == [(1, 7)]  # a_team overrides symmetry


def test_symmetry_needs_the_same_agent_types_in_the_same_order():
    base = dict(teams=(0, 0, 1, 1), obs_type="vector")
    assert symmetric(EnvConfig(**base, max_health=(1, 3, 1, 3)))
    assert not symmetric(EnvConfig(**base, max_health=(1, 3, 3, 1)))


def test_symmetry_needs_the_same_team_draw_for_both_teams():
    from gigastep import TeamDraw

    base = EnvConfig(teams=(0, 0, 1, 1), obs_type="vector")
    assert symmetric(base.replace(team_draw=TeamDraw(sizes=((1, 2), (1, 2)))))
    assert not symmetric(base.replace(team_draw=TeamDraw(sizes=((1, 2), (2, 2)))))


def test_games_still_running_after_max_steps_are_not_counted():
    # circle never meets circle: every game lasts until the 200-step limit.
    r = evaluate("circle", "circle", SCENARIO, GAMES, seed=0, max_steps=50, **LIMIT)
    assert r.games == 0 and r.unfinished == GAMES
    assert f"{GAMES} of {GAMES} games had not ended after 50 steps" in r.notes[0]
    full = evaluate("circle", "circle", SCENARIO, GAMES, seed=0, **LIMIT)
    assert (full.games, full.draws, full.mean_episode_length) == (GAMES, GAMES, 200.0)


def test_match_result_counts_and_rates_follow_from_the_seats():
    seats = (SeatResult(0, 6, 4, 1, 1, 12.0, 6.0, 60), SeatResult(1, 4, 1, 1, 2, 4.0, 8.0, 40))
    r = MatchResult(
        "a", "b", "s", "h", seats, requested_games=10, unfinished=0, max_steps=9, seed=0
    )
    d = r.to_dict()
    assert (d["games"], d["wins"], d["draws"], d["losses"]) == (10, 5, 2, 3)
    assert d["win_rate"] == 0.5 and d["loss_rate"] == 0.3 and d["decided_win_rate"] == 5 / 8
    assert d["mean_return_a"] == 1.6 and d["mean_return_b"] == 1.4
    assert d["mean_episode_length"] == 10.0
    assert d["win_rate_ci"] == list(wilson_interval(5, 10))


def test_a_result_without_games_has_no_rates():
    r = MatchResult("a", "b", "s", "h", (SeatResult(0, 0, 0, 0, 0, 0.0, 0.0, 0),), 4, 4, 9, 0)
    assert math.isnan(r.win_rate)
    assert r.to_dict()["win_rate"] is None


def test_evaluate_rejects_bad_arguments_before_playing():
    with pytest.raises(ValueError, match="closest: \\['pursuit'"):
        evaluate("pursuitt", "random", SCENARIO, 4)
    with pytest.raises(ValueError, match="games must be a positive integer, got 0"):
        evaluate("pursuit", "random", SCENARIO, 0)
    with pytest.raises(ValueError, match="no time limit"):
        evaluate("pursuit", "random", SCENARIO, 4, max_episode_length=None)
    with pytest.raises(ValueError, match="a_team must be 0, 1 or None"):
        evaluate("pursuit", "random", "identical_5_vs_1_fobs_vec_void_disc", 4, a_team=2)


def test_a_callable_is_a_scripted_player_named_after_it():
    from gigastep.opponents import circle

    def my_circle(config, state, key):
        return circle(config, state, key)

    player = resolve_player(my_circle)
    assert isinstance(player, ScriptedPlayer) and player.name == "my_circle"
    r = evaluate(my_circle, "circle", SCENARIO, 4, seed=0, **LIMIT)
    assert (r.player_a, r.draws, r.games) == ("my_circle", 4, 4)


# ------------------------------------------------------------------------------------------
# TorchPlayers and checkpoints
# ------------------------------------------------------------------------------------------


class FixedAction:
    """A test TorchPlayer: every agent plays one discrete action (16 = circle's)."""

    def __init__(self, action: int, name: str = "fixed"):
        self.action, self.name = action, name
        self.firsts = []  # each actor call's `first` flags

    def check(self, config, team):
        if not config.discrete_actions or config.obs_type != "vector":
            raise ValueError("plays discrete actions from vector observations only")

    def actor(self, config, team, num_envs, device, seed):
        import torch

        m = config.team_sizes[team]

        def act(obs, first):
            assert obs.shape[:2] == (num_envs, m) and obs.dtype == torch.float32
            self.firsts.append(first.clone())
            return torch.full((num_envs, m), self.action, dtype=torch.int64, device=obs.device)

        return act


def _load_fixed(checkpoint, device):
    return FixedAction(int(checkpoint["action"]), name=str(checkpoint.get("name", "fixed")))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch = pytest.importorskip("torch")
    register_player_loader("test-fixed", _load_fixed, replace=True)
    path = tmp_path_factory.mktemp("ckpt") / "circle.pt"
    torch.save({"gigastep_player": "test-fixed", "action": torch.tensor(16), "name": "t16"}, path)
    return path


def test_a_checkpoint_with_a_registered_loader_plays_like_the_policy_it_copies(checkpoint):
    # Action 16 is circle's. In this full-observation game circle and pursuit draw no random
    # numbers and both paths start from the same positions, so the torch path gives the
    # scripted path's games exactly.
    torch_player = evaluate(str(checkpoint), "pursuit", SCENARIO, GAMES, seed=0, **LIMIT)
    scripted = evaluate("circle", "pursuit", SCENARIO, GAMES, seed=0, **LIMIT)
    assert torch_player.player_a == "t16"
    got = (torch_player.wins, torch_player.draws, torch_player.losses)
    assert got == (scripted.wins, scripted.draws, scripted.losses)
    assert torch_player.mean_episode_length == scripted.mean_episode_length
    assert torch_player.mean_return_b == pytest.approx(scripted.mean_return_b)


@pytest.mark.slow
def test_two_torch_players_each_get_their_own_team(checkpoint):
    player = FixedAction(16)
    r = evaluate(player, FixedAction(16, "other"), SCENARIO, GAMES, seed=0, **LIMIT)
    assert (r.games, r.draws) == (GAMES, GAMES)  # circle vs circle: all reach the time limit
    # Player A has an actor per seat, called with (64 games, 5 agents) of observations; every
    # game starts at step 0 and none restarts before the last step.
    assert len(player.firsts) == 2 * LIMIT["max_episode_length"]
    assert player.firsts[0].all() and player.firsts[1].all()
    assert not any(f.any() for f in player.firsts[2:])


def test_a_torch_player_that_cannot_play_the_game_is_refused_with_its_reason():
    with pytest.raises(ValueError, match="fixed.*cannot play team 0: plays discrete actions"):
        evaluate(FixedAction(16), "random", "identical_5_vs_5_fobs_vec_void_cont", 4)


def test_an_actor_returning_the_wrong_shape_is_named():
    bad = FixedAction(16)
    bad.actor = lambda config, team, b, device, seed: lambda obs, first: obs[..., 0]
    with pytest.raises(ValueError, match="must return integer actions of shape \\(64, 5\\)"):
        evaluate(bad, "random", SCENARIO, GAMES, **LIMIT)


def test_checkpoint_loading_errors_say_what_is_wrong(tmp_path):
    torch = pytest.importorskip("torch")
    with pytest.raises(FileNotFoundError, match="no checkpoint file"):
        load_player(tmp_path / "missing.pt")
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    with pytest.raises(ValueError, match="not a Gigastep checkpoint"):
        load_player(text)
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    with pytest.raises(ValueError, match="expected a dict with a 'gigastep_player' entry"):
        load_player(plain)
    unknown = tmp_path / "unknown.pt"
    torch.save({"gigastep_player": "test-fixd"}, unknown)
    with pytest.raises(ValueError, match="no player loader named 'test-fixd'"):
        load_player(unknown)


def test_a_checkpoint_holding_pickled_code_is_refused(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "code.pt"
    torch.save({"gigastep_player": "test-fixed", "obj": FixedAction(1)}, path)
    with pytest.raises(ValueError, match="refusing to load .* pickled Python objects"):
        load_player(path)


def test_a_loader_name_is_registered_once_unless_replaced():
    register_player_loader("test-once", _load_fixed)
    with pytest.raises(ValueError, match="already registered"):
        register_player_loader("test-once", lambda c, d: None)
    register_player_loader("test-once", _load_fixed)  # the same function again is fine


def test_loaders_are_found_in_the_entry_point_group(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    from importlib.metadata import EntryPoint

    from gigastep.eval import players as evaluation

    ep = EntryPoint(
        name="test-ep", value="tests.eval.test_evaluation:_load_fixed", group="gigastep.players"
    )
    monkeypatch.setattr(evaluation, "_entry_points", lambda: {"test-ep": ep})
    path = tmp_path / "ep.pt"
    torch.save({"gigastep_player": "test-ep", "action": torch.tensor(13)}, path)
    player = load_player(path)  # the entry point imports this file as tests.eval.test_evaluation
    assert type(player).__qualname__ == "FixedAction" and player.action == 13
    assert "test-ep" in evaluation.player_loaders()
