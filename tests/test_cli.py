"""The `gigastep` command (gigastep.cli.main): list and info."""

from __future__ import annotations

import textwrap

from gigastep.cli import main
from gigastep.scenarios import base_scenarios, list_scenarios, make_config, scenario_hash


def test_list_prints_every_base_with_its_teams_and_the_count(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for base in base_scenarios():
        assert base in out
    row = next(line for line in out.splitlines() if line.startswith("special_5_vs_1 "))
    assert row.split()[1] == "6"  # agents
    assert "more_health, more_range, faster, default x2" in row and "super" in row
    assert "18 base scenarios, 288 named variants" in out


def test_list_all_prints_the_288_names_in_order(capsys):
    assert main(["list", "--all"]) == 0
    assert capsys.readouterr().out.splitlines() == list_scenarios()


def test_info_describes_teams_types_maps_spaces_version_and_hash(capsys):
    assert main(["info", "identical_5_vs_1"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(maxsplit=1)[0]: line for line in out.splitlines() if line.strip()}
    assert lines["version"].split() == ["version", "1"]
    assert lines["hash"].split() == ["hash", scenario_hash(make_config("identical_5_vs_1"))]
    assert "6 (team 0: 5, team 1: 1)" in lines["agents"]
    assert "team 0        default x5" in out and "team 1        super" in out
    assert lines["maps"].split()[1] == "all" and "8 maps" in lines["maps"]
    assert "(84, 84, 3)" in lines["observation"] and "uint8" in lines["observation"]
    assert "continuous" in lines["action"] and "(3,)" in lines["action"]
    agent5 = next(line for line in out.splitlines() if line.startswith("5 "))
    assert agent5.split() == ["5", "1", "super", "6", "3", "1", "1", "0.8", "0"]


def test_info_shows_the_vector_length_and_discrete_actions(capsys):
    assert main(["info", "identical_5_vs_1_fobs_vec_void_disc"]) == 0
    out = capsys.readouterr().out
    assert "(54,)" in out  # 9 x 6 agents, no boxes
    assert "discrete" in out and "27" in out
    assert "stochastic_obs=False" in out


def test_info_reads_a_scenario_file(tmp_path, capsys):
    path = tmp_path / "duel.toml"
    path.write_text(
        textwrap.dedent("""
        [scenarios.duel]
        version = 3
        team0 = { faster = 1 }
        team1 = { super = 1 }
        map = "center_block"
    """)
    )
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "scenario      duel" in out and "version       3" in out
    assert "center_block (1 map:" in out


def test_an_unknown_name_exits_2_with_a_suggestion_and_no_traceback(capsys):
    assert main(["info", "identical_5_vs_4"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unknown scenario 'identical_5_vs_4'" in captured.err
    assert "identical_5_vs_5" in captured.err
    assert "Traceback" not in captured.err


def test_a_missing_command_exits_2(capsys):
    assert main([]) == 2
    assert "usage: gigastep" in capsys.readouterr().err
