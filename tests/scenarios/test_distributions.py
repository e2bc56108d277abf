"""Distribution names (`envs/distributions.toml`): scenarios whose team compositions are drawn
per episode, named `<kind>_<min0>-<max0>_vs_<min1>-<max1>` and resolved like scenario names."""

from __future__ import annotations

import re

import pytest

import gigastep
from gigastep import TeamDraw
from gigastep.cli import main
from gigastep.scenarios import list_distributions, make_config, resolve, scenario_hash

NAME = re.compile(r"^(identical|special)_(\d+)-(\d+)_vs_(\d+)-(\d+)$")


def test_the_catalogue_ships_identical_and_heterogeneous_distributions():
    names = list_distributions()
    assert "identical_5-8_vs_5-8" in names and "special_5-8_vs_5-8" in names
    special = make_config("special_5-8_vs_5-8").team_draw
    assert special is not None and all(len(w) > 1 for w in special.weights)


@pytest.mark.parametrize("name", list_distributions())
def test_a_distribution_name_states_its_kind_and_size_ranges(name):
    kind, lo0, hi0, lo1, hi1 = NAME.match(name).groups()
    config = make_config(name)
    assert config.team_draw.sizes == ((int(lo0), int(hi0)), (int(lo1), int(hi1)))
    # the roster holds the largest team, its types are one ("identical") or several
    for team in (0, 1):
        types = {t for t, k in zip(config.type_names, config.teams, strict=True) if k == team}
        assert (len(types) == 1) == (kind == "identical")


def test_a_distribution_takes_the_name_suffixes():
    config = make_config("identical_5-8_vs_5-8_fobs_vec_void_disc")
    assert config.obs_type == "vector" and config.discrete_actions
    assert config.team_draw == make_config("identical_5-8_vs_5-8").team_draw


def test_make_builds_a_distribution_like_a_scenario():
    env = gigastep.make("identical_1-5_vs_1-5_pobs_vec_void_cont")
    assert env.spec.name == "identical_1-5_vs_1-5_pobs_vec_void_cont"
    assert env.spec.hash == scenario_hash(env.config)
    assert env.config.team_draw == TeamDraw(sizes=((1, 5), (1, 5)))


def test_the_hash_covers_the_draw():
    config = make_config("identical_5-8_vs_5-8")
    other = config.replace(team_draw=TeamDraw(sizes=((5, 7), (5, 8))))
    assert scenario_hash(other) != scenario_hash(config)
    assert scenario_hash(config.replace(team_draw=None)) != scenario_hash(config)


def test_fixed_scenarios_keep_their_hashes():
    """Values from the catalogue before `team_draw` existed: a config without a draw hashes as
    it did."""
    assert resolve("identical_5_vs_5")[0].hash == "78c2484a6899"
    assert resolve("special_20_vs_5_fobs_vec_void_disc")[0].hash == "357c9da3b0ff"


def test_an_unknown_distribution_name_lists_the_closest():
    with pytest.raises(ValueError, match=r"closest: \['identical_5-8_vs_5-8'"):
        gigastep.make("identical_5-7_vs_5-8")


def test_a_scenario_file_may_define_a_distribution(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(
        "[scenarios.duel]\n"
        "team0 = { default = 3, super = 1 }\n"
        "team1 = { default = 2 }\n"
        "draw.team0 = { sizes = [1, 3], weights = { default = 1, super = 2 } }\n"
        "draw.team1 = { sizes = [2, 2] }\n"
    )
    config = make_config(str(path))
    assert config.team_draw == TeamDraw(
        sizes=((1, 3), (2, 2)), weights=((("default", 1), ("super", 2)), ())
    )


def test_a_draw_that_does_not_fit_its_roster_names_the_scenario(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(
        "[scenarios.duel]\nteam0 = { default = 3 }\nteam1 = { default = 2 }\n"
        "draw.team0 = { sizes = [1, 4] }\ndraw.team1 = { sizes = [2, 2] }\n"
    )
    with pytest.raises(ValueError, match="scenario 'duel'.*up to 4 agents but its roster has 3"):
        make_config(str(path))


def test_info_describes_the_roster_and_the_draw(capsys):
    assert main(["info", "special_5-8_vs_5-8"]) == 0
    out = capsys.readouterr().out
    assert "roster 0      default x5, more_health x2, more_range x2, faster x2" in out
    assert "draw team 0   5-8 agents, types default 50%, more_health 17%" in out
    assert f"hash          {scenario_hash(make_config('special_5-8_vs_5-8'))}" in out
