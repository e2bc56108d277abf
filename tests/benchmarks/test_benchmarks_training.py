"""The bookkeeping of the training benchmarks (no training here: synthetic runs)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from benchmarks import learning, training


def _run_folder(tmp_path):
    folder = tmp_path / "s5_seed0"
    folder.mkdir()
    rows = [
        {
            "update": 1,
            "agent_steps": 100,
            "wall_s": 2.0,
            "return_team0": -1.0,
            "win_rate/random": 0.5,
            "win_rate/pursuit": None,
        },
        {
            "update": 2,
            "agent_steps": 200,
            "wall_s": 4.0,
            "return_team0": 3.0,
            "win_rate/random": 0.9,
            "win_rate/pursuit": 0.2,
        },
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_a_learning_curve_keeps_progress_return_and_the_win_rates_it_has(tmp_path):
    curve = learning._curve(_run_folder(tmp_path))
    assert curve == [
        {
            "update": 1,
            "agent_steps": 100,
            "wall_s": 2.0,
            "episode_return": -1.0,
            "win_rate": {"random": 0.5},
        },
        {
            "update": 2,
            "agent_steps": 200,
            "wall_s": 4.0,
            "episode_return": 3.0,
            "win_rate": {"random": 0.9, "pursuit": 0.2},
        },
    ]


def test_the_learning_figure_has_curves_and_evaluation_points(tmp_path):
    row = {
        "name": "s5",
        "trained_s": 4.0,
        "curve": learning._curve(_run_folder(tmp_path)),
        "final": [{"opponent": "random", "win_rate": 0.8, "ci_low": 0.7, "ci_high": 0.9}],
    }
    learning.plot([row], tmp_path / "learning.png")
    with Image.open(tmp_path / "learning.png") as image:
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 20


def test_the_paper_preset_trains_s5_twice_as_long_as_the_other_runs():
    runs = {r.name: r for r in learning.PRESETS["paper"]}
    assert runs["s5"].budgets_s == (600.0, 1800.0)
    assert {r.policy for r in runs.values()} == {"s5", "gru", "mlp"}
    assert runs["s5_pobs"].scenario == "identical_5_vs_5_pobs_vec_void_disc"
    assert all(r.budgets_s == (600.0,) for k, r in runs.items() if k != "s5")


def test_the_random_preset_trains_against_random_and_evaluates_at_5_and_10_minutes():
    (run,) = learning.PRESETS["random"]
    assert run.budgets_s == (300.0, 600.0)
    assert run.flags == ("--opponent", "random") and "random" in run.opponents
    recipe = learning.PRESETS["epochs"][0]
    assert dataclasses.replace(run, name="s5", budgets_s=(600.0,), flags=()) == recipe


def test_the_epochs_preset_differs_from_the_recipe_only_in_its_epochs():
    base, fewer = learning.PRESETS["epochs"]
    assert base.flags == () and fewer.flags == ("--epochs", "2")
    assert dataclasses.replace(fewer, name=base.name, flags=()) == base
    # and the recipe itself trains 4 epochs, so the run halves the update's passes
    from baselines.config import preset

    assert preset("cpu").epochs == 4


def test_the_tune_preset_changes_the_recipe_by_its_flags_only():
    from baselines.config import preset

    base, *variants = learning.PRESETS["tune"]
    assert base.flags == () and base.budgets_s == (600.0,)
    recipe = preset("cpu")
    by_name = {}
    for run in variants:
        assert dataclasses.replace(run, name=base.name, flags=()) == base
        assert run.flags and run.flags[0].startswith("--")
        # `--flag value` pairs, or a switch alone (`--value-norm`)
        flags: dict[str, str | bool] = {}
        for token in run.flags:
            if token.startswith("--"):
                flags[token] = True
                last = token
            else:
                assert flags[last] is True, f"{run.name}: two values after {last}"
                flags[last] = token
        by_name[run.name] = flags
    assert float(by_name["s5_lr_1e-3"]["--lr"]) == 2 * recipe.lr
    assert int(by_name["s5_width_64"]["--hidden"]) * 2 == recipe.hidden
    # fewer games per update, the same number of agent-steps per minibatch
    games = by_name["s5_256_games"]
    assert int(games["--num-envs"]) * 2 == recipe.num_envs
    assert recipe.num_envs / recipe.minibatches == int(games["--num-envs"]) / int(
        games["--minibatches"]
    )
    # the pair is the two single changes together
    assert by_name["s5_width_64_lr_1e-3"] == {**by_name["s5_width_64"], **by_name["s5_lr_1e-3"]}
    # and the triple is the three together
    assert by_name["s5_width_64_lr_1e-3_256_games"] == {
        **by_name["s5_width_64_lr_1e-3"],
        **by_name["s5_256_games"],
    }
    # the pair's follow-ups change one thing each
    pair = by_name["s5_width_64_lr_1e-3"]
    assert by_name["s5_width_64_lr_2e-3"] == {**pair, "--lr": "2e-3"}
    assert by_name["s5_width_64_lr_1e-3_value_norm"] == {**pair, "--value-norm": True}
    assert by_name["s5_width_64_lr_1e-3_vs_pursuit"] == {**pair, "--opponent": "pursuit"}
    assert by_name["s5_width_64_lr_1e-3_2_epochs"] == {**pair, "--epochs": "2"}
    assert float(by_name["s5_width_64_lr_2e-3"]["--lr"]) == 4 * recipe.lr
    # the annealed rates change the constant-rate runs by that switch alone
    assert not recipe.anneal_lr
    for rate in ("1e-3", "2e-3"):
        constant = by_name[f"s5_width_64_lr_{rate}"]
        assert by_name[f"s5_width_64_lr_{rate}_anneal"] == {**constant, "--anneal-lr": True}


def test_the_tuned_preset_runs_tuned_runs_at_the_papers_budgets():
    tune = {r.name: r for r in learning.PRESETS["tune"]}
    paper_budgets = {r.name: r for r in learning.PRESETS["paper"]}["s5"].budgets_s
    assert paper_budgets == (600.0, 1800.0)
    tuned = {r.name: r for r in learning.PRESETS["tuned"]}
    s5_runs = ["s5_width_64_lr_1e-3", "s5_width_64_lr_2e-3"]
    assert list(tuned) == s5_runs + ["gru_width_64_lr_1e-3", "mlp_width_64_lr_1e-3"]
    for name in s5_runs:
        assert tuned[name] == dataclasses.replace(tune[name], budgets_s=paper_budgets)


@pytest.mark.parametrize("policy", ["gru", "mlp"])
def test_the_tuned_preset_runs_the_other_cores_at_the_s5_pairs_recipe(policy):
    """Only the core differs from the S5 pair, so the table compares memories."""
    tuned = {r.name: r for r in learning.PRESETS["tuned"]}
    pair = tuned["s5_width_64_lr_1e-3"]
    assert pair.policy == "s5"
    other = tuned[f"{policy}_width_64_lr_1e-3"]
    assert other == dataclasses.replace(pair, name=other.name, policy=policy)


def test_runs_picks_runs_of_the_preset_in_its_order_and_names_a_wrong_one(capsys):
    assert [r.name for r in learning.select_runs("paper", ["mlp", "s5"])] == ["s5", "mlp"]
    assert learning.select_runs("paper", None) == learning.PRESETS["paper"]
    with pytest.raises(SystemExit):
        learning.main(["--runs", "s55", "--out", "unused"])
    err = capsys.readouterr().err
    assert "preset 'paper' has no run 's55' (closest: s5" in err
    assert "all: s5, gru, mlp, s5_pobs" in err


def test_the_training_table_divides_each_rollout_by_the_jax_scan_of_its_batch():
    rows = [
        {
            "kind": "jax",
            "policy": "mlp",
            "batch": 64,
            "rollout_agent_steps_per_s": 2e6,
            "rollout_min": 1.8e6,
            "rollout_max": 2.2e6,
            "rollout_agent_steps_per_cpu_s": 1e6,  # two XLA threads: twice the CPU time
            "compile_s": 3.21,
            "peak_rss_mb": 500.0,
        },
        {
            "kind": "ppo",
            "policy": "s5",
            "batch": 64,
            "rollout_agent_steps_per_s": 1.5e6,
            "rollout_min": 1.4e6,
            "rollout_max": 1.6e6,
            "update_agent_steps_per_s": 4e5,
            "rollout_agent_steps_per_cpu_s": 1.5e6,
            "update_agent_steps_per_cpu_s": 5e5,
            "agent_steps": 800_000,
            "update_s": [2.0, 1.6, 4.0],
            "warmup_s": 12.34,
            "peak_rss_mb": 900.0,
        },
        {"kind": "ppo", "policy": "mlp", "batch": 128, "error": "timed out"},
        {  # a row of a file written before the CPU-time rates: shown without them
            "kind": "ppo",
            "policy": "gru",
            "batch": 64,
            "rollout_agent_steps_per_s": 5e5,
            "rollout_min": 4e5,
            "rollout_max": 6e5,
            "update_agent_steps_per_s": 1e5,
            "agent_steps": 800_000,
            "update_s": [8.0],
            "warmup_s": 20.0,
            "peak_rss_mb": 800.0,
        },
    ]
    table = training.render(rows).splitlines()
    assert len(table) == 5  # header, rule, three rows (the failed one is left out)
    # wall: 1.5 M / 2.0 M = 0.75; CPU: 1.5 M / 1.0 M = 1.50; update range: 800 k agent-steps
    # in 4.0 s (200 k) to 1.6 s (500 k)
    assert (
        "| PyTorch PPO rollout, s5 | 64 | 1.50 M | 1.40 M–1.60 M | 0.75 | 1.50 M | 1.50 | 400 k "
        "| 200 k–500 k | 500 k | 12.3 |" in table[3]
    )
    assert "| JAX scan, same per-step work (mlp) | 64 | 2.00 M |" in table[2]
    assert "| – | 1.00 M | – | – | – | – | 3.2 |" in table[2]
    gru = "| PyTorch PPO rollout, gru | 64 | 500 k | 400 k–600 k | 0.25 | – | – | 100 k"
    assert gru in table[4]


FINAL = {"opponent": "random", "games": 4, "win_rate": 0.5, "ci_low": 0.2, "ci_high": 0.8}


def _fake_training(monkeypatch, calls):
    """`_ppo` records (budget, resume) and leaves a run folder as the trainer would; the
    evaluation is replaced by one fixed row."""

    def ppo(run, out, budget, resume, init_from=None):
        calls.append((budget, resume) if init_from is None else (budget, resume, init_from))
        out.mkdir(parents=True, exist_ok=True)
        (out / "checkpoint.pt").write_bytes(b"")
        (out / "config.json").write_text(json.dumps({"scenario_hash": "h"}))
        (out / "metrics.jsonl").write_text(json.dumps({"update": 1, "wall_s": budget}) + "\n")
        state["wall_s"] = budget

    state = {"wall_s": 0.0}
    monkeypatch.setattr(learning, "_ppo", ppo)
    monkeypatch.setattr(
        learning,
        "json_checkpoint_info",
        lambda folder, name="checkpoint.pt": {
            "update": 1,
            "agent_steps": 10,
            "wall_s": state["wall_s"],
        },
    )
    monkeypatch.setattr(learning, "_evaluate", lambda *a, **k: [FINAL])
    return state


def test_a_rerun_sweep_redoes_no_evaluated_budget_and_resumes_a_run_stopped_short(
    tmp_path, monkeypatch
):
    calls = []
    state = _fake_training(monkeypatch, calls)
    run = learning.Run("s5", budgets_s=(10.0, 30.0))
    first = learning.run_learning([run], tmp_path, games=4)
    assert calls == [(10.0, False), (30.0, True)]
    (tmp_path / "s5_seed0" / "result_30s.json").unlink()  # as if stopped during budget 30
    state["wall_s"] = 20.0
    calls.clear()
    again = learning.run_learning([run], tmp_path, games=4)
    assert calls == [(30.0, True)]
    assert [r["budget_s"] for r in again] == [r["budget_s"] for r in first] == [10.0, 30.0]


def test_a_run_trained_past_a_budget_it_never_evaluated_is_refused(tmp_path, monkeypatch):
    calls = []
    state = _fake_training(monkeypatch, calls)
    run = learning.Run("s5", budgets_s=(10.0, 300.0))
    learning.run_learning([run], tmp_path, games=4)
    (tmp_path / "s5_seed0" / "result_10s.json").unlink()
    state["wall_s"] = 300.0
    try:
        learning.run_learning([run], tmp_path, games=4)
    except ValueError as err:
        assert "trained past 10 s" in str(err) and "result_10s.json" in str(err)
    else:
        raise AssertionError("a run past an unevaluated budget was accepted")


def _ablation_config(run):
    """The config `python -m baselines.ppo` builds for an ablation run (as `_ppo` calls it)."""
    from baselines.config import validate
    from baselines.ppo import parse_args

    argv = [*learning.RECIPE, "--policy", run.policy, "--scenario", run.scenario, *run.flags]
    config = parse_args(argv)
    validate(config)
    return config


# What each ablation run changes in the recipe's config, and nothing else.
_ABLATION_CHANGES = {
    "s5": {},
    "s5_team": {"signal": "team"},
    "s5_entity": {"scenario": "identical_5_vs_5_fobs_ent_void_disc", "encoder": "entity"},
    "s5_warm_pursuit": {"warm_start": "pursuit"},
    "s5_shooter_0.2": {"env": "", "shooter_credit": 0.2},
    "s5_factored": {"action_head": "factored"},
    "s5_mappo_value_norm": {"algo": "mappo", "value_norm": True},
}


def test_the_ablation_preset_changes_the_recipe_one_option_at_a_time_then_all_together():
    runs = {r.name: r for r in learning.PRESETS["ablation"]}
    assert set(runs) == set(_ABLATION_CHANGES) | {"s5_all"}
    assert all(r.policy == "s5" and r.budgets_s == (600.0,) for r in runs.values())
    recipe = dataclasses.asdict(_ablation_config(runs["s5"]))
    assert recipe["env"] == "reward_damage=1" and recipe["signal"] == "individual"
    union: dict = {}
    for name, changes in _ABLATION_CHANGES.items():
        config = dataclasses.asdict(_ablation_config(runs[name]))
        differs = {k: v for k, v in config.items() if v != recipe[k]}
        assert differs == changes, name
        if name != "s5_entity":  # cloning a scripted player needs vector observations
            union.update(changes)
    together = dataclasses.asdict(_ablation_config(runs["s5_all"]))
    assert {k: v for k, v in together.items() if v != recipe[k]} == union


# What each run of the team preset changes in the recipe's config, and nothing else.
_TEAM_CHANGES = {
    "s5_team": {"signal": "team"},
    "gru_team": {"signal": "team", "policy": "gru"},
    "mlp_team": {"signal": "team", "policy": "mlp"},
    "s5_special": {"scenario": "special_5_vs_5_fobs_vec_void_disc"},
    "s5_team_special": {"scenario": "special_5_vs_5_fobs_vec_void_disc", "signal": "team"},
}


def test_the_team_preset_runs_the_team_signal_on_each_core_and_on_another_family():
    runs = {r.name: r for r in learning.PRESETS["team"]}
    assert set(runs) == set(_TEAM_CHANGES)
    recipe = dataclasses.asdict(_ablation_config(learning.PRESETS["ablation"][0]))
    for name, changes in _TEAM_CHANGES.items():
        config = dataclasses.asdict(_ablation_config(runs[name]))
        assert {k: v for k, v in config.items() if v != recipe[k]} == changes, name
    # S5's run is the ablation's up to 10 minutes, so the same folder continues to 30.
    ablation = {r.name: r for r in learning.PRESETS["ablation"]}["s5_team"]
    assert runs["s5_team"] == dataclasses.replace(ablation, budgets_s=(600.0, 1800.0))
    assert all(r.budgets_s == (600.0,) for n, r in runs.items() if n != "s5_team")


def test_max_budget_drops_the_longer_budgets_and_refuses_one_below_them_all(
    tmp_path, monkeypatch, capsys
):
    seen = []
    monkeypatch.setattr(learning, "run_learning", lambda runs, *a, **k: seen.extend(runs) or [])
    monkeypatch.setattr(learning, "plot", lambda *a: None)
    argv = ["--preset", "team", "--runs", "s5_team", "gru_team", "--out", str(tmp_path)]
    learning.main([*argv, "--seeds", "2", "--max-budget-s", "600"])
    assert [(r.name, r.seed, r.budgets_s) for r in seen] == [
        ("s5_team", 2, (600.0,)),
        ("gru_team", 2, (600.0,)),
    ]
    with pytest.raises(SystemExit):
        learning.main([*argv, "--max-budget-s", "599"])
    assert "--max-budget-s 599: no budget of the chosen runs is that short (shortest: 600 s)" in (
        capsys.readouterr().err
    )


def test_the_maps_preset_trains_the_entity_policy_on_a_split_item_and_plays_the_split():
    from baselines.envs import evaluation_config
    from gigastep.eval.splits import load_split

    runs = {r.name: r for r in learning.PRESETS["maps"]}
    assert set(runs) == {"s5_entity_levels_16", "s5_entity_levels_1024"}
    recipe = dataclasses.asdict(_ablation_config(learning.PRESETS["ablation"][0]))
    split = load_split("levels-ent-v1")
    tests = [i.id for i in split.role("test")]
    for levels in (16, 1024):
        run = runs[f"s5_entity_levels_{levels}"]
        config = dataclasses.asdict(_ablation_config(run))
        assert set(k for k, v in config.items() if v != recipe[k]) == {
            "scenario",
            "encoder",
            "signal",
            "env",
            "keep_checkpoints",
        }
        assert (config["encoder"], config["signal"], config["keep_checkpoints"]) == (
            "entity",
            "team",
            0,
        )
        assert "reward_damage=1" in config["env"]  # the recipe's shaping kept
        # The run trains on its split item's game, and its split evaluation plays that item
        # and every test item (the game's own reward weights: evaluation_config drops shaping).
        (item,) = [i for i in split.items if i.id == f"levels-{levels}"]
        assert run.split == "levels-ent-v1" and run.scenario == item.scenario
        assert evaluation_config(run.scenario, config["env"]) == split.config(item)
        assert list(run.split_items) == [item.id, *tests]
        assert run.budgets_s == (1800.0,)


def test_the_opponents_preset_trains_against_the_split_training_opponents_only():
    from baselines.envs import evaluation_config
    from gigastep.eval.splits import load_split

    (run,) = learning.PRESETS["opponents"]
    recipe = dataclasses.asdict(_ablation_config(learning.PRESETS["ablation"][0]))
    config = dataclasses.asdict(_ablation_config(run))
    assert set(k for k, v in config.items() if v != recipe[k]) == {"signal", "opponent"}
    assert (config["signal"], config["opponent"]) == ("team", "random:0.5,circle:0.5")
    split = load_split("opponents-v1")
    items = {i.id: i for i in split.items}
    assert run.split == "opponents-v1" and list(run.split_items) == ["seen", "unseen"]
    # Trained on the training item's opponents and game; the test item's opponents unseen.
    assert set(items["seen"].opponents) == {"random", "circle"}
    assert not set(items["unseen"].opponents) & {"random", "circle"}
    for item in items.values():
        assert evaluation_config(run.scenario, config["env"]) == split.config(item)
    assert run.budgets_s == (600.0,)


def test_a_split_run_is_evaluated_on_its_split_items_with_one_reference_cache(
    tmp_path, monkeypatch
):
    from gigastep.eval import splits

    calls = []
    _fake_training(monkeypatch, [])

    def fake_split(split, policy, *, items, games, reference_cache):
        calls.append((split, Path(policy).name, items, games, id(reference_cache)))
        # What the split reads of a match: its counts, hash and seed.
        result = SimpleNamespace(
            wins=3,
            draws=1,
            losses=0,
            games=4,
            win_rate=0.75,
            win_rate_ci=(0.3, 0.95),
            unfinished=0,
            scenario_hash="h",
            seed=7,
        )
        row = splits.ItemResult(
            result=result, low=result, high=result, item=items[0], role="train", opponent="random"
        )
        return splits.SplitResult(
            split="s@h",
            family="f",
            policy="p",
            reference=("random", "pursuit"),
            games=4,
            rows=[row],
        )

    monkeypatch.setattr(splits, "evaluate_split", fake_split)
    runs = [
        learning.Run("a", budgets_s=(10.0,), split="levels-ent-v1", split_items=("x", "y")),
        learning.Run("b", budgets_s=(10.0,), split="levels-ent-v1", split_items=("z",)),
        learning.Run("c", budgets_s=(10.0,), split="sizes-drawn-v1", split_items=("z",)),
    ]
    rows = learning.run_learning(runs, tmp_path, games=4)
    assert [c[:4] for c in calls] == [
        ("levels-ent-v1", "checkpoint_10s.pt", ["x", "y"], 4),
        ("levels-ent-v1", "checkpoint_10s.pt", ["z"], 4),
        ("sizes-drawn-v1", "checkpoint_10s.pt", ["z"], 4),
    ]
    assert calls[0][4] == calls[1][4]  # the references play once across runs of a split
    assert calls[2][4] != calls[0][4]  # ... and not for another split's items of the same ids
    (final,) = rows[0]["final"]
    assert (final["opponent"], final["wins"], final["win_rate"]) == ("x/random", 3, 0.75)
    assert (final["ci_low"], final["ci_high"], final["role"]) == (0.3, 0.95, "train")
    assert (
        rows[0]["split"]["split"] == "s@h"
        and "| train | x | random | 4 |" in (rows[0]["split"]["table"])
    )


def test_a_later_stage_starts_from_the_first_stage_checkpoint_and_needs_it(tmp_path, monkeypatch):
    calls = []
    _fake_training(monkeypatch, calls)
    first = learning.Run("a", budgets_s=(10.0,))
    second = learning.Run("b", budgets_s=(10.0,), init_from="a")
    with pytest.raises(ValueError, match=r"b starts from the checkpoint of run a, but .*a_seed0"):
        learning.run_learning([second], tmp_path, games=4)
    assert calls == []  # refused before training
    rows = learning.run_learning([first, second], tmp_path, games=4)
    assert calls == [(10.0, False), (10.0, False, tmp_path / "a_seed0" / "checkpoint.pt")]
    assert [r["starts_from"] for r in rows] == [None, "a"]


def test_the_sizes_preset_trains_both_observations_on_the_split_training_sizes_in_stages():
    from baselines.envs import evaluation_config
    from gigastep.eval.splits import load_split

    runs = {r.name: r for r in learning.PRESETS["sizes"]}
    assert list(runs) == ["s5_ent_sizes_3v3", "s5_ent_sizes", "s5_vec_sizes_3v3", "s5_vec_sizes"]
    recipe = dataclasses.asdict(_ablation_config(learning.PRESETS["ablation"][0]))
    changed = {"scenario", "encoder", "signal", "env", "hidden", "num_envs", "minibatches"}
    configs = {}
    for observation, split_name, encoder in (
        ("ent", "sizes-drawn-v1", "entity"),
        ("vec", "sizes-drawn-vec-v1", "mlp"),
    ):
        split = load_split(split_name)
        items = {i.id: i for i in split.items}
        first, second = runs[f"s5_{observation}_sizes_3v3"], runs[f"s5_{observation}_sizes"]
        assert (first.init_from, second.init_from) == (None, first.name)
        for run, size in ((first, "3v3"), (second, "5v5")):
            config = dataclasses.asdict(_ablation_config(run))
            assert set(k for k, v in config.items() if v != recipe[k]) == changed
            assert (config["signal"], config["encoder"], config["hidden"]) == ("team", encoder, 64)
            assert (config["num_envs"], config["minibatches"]) == (256, 4)
            assert "reward_damage=1" in config["env"]
            # Each stage trains on its split item's game; the split's held-out sizes never.
            assert run.split == split_name and run.budgets_s == (900.0,)
            assert evaluation_config(run.scenario, config["env"]) == split.config(items[size])
            configs[observation, size] = config
        assert list(first.split_items) == ["3v3"]
        assert sorted(second.split_items) == sorted(items)
    # The two policies differ in their observation and encoder only.
    for size in ("3v3", "5v5"):
        ent, vec = configs["ent", size], configs["vec", size]
        assert {k for k in ent if ent[k] != vec[k]} == {"scenario", "encoder"}


def test_a_flag_names_another_runs_last_evaluated_checkpoint_and_needs_it(tmp_path, monkeypatch):
    calls = []
    _fake_training(monkeypatch, calls)
    seen = []
    monkeypatch.setattr(learning, "_ppo", _recording_ppo(learning._ppo, seen))
    a = learning.Run("a", budgets_s=(10.0, 30.0))
    b = learning.Run("b", budgets_s=(10.0,), flags=("--opponent", "{run:a}:0.5,pursuit:0.5"))
    with pytest.raises(ValueError, match=r"run a \(seed 0\) has no evaluated checkpoint"):
        learning.run_learning([b], tmp_path, games=4)
    assert calls == []  # refused before training
    learning.run_learning([a, b], tmp_path, games=4)
    a30 = tmp_path / "a_seed0" / "checkpoint_30s.pt"
    assert seen[-1] == ("b", ("--opponent", f"{a30}:0.5,pursuit:0.5"))


def _recording_ppo(ppo, seen):
    def record(run, out, budget, resume, init_from=None):
        seen.append((run.name, run.flags))
        ppo(run, out, budget, resume, init_from)

    return record


def test_an_evaluation_step_scores_an_earlier_checkpoint_without_training(tmp_path, monkeypatch):
    calls = []
    _fake_training(monkeypatch, calls)
    scored = []
    monkeypatch.setattr(
        learning, "_evaluate", lambda checkpoint, *a, **k: scored.append(checkpoint) or [FINAL]
    )
    step = learning.Run("a_scored", budgets_s=(10.0,), evaluates="a")
    with pytest.raises(ValueError, match=r"a_scored scores run a's checkpoint at 10 s"):
        learning.run_learning([step], tmp_path, games=4)
    rows = learning.run_learning([learning.Run("a", budgets_s=(10.0,)), step], tmp_path, games=4)
    assert calls == [(10.0, False)]  # the step trained nothing
    assert scored == [tmp_path / "a_seed0" / "checkpoint_10s.pt"] * 2
    assert (rows[1]["name"], rows[1]["evaluates"], rows[1]["run_dir"]) == (
        "a_scored",
        "a",
        str(tmp_path / "a_seed0"),
    )
    assert rows[1]["recipe"] is None  # its recipe is run a's
    assert (tmp_path / "a_scored_seed0" / "result_10s.json").is_file()


def _evaluated(out: Path, name: str, budget: float, seed: int = 0) -> None:
    folder = out / f"{name}_seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"checkpoint_{budget:.0f}s.pt").write_bytes(b"")
    (folder / f"result_{budget:.0f}s.json").write_text("{}")


def test_a_population_split_names_the_runs_checkpoints_relative_to_itself(tmp_path):
    from gigastep.eval.splits import load_split

    split = learning.PopulationSplit(
        "pop", learning.SCENARIO, items=(("pool", "train", ("a", "b")), ("new", "test", ("c",)))
    )
    with pytest.raises(ValueError, match=r"run a \(seed 3\) has no evaluated checkpoint"):
        split.write(tmp_path / "x", seed=3)
    loaded = {}
    for out in ("one", "two", "later"):
        for name, budget in (("a", 10.0), ("b", 20.0), ("c", 10.0)):
            _evaluated(tmp_path / out, name, budget, seed=3)
        if out == "later":
            _evaluated(tmp_path / out, "a", 30.0, seed=3)
        loaded[out] = load_split(split.write(tmp_path / out, seed=3))
    one = loaded["one"]
    assert (one.family, [i.role for i in one.items]) == ("populations", ["train", "test"])
    assert [Path(one.opponent(o)) for o in one.items[0].opponents] == [
        tmp_path / "one" / "a_seed3" / "checkpoint_10s.pt",
        tmp_path / "one" / "b_seed3" / "checkpoint_20s.pt",
    ]
    # The paths are relative to the file: the same runs give the same hash wherever --out
    # is; a run's later checkpoint is another player, so another hash.
    assert one.hash == loaded["two"].hash != loaded["later"].hash
    later = loaded["later"]
    assert Path(later.opponent(later.items[0].opponents[0])).name == "checkpoint_30s.pt"


def test_the_population_preset_pools_some_runs_holds_out_others_and_exploits_the_focal_one(
    tmp_path,
):
    runs = {r.name: r for r in learning.PRESETS["population"]}
    members = ["pop_s5_a", "pop_mlp_b", "pop_s5_c", "pop_gru_d"]
    assert list(runs) == [
        *members,
        "s5_pool",
        "exploiter",
        "s5_pool_on_population",
        "s5_scripted",
        "s5_scripted_on_population",
        "s5_pool_b",
        "s5_pool_b_on_population",
        "s5_scripted_b",
        "s5_scripted_b_on_population",
    ]
    # The population and the exploiter each have their own trainer seed, none the preset's
    # own; each focal policy is trained at two seeds.
    trained = [r for r in runs.values() if r.evaluates is None]
    seeds = [dataclasses.replace(r, seed=1).trainer_seed for r in trained if r.seed_offset]
    assert len(set(seeds)) == 6 and 1 not in seeds and len(seeds) == 7
    assert runs["s5_pool_b"].seed_offset == runs["s5_scripted_b"].seed_offset != 0
    for focal in ("s5_pool", "s5_scripted"):
        again = dataclasses.replace(runs[f"{focal}_b"], name=focal, seed_offset=0)
        assert again == runs[focal]  # the same run at another seed
        assert runs[f"{focal}_b_on_population"].evaluates == f"{focal}_b"
    assert [runs[m].policy for m in members] == ["s5", "mlp", "s5", "gru"]
    for name in ("s5_pool", "exploiter", "pop_s5_a", "pop_mlp_b", "pop_s5_c", "pop_gru_d"):
        _evaluated(tmp_path, name, max(runs[name].budgets_s))
    recipe = dataclasses.asdict(_ablation_config(learning.PRESETS["ablation"][0]))
    configs = {}
    for name in ("s5_pool", "exploiter", "s5_scripted", *members):
        run = dataclasses.replace(runs[name], flags=learning.resolve_flags(runs[name], tmp_path))
        configs[name] = dataclasses.asdict(_ablation_config(run))
        assert configs[name]["signal"] == "team"
    pool = configs["s5_pool"]["opponent"]
    for member in ("pop_s5_a", "pop_mlp_b"):
        assert str(tmp_path / f"{member}_seed0" / "checkpoint_300s.pt") in pool
    assert "pop_s5_c" not in pool and "pop_gru_d" not in pool
    assert {k for k in recipe if configs["s5_scripted"][k] != recipe[k]} == {"signal"}
    assert {k for k in recipe if configs["s5_pool"][k] != recipe[k]} == {"signal", "opponent"}
    exploiter = runs["exploiter"]
    assert exploiter.init_from == "s5_pool"
    assert configs["exploiter"]["opponent"] == str(
        tmp_path / "s5_pool_seed0" / "checkpoint_900s.pt"
    )
    # Both focal policies are scored on the same split: the pool trained on, the held-out
    # members and the exploiter tested.
    split = runs["s5_pool_on_population"].split
    assert split == runs["s5_scripted_on_population"].split
    assert [(i, role, r) for i, role, r in split.items] == [
        ("pool", "train", ("pop_s5_a", "pop_mlp_b")),
        ("held-out", "test", ("pop_s5_c", "pop_gru_d")),
        ("exploiter", "test", ("exploiter",)),
    ]
    assert (runs["s5_pool_on_population"].evaluates, runs["s5_pool_on_population"].budgets_s) == (
        "s5_pool",
        runs["s5_pool"].budgets_s,
    )
