"""The PPO trainers' inputs that used to be accepted and then misbehaved (issue 52): numbers
that are infinite, seeds that alias other seeds, torchrun's variables and
GIGASTEP_MALLOC_TUNING. Each is refused before any compute, naming the input."""

from __future__ import annotations

import dataclasses
import math

import pytest

from baselines.config import PPOConfig, validate
from baselines.distributed import read_env


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lr", math.inf, "--lr must be > 0 and finite, got inf"),
        ("clip", math.inf, "--clip must be > 0 and finite, got inf"),
        ("lr", math.nan, "--lr must be > 0 and finite, got nan"),
        ("vf_coef", math.inf, "--vf-coef must be >= 0 and finite, got inf"),
        ("ent_coef", math.inf, "--ent-coef must be >= 0 and finite, got inf"),
        ("max_grad_norm", math.inf, "--max-grad-norm must be >= 0 and finite, got inf"),
        ("target_kl", math.inf, "--target-kl must be > 0 and finite, or None, got inf"),
        ("time_budget_s", math.inf, "--time-budget-s must be >= 0 and finite, got inf"),
        ("seed", -1, "seeds must lie in 0..2\\*\\*32 - 1"),
        ("seed", 2**32, "seeds must lie in 0..2\\*\\*32 - 1"),
        ("seed", 1.5, "--seed must be an integer, got 1.5"),
        ("threads", 1.5, "--threads must be an integer >= 0, got 1.5"),
        ("keep_checkpoints", "3", "--keep-checkpoints must be an integer >= 0, got '3'"),
        ("device", "gpu", "--device must be cpu, cuda or cuda:K \\(K a GPU index\\), got 'gpu'"),
        ("device", "cuda:x", "--device must be cpu, cuda or cuda:K"),
    ],
)
def test_a_number_that_would_misbehave_is_refused_naming_the_flag(field, value, message):
    with pytest.raises(ValueError, match=message):
        validate(dataclasses.replace(PPOConfig(), **{field: value}))


def test_seeds_running_past_the_last_seed_are_refused_naming_both_flags():
    with pytest.raises(ValueError, match="--seed 4294967295 with --seeds 2 runs seeds"):
        validate(PPOConfig(seed=2**32 - 1, seeds=2))
    validate(PPOConfig(seed=2**32 - 2, seeds=2))  # the last two seeds: accepted


# ------------------------------------------------------------------------------------------
# torchrun's variables
# ------------------------------------------------------------------------------------------

GOOD = {
    "WORLD_SIZE": "2",
    "RANK": "1",
    "LOCAL_RANK": "1",
    "MASTER_ADDR": "h",
    "MASTER_PORT": "29500",
}


def test_one_process_without_torchrun_reads_nothing_else():
    assert read_env({}) is None
    assert read_env({"WORLD_SIZE": "1", "RANK": "junk"}) is None


def test_a_well_formed_job_gives_rank_world_and_local_rank():
    assert read_env(GOOD) == (1, 2, 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not an integer"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' must be >= 1"),
        ({"RANK": "2"}, "RANK=2 but WORLD_SIZE=2: ranks are 0..1"),
        ({"RANK": "-1"}, "RANK='-1' must be >= 0"),
        ({"RANK": "1.0"}, "RANK='1.0' is not an integer"),
        ({"RANK": None}, "RANK is not set"),
        ({"LOCAL_RANK": "x"}, "LOCAL_RANK='x' is not an integer"),
        ({"MASTER_ADDR": None}, "MASTER_ADDR is not set"),
        ({"MASTER_PORT": None}, "MASTER_PORT is not set"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 must be a port 1..65535"),
        ({"MASTER_PORT": "0"}, "MASTER_PORT='0' must be >= 1"),
    ],
)
def test_a_malformed_torchrun_variable_is_named_with_its_value(change, message):
    environ = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        read_env(environ)


# ------------------------------------------------------------------------------------------
# GIGASTEP_MALLOC_TUNING: an on/off variable
# ------------------------------------------------------------------------------------------


def test_an_unknown_malloc_tuning_value_is_refused_not_taken_as_on(monkeypatch):
    from baselines.train import keep_freed_memory

    monkeypatch.setenv("GIGASTEP_MALLOC_TUNING", "nope")
    with pytest.raises(ValueError, match="GIGASTEP_MALLOC_TUNING='nope'"):
        keep_freed_memory()
    monkeypatch.setenv("GIGASTEP_MALLOC_TUNING", "off")
    assert keep_freed_memory() is False


