"""benchmarks.external_learning: the learning table of JaxMARL-style IPPO / MAPPO and BenchMARL's
MAPPO on Gigastep (a tiny run of each path, the parameter files, the players, the table)."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

pytest.importorskip("jaxmarl")
pytest.importorskip("flax")
pytest.importorskip("optax")
torch = pytest.importorskip("torch")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from benchmarks import _jaxmarl_ppo as jp  # noqa: E402
from benchmarks import external_learning as el  # noqa: E402

TINY = ["--num-envs", "4", "--num-steps", "8", "--hidden", "16", "--num-minibatches", "2"]


# ------------------------------------------------------------------------------------------
# Options and opponents (no compute)
# ------------------------------------------------------------------------------------------


def test_opponent_shares_split_the_games_by_largest_remainder():
    # 16 x 0.7 = 11.2 and 16 x 0.3 = 4.8: 11 and 4, the remaining game to the larger remainder
    assert jp.opponent_counts((("pursuit", 0.7), ("random", 0.3)), 16) == [
        ("pursuit", 11),
        ("random", 5),
    ]
    # every opponent plays at least one game
    assert jp.opponent_counts((("pursuit", 0.99), ("random", 0.01)), 4) == [
        ("pursuit", 3),
        ("random", 1),
    ]


def test_bad_opponents_are_refused_with_the_closest_names():
    with pytest.raises(ValueError, match="unknown scripted opponent 'pursut'.*pursuit"):
        jp.opponent_counts((("pursut", 1.0),), 4)
    with pytest.raises(ValueError, match="num_envs=1 games cannot hold 2 opponents"):
        jp.opponent_counts((("pursuit", 1.0), ("random", 1.0)), 1)
    with pytest.raises(ValueError, match="must be positive"):
        jp.opponent_counts((("pursuit", 0.0),), 4)


def test_auto_opponents_are_the_cpu_presets_mix_and_benchmarl_takes_one():
    assert el.parse_opponents("auto", "jaxmarl-ippo") == (("pursuit", 0.7), ("random", 0.3))
    assert el.parse_opponents("auto", "benchmarl-mappo") == (("pursuit", 1.0),)
    assert el.parse_opponents("random", "jaxmarl-mappo") == (("random", 1.0),)
    with pytest.raises(ValueError, match="a BenchMARL task plays one scripted opponent"):
        el.parse_opponents("pursuit:0.5,random:0.5", "benchmarl-mappo")
    for bad in ("pursuit:0", "pursuit:inf", "pursuit:nan", "pursuit:x"):
        with pytest.raises(ValueError, match="--opponent"):
            el.parse_opponents(bad, "jaxmarl-ippo")


def test_a_config_that_cannot_run_is_refused_before_any_compute():
    with pytest.raises(ValueError, match="algorithm must be 'ippo' or 'mappo', got 'qmix'"):
        jp.check_config(dataclasses.replace(jp.IPPO, algorithm="qmix"))
    with pytest.raises(ValueError, match="num_minibatches=3 must divide .* 2048"):
        jp.check_config(dataclasses.replace(jp.IPPO, num_minibatches=3))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trainer", "jaxmarl-ipo"], "unknown trainer 'jaxmarl-ipo' \\(closest: jaxmarl-ippo"),
        (["--trainer", "jaxmarl-ippo", "--budget-s", "0"], "--budget-s must be positive"),
        (["--trainer", "jaxmarl-ippo", "--eval-opponents", "rand"], "unknown evaluation opponent"),
        (["--trainer", "jaxmarl-ippo", "--opponent", "persuit"], "unknown scripted policy"),
        ([], "name --trainer"),
    ],
)
def test_the_command_line_refuses_bad_input(argv, message, capsys):
    with pytest.raises(SystemExit):
        el.main(argv)
    assert re.search(message, capsys.readouterr().err)


# ------------------------------------------------------------------------------------------
# Parameter files
# ------------------------------------------------------------------------------------------


def _params(seed: int = 0):
    nets = jp.make_networks("mappo", 8, "relu", 27)
    return nets, nets.init(jax.random.PRNGKey(seed), 90, 20)


def test_params_round_trip_bit_for_bit(tmp_path):
    _, params = _params()
    meta = {"config": jp.config_dict(jp.MAPPO), "obs_size": 90}
    path = tmp_path / "sub" / "params.npz"
    jp.save_params(path, params, meta)
    loaded, meta_back = jp.load_params(path)
    assert jax.tree.structure(loaded) == jax.tree.structure(jax.device_get(params))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(loaded), strict=True):
        assert np.asarray(a).dtype == b.dtype and np.array_equal(np.asarray(a), b)
    assert meta_back == {"format": jp.FORMAT, **json.loads(json.dumps(meta))}
    assert [p.name for p in path.parent.iterdir()] == ["params.npz"]  # no temporary left


def test_a_file_that_is_not_a_parameter_file_is_refused(tmp_path):
    bad = tmp_path / "x.npz"
    np.savez(bad, w=np.zeros(3))
    with pytest.raises(ValueError, match="has no '__meta__' header"):
        jp.load_params(bad)
    with pytest.raises(FileNotFoundError, match="no parameter file"):
        jp.load_params(tmp_path / "missing.npz")


def test_the_player_samples_what_the_network_samples_on_the_same_observation(tmp_path):
    nets, params = _params(1)
    meta = {"config": jp.config_dict(dataclasses.replace(jp.MAPPO, hidden=8)), "obs_size": 90}
    jp.save_params(tmp_path / "p.npz", params, meta)
    player = jp.JaxPolicyPlayer.load(tmp_path / "p.npz")
    import gigastep

    config = gigastep.make(el.SCENARIO).config
    player.check(config, team=1)
    actor = player.actor(config, team=1, num_envs=3, device="cpu", seed=7)
    obs = jax.random.normal(jax.random.PRNGKey(2), (3, 5, 90))
    logits = nets.logits(params, obs)
    for t in range(2):  # the t-th call samples with fold_in(PRNGKey(seed), t)
        key = jax.random.fold_in(jax.random.PRNGKey(7), t)
        expected = jax.random.categorical(key, logits)  # how training samples (sample_actions)
        got = actor(torch.as_tensor(np.array(obs)), torch.zeros(3, dtype=torch.bool))
        assert got.dtype == torch.int64 and got.shape == (3, 5)
        np.testing.assert_array_equal(got.numpy(), np.asarray(expected))
    with pytest.raises(ValueError, match="observations of length 90; this game's have length"):
        player.check(gigastep.make("identical_2_vs_2_fobs_vec_void_disc").config, team=0)


def test_sampling_follows_the_logits():
    # a policy that puts all its mass on action 5 plays action 5; log-probability 0
    logits = jnp.full((4, 27), -1e9).at[:, 5].set(0.0)
    action, logp = jp.sample_actions(logits, jax.random.PRNGKey(0))
    assert action.tolist() == [5] * 4 and np.allclose(logp, 0.0)
    assert np.allclose(jp._entropy(jnp.zeros((1, 27))), np.log(27))


def test_gae_with_per_agent_dones_matches_a_loop():
    rng = np.random.default_rng(0)
    t, b, gamma, lam = 5, 3, 0.9, 0.8
    done = rng.random((t, b)) < 0.3
    value, reward, last = rng.normal(size=(t, b)), rng.normal(size=(t, b)), rng.normal(size=b)
    traj = jp.Transition(done, None, jnp.asarray(value), jnp.asarray(reward), None, None, None)
    adv, targets = jp.gae(traj, jnp.asarray(last), gamma, lam)
    expected = np.zeros((t, b))
    next_adv, next_value = np.zeros(b), last
    for i in reversed(range(t)):
        nd = 1.0 - done[i]
        delta = reward[i] + gamma * next_value * nd - value[i]
        next_adv = delta + gamma * lam * nd * next_adv
        next_value = value[i]
        expected[i] = next_adv
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(targets, expected + value, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------
# A tiny run of the JaxMARL IPPO path, end to end (compiles the trainer and the evaluation)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ippo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("external")
    argv = ["--trainer", "jaxmarl-ippo", "--budget-s", "1", "--out", str(out), "--games", "4"]
    (row,) = el.main([*argv, *TINY])
    return out, row


@pytest.mark.slow
def test_a_tiny_jaxmarl_ippo_run_writes_a_row_with_every_field(ippo_run):
    out, row = ippo_run
    on_disk = json.loads((out / "jaxmarl-ippo_seed0.json").read_text())
    assert on_disk == json.loads(json.dumps(row))
    assert all(f in on_disk for f in el.FIELDS)
    assert row["trainer"] == "jaxmarl-ippo" and row["scenario"] == el.SCENARIO
    import gigastep

    assert row["scenario_hash"] == gigastep.make(el.SCENARIO).spec.hash
    assert row["updates"] >= 1 and row["env_steps"] == row["updates"] * 4 * 8
    assert row["agent_steps"] == row["env_steps"] * 10
    assert 0 < row["compile_s"] <= row["trained_s"]
    assert row["training_opponents"] == [["pursuit", 0.75], ["random", 0.25]]
    assert row["training_games"] == [["pursuit", 3], ["random", 1]]
    assert {v for v in row["versions"] if row["versions"][v]} >= {"jax", "jaxmarl", "flax"}
    assert [f["opponent"] for f in row["final"]] == ["random", "pursuit"]
    for f in row["final"]:
        assert f["games"] == 4 and f["wins"] + f["draws"] + f["losses"] == 4
        assert 0.0 <= f["ci_low"] <= f["win_rate"] <= f["ci_high"] <= 1.0
    for phase in ("training", "rollout"):
        assert row["throughput"][phase]["games"] == 4
    table = el.render_table([row])
    assert (
        "| jaxmarl-ippo |" in table and "vs pursuit" in table and "rollout [agent-steps/s]" in table
    )


@pytest.mark.slow
def test_the_saved_params_are_the_trained_ones_and_play(ippo_run):
    out, row = ippo_run
    params, meta = jp.load_params(row["files"]["params"])
    assert meta["updates"] == row["updates"] and meta["config"]["hidden"] == 16
    player = jp.JaxPolicyPlayer(params, meta)
    from gigastep.eval.matches import evaluate

    result = evaluate(player, "random", el.SCENARIO, games=2, seed=0, max_steps=8)
    assert result.games + result.unfinished == 2


@pytest.mark.slow
def test_the_table_mode_reads_the_rows(ippo_run, capsys):
    out, _ = ippo_run
    el.main(["--table", str(out / "jaxmarl-ippo_seed0.json")])
    assert "| jaxmarl-ippo |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        el.main(["--table", str(out / "jaxmarl-ippo_seed0" / "params.npz")])


# ------------------------------------------------------------------------------------------
# BenchMARL (only where it is installed: docs/install.md)
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_tiny_benchmarl_mappo_run_writes_a_row_with_every_field(tmp_path):
    pytest.importorskip("benchmarl", reason="BenchMARL is not installed (the benchmarl extra)")
    argv = ["--trainer", "benchmarl-mappo", "--budget-s", "1", "--out", str(tmp_path)]
    (row,) = el.main([*argv, "--games", "4", *TINY])
    assert all(f in row for f in el.FIELDS)
    assert row["updates"] >= 1 and row["env_steps"] == row["updates"] * 32
    assert row["training_opponents"] == [["pursuit", 1.0]]
    assert row["training_games"] == [["pursuit", 4]]
    assert row["versions"]["benchmarl"]
    for f in row["final"]:
        assert f["games"] == 4 and f["wins"] + f["draws"] + f["losses"] == 4


# ------------------------------------------------------------------------------------------
# The table (hand-made rows)
# ------------------------------------------------------------------------------------------


def _row(trainer: str) -> dict:
    rate = {"env_steps_per_s": 100.0, "agent_steps_per_s": 1000.0, "games": 16}
    final = [
        {"opponent": o, "games": 10, "wins": w, "draws": 1, "losses": 9 - w, "win_rate": w / 10}
        | {"ci_low": 0.1, "ci_high": 0.9}
        for o, w in (("random", 7), ("pursuit", 2))
    ]
    return {
        "trainer": trainer,
        "seed": 3,
        "budget_s": 600.0,
        "updates": 12,
        "env_steps": 24576,
        "training_opponents": [["pursuit", 0.6875], ["random", 0.3125]],
        "throughput": {"training": rate, "rollout": rate},
        "warmup_s": 41.6,
        "final": final,
    }


def test_the_table_has_a_row_per_run_and_the_references_in_env_steps():
    ref = {
        "kind": "jax-phases",
        "num_envs": 512,
        "n_agents": 10,
        "rollout_agent_steps_per_s": 2.0e6,
        "end_to_end_samples_per_s": 5.0e5,
        "warmup_s": 30.0,
    }
    failed = {"kind": "torch", "error": "timed out"}
    learning, speed = el.render_table([_row("jaxmarl-ippo")], [ref, failed]).split("\n\n")
    lines = learning.splitlines()
    assert "vs random: win rate [95% CI] (W/D/L)" in lines[0]
    assert lines[0].index("vs random") < lines[0].index("vs pursuit")  # the order evaluated
    assert lines[2] == (
        "| jaxmarl-ippo | 3 | 600 | 12 | 24.6 k | pursuit 0.69, random 0.31 | "
        "0.700 [0.100, 0.900] (7/1/2) | 0.200 [0.100, 0.900] (2/1/7) | 10 |"
    )
    rows = speed.splitlines()[2:]
    assert rows[0] == "| jaxmarl-ippo | 16 | 100 | 1.00 k | 1.00 k | 42 |"
    # 2e6 agent-steps/s over 10 agents a game: 2e5 env-steps/s; the failed reference is left out
    assert (
        rows[1] == "| reference: JAX scan (JAX PPO rollout) | 512 | 200 k | 2.00 M | 500 k | 30 |"
    )
    assert len(rows) == 2


def test_a_child_process_gets_every_option_of_its_parent():
    argv = ["--trainer", "all", "--budget-s", "30", "--seed", "2", "--out", "o", "--games", "6"]
    argv += ["--opponent", "random", "--eval-opponents", "pursuit", *TINY]
    opts = el._parser().parse_args(argv)
    child = el._parser().parse_args(el._child_argv("jaxmarl-mappo", opts))
    assert child.trainer == ["jaxmarl-mappo"]
    for name in ("budget_s", "seed", "out", "games", "opponent", "eval_opponents", "scenario"):
        assert getattr(child, name) == getattr(opts, name), name
    for name in ("num_envs", "num_steps", "hidden", "num_minibatches"):
        assert getattr(child, name) == getattr(opts, name) > 0, name
    assert not child.references and child.table is None