# ------------------------------------------------------------------------------------------
# The command line: every refusal is one line and exit status 2, before any compute
# ------------------------------------------------------------------------------------------

POSITIVE = (
    "updates",
    "num_envs",
    "rollout_steps",
    "hidden",
    "epochs",
    "minibatches",
    "s5_layers",
    "critic_hidden",
    "pool_size",
    "pool_every",
    "pool_players",
    "checkpoint_every",
    "eval_games",
    "seeds",
)


@pytest.mark.parametrize("field", POSITIVE)
@pytest.mark.parametrize("value", [0, -2, 2.5, True])
def test_every_count_is_a_positive_integer(field, value):
    with pytest.raises(ValueError, match=f"--{field.replace('_', '-')} must be a positive integer"):
        validate(dataclasses.replace(PPOConfig(), **{field: value}))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algo", "ppo2"], "--algo"),
        (["--policy", "lstm"], "--policy"),
        (["--encoder", "rnn"], "--encoder"),
        (["--framework", "tf"], "--framework"),
        (["--updates", "2.5"], "--updates"),
        (["--lr", "fast"], "--lr"),
        (["--compile", "maybe"], "maybe"),
        (["--preset", "smok"], "closest"),
        (["--env", 'map_generator={"seeds":[0,16]'], "1 unclosed bracket(s)"),
        (["--env", "reward_dammage=1"], "unknown EnvConfig field 'reward_dammage' (closest: "),
    ],
)
def test_a_malformed_flag_exits_2_naming_it(tmp_path, capsys, argv, message):
    from baselines.ppo import main

    out = tmp_path / "run"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("GIGASTEP_MALLOC_TUNING", "nope", "GIGASTEP_MALLOC_TUNING='nope'"),
        ("WORLD_SIZE", "two", "WORLD_SIZE='two' is not an integer"),
    ],
)
def test_a_bad_variable_is_one_line_and_exit_2_before_any_run(
    tmp_path, capsys, monkeypatch, variable, value, message
):
    from baselines.ppo import main

    monkeypatch.setenv(variable, value)
    out = tmp_path / "run"
    assert main(["--preset", "smoke", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 but WORLD_SIZE=2"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "four"}, "SLURM_NTASKS='four' is not an integer"),
    ],
)
def test_the_collectives_benchmark_names_a_malformed_launch_variable(monkeypatch, environ, message):
    from benchmarks.collectives import distributed_env

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        distributed_env()


def test_env_overrides_split_at_top_level_commas_only():
    from baselines.envs import parse_overrides

    text = 'reward_damage=1, map_generator={"base": "procgen_dense", "seeds": [0, 16]},x=[1,2]'
    assert parse_overrides(text) == {
        "reward_damage": 1,
        "map_generator": {"base": "procgen_dense", "seeds": [0, 16]},
        "x": [1, 2],
    }
    with pytest.raises(ValueError, match=r"unbalanced '\]' at character 3 of 'a=1\]'"):
        parse_overrides("a=1]")


def test_env_overrides_train_on_a_split_item_exactly():
    """levels-v1's levels-16 is its scenario with the generator override, hash for hash."""
    from baselines.envs import training_env
    from gigastep.eval.splits import load_split

    split = load_split("levels-v1")
    (item,) = [i for i in split.items if i.id == "levels-16"]
    env = training_env(item.scenario, 'map_generator={"base": "procgen_dense", "seeds": [0, 16]}')
    assert env.config == split.config(item)


def test_evaluations_drop_reward_shaping_but_keep_a_map_generator():
    import gigastep
    from baselines.envs import evaluation_config

    maps = "identical_5_vs_5_fobs_vec_maps_disc"
    own = gigastep.make(maps).config
    assert evaluation_config(maps, "reward_damage=5,reward_agent_disabled=2") == own
    assert evaluation_config(maps, "", shooter_credit=0.2) == own
    generator = 'map_generator={"base": "procgen_dense", "seeds": [0, 16]},reward_damage=5'
    played = evaluation_config(maps, generator)
    assert played.map_generator.seeds == (0, 16)
    assert played.reward_damage == own.reward_damage
