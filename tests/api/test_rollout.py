"""`gigastep.rollout.rollout`: one compiled scan of the auto-resetting batched step.

* it equals a hand-written Python loop of `env.step_autoreset` over each game, with the key
  derivation its docstring states (per-step records, final states, per-game totals);
* totals in games whose outcome is known by construction: a team that starts inside an
  obstacle box dies on the first step (the other team wins every one-step episode), and a
  game without combat ends only at its time limit (draws);
* `joint_policy` takes each team's rows from its own policy;
* the GPU form of the step (vmapped `step_autoreset`) gives the same games as the CPU form;
* one trace per (config, policy, num_envs, num_steps, trajectory);
* bad arguments fail with a clear error before any compute.

The sharded and multi-process forms are in `test_parallel.py`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep import rollout as grollout
from gigastep.env import GigastepEnv, step_autoreset
from gigastep.opponents import circle, pursuit
from gigastep.opponents import random as random_policy
from gigastep.rollout import joint_policy, rollout
from gigastep.scenarios import make_config
from gigastep.types import EnvConfig, MapSpec

# 2 vs 2, stochastic detection and communication, obstacle maps, episodes of 6 steps at most:
# several episodes end (and games restart) during a 14-step rollout.
MAIN = make_config("identical_2_vs_2_pobs_vec_maps_cont", max_episode_length=6)
GAMES, STEPS = 4, 14  # 4 games: also split over 2 and 4 devices (test_parallel.py)
MATCH = joint_policy("pursuit", None)  # team 0 pursues, team 1 acts at random


def _trap(name: str, team: int) -> MapSpec:
    """A map whose right (team 1) or left (team 0) half is one obstacle box holding that
    team's start region."""
    box = (5.0, 0.0, 10.0, 10.0) if team == 1 else (0.0, 0.0, 5.0, 10.0)
    return MapSpec(
        name=name, boxes=(box,), start_team0=(1.0, 1.0, 3.0, 9.0), start_team1=(7.0, 1.0, 9.0, 9.0)
    )


# 2 vs 1 in which one team starts inside a box (no placement retries) and dies on the first
# step: every episode lasts one step and is won by the other team; a win pays 10 to each
# survivor, divided by its team size (5 to each of team 0's agents, 10 to team 1's).
WIN = EnvConfig(
    teams=(0, 0, 1),
    obs_type="vector",
    maps=(_trap("trap_team1", 1), _trap("trap_team0", 0)),
    reset_max_rounds=0,
    collision_range=0.0,
    reward_game_won=10.0,
    reward_defeat_one_opponent=0.0,
    stochastic_obs=False,
    stochastic_comm=False,
)

# 1 vs 1 without combat or collisions on the empty map, flying circles: episodes end only at
# the time limit of 4 steps (draws); each agent earns its idle reward 1 every step.
DRAW = EnvConfig(
    teams=(0, 1),
    obs_type="vector",
    map_set="empty",
    damage_range=(0.0, 0.0),
    collision_range=0.0,
    idle_reward=(1.0, 1.0),
    max_episode_length=4,
    reward_game_won=0.0,
    reward_defeat_one_opponent=0.0,
)


def assert_trees_identical(a, b, what=""):
    leaves_a, tree_a = jax.tree_util.tree_flatten_with_path(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b, what
    for (path, x), y in zip(leaves_a, leaves_b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        where = f"{what}{jax.tree_util.keystr(path)}"
        assert x.dtype == y.dtype and x.shape == y.shape, (where, x.dtype, y.dtype, x.shape)
        if not np.array_equal(x, y):
            bad = np.argwhere(x != y)
            raise AssertionError(f"{where}: {len(bad)} entries differ, first at {bad[0]}")


# ------------------------------------------------------------------------------------------
# The reference: a Python loop over games and steps
# ------------------------------------------------------------------------------------------


@functools.cache
def _jitted(config: EnvConfig, policy):
    # Compiled with the rollouts' XLA options (the legacy CPU fusion emitters): under XLA's
    # default emitters the speed can differ in the last bit between two programs (one FMA
    # contracted or not, see `gigastep.rollout.compiler_options`), which is not what these
    # tests are about.
    env = GigastepEnv(config)
    options = grollout.compiler_options(jax.default_backend())
    act = jax.jit(functools.partial(policy, config), compiler_options=options)
    step = jax.jit(functools.partial(step_autoreset, config), compiler_options=options)
    return env, act, step


def loop_rollout(config: EnvConfig, num_envs: int, num_steps: int, key, policy):
    """Per game: reset from k_reset, then at step t act with k_policy and step with k_env,
    where k_reset, k_run = split(split(key, num_envs)[b]) and k_policy, k_env =
    split(fold_in(k_run, t)). Returns per-game totals and per-step records (NumPy)."""
    env, act, step = _jitted(config, policy)
    n = config.n_agents
    totals = {
        "total_reward": np.zeros((num_envs, n), np.float32),
        "episodes": np.zeros(num_envs, np.int32),
        "episode_steps": np.zeros(num_envs, np.int32),
        "episode_return_sum": np.zeros((num_envs, n), np.float32),
        "wins": np.zeros((num_envs, 2), np.int32),
        "draws": np.zeros(num_envs, np.int32),
    }
    records, finals = [], []
    for b, game_key in enumerate(jax.random.split(key, num_envs)):
        k_reset, k_run = jax.random.split(game_key)
        obs, state = env.reset(k_reset)
        steps = []
        for t in range(num_steps):
            k_policy, k_env = jax.random.split(jax.random.fold_in(k_run, t))
            actions = act(state, k_policy)
            next_obs, state, rewards, dones, done, info = step(state, actions, k_env)
            steps.append((obs, actions, rewards, dones, done))
            obs = next_obs
            totals["total_reward"][b] += np.asarray(rewards)
            if bool(done):
                totals["episodes"][b] += 1
                totals["episode_steps"][b] += int(info.episode_length)
                totals["episode_return_sum"][b] += np.asarray(info.episode_return)
                winner = int(info.winner)
                if winner < 0:
                    totals["draws"][b] += 1
                else:
                    totals["wins"][b, winner] += 1
        records.append(steps)
        finals.append((state, obs))
    return totals, records, finals


@pytest.fixture(scope="module")
def main_rollout():
    key = jax.random.key(7)
    return key, rollout(GigastepEnv(MAIN), GAMES, STEPS, key, MATCH, trajectory=True)


@pytest.fixture(scope="module")
def main_loop(main_rollout):
    key, _ = main_rollout
    return loop_rollout(MAIN, GAMES, STEPS, key, MATCH)


@pytest.mark.slow
def test_rollout_totals_equal_a_python_loop_of_step_autoreset(main_rollout, main_loop):
    _, out = main_rollout
    totals, _, _ = main_loop
    assert int(np.sum(totals["episodes"])) >= GAMES  # episodes did end and games restarted
    for name, expected in totals.items():
        np.testing.assert_array_equal(np.asarray(getattr(out, name)), expected, err_msg=name)


def test_rollout_trajectory_equals_a_python_loop_of_step_autoreset(main_rollout, main_loop):
    _, out = main_rollout
    _, records, _ = main_loop
    traj = out.trajectory
    for b in range(GAMES):
        for t in range(STEPS):
            record = (traj.obs, traj.actions, traj.rewards, traj.dones, traj.episode_done)
            got = jax.tree_util.tree_map(lambda x, t=t, b=b: x[t, b], record)
            assert_trees_identical(got, records[b][t], f"game {b} step {t} ")


def test_rollout_final_state_and_obs_equal_a_python_loop(main_rollout, main_loop):
    _, out = main_rollout
    _, _, finals = main_loop
    for b, (state, obs) in enumerate(finals):
        got = jax.tree_util.tree_map(lambda x, b=b: x[b], (out.final_state, out.final_obs))
        assert_trees_identical(got, (state, obs), f"game {b} ")


# ------------------------------------------------------------------------------------------
# Totals in games with a known outcome
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def win_rollout():
    return rollout(WIN, 8, 5, jax.random.key(1), policy="circle")


def test_a_team_starting_in_a_box_loses_every_one_step_episode(win_rollout):
    out = win_rollout
    np.testing.assert_array_equal(out.episodes, 5)  # one episode per step
    np.testing.assert_array_equal(out.episode_steps, 5)
    np.testing.assert_array_equal(out.draws, 0)
    np.testing.assert_array_equal(np.sum(out.wins, axis=1), 5)
    wins = np.sum(out.wins, axis=0)
    assert wins[0] > 0 and wins[1] > 0  # both trap maps were drawn among the 40 episodes


def test_wins_pay_the_winning_survivors_their_share_of_the_game_won_reward(win_rollout):
    out = win_rollout
    wins0, wins1 = np.asarray(out.wins[:, 0]), np.asarray(out.wins[:, 1])
    expected = np.stack([5.0 * wins0, 5.0 * wins0, 10.0 * wins1], axis=1)
    np.testing.assert_array_equal(out.total_reward, expected.astype(np.float32))
    # every episode completed, so the completed-episode returns are all the reward
    np.testing.assert_array_equal(out.episode_return_sum, out.total_reward)


@pytest.mark.slow
def test_episodes_ending_at_the_time_limit_are_draws_and_unfinished_steps_do_not_count():
    out = rollout(DRAW, 4, 10, jax.random.key(2), policy=circle)
    np.testing.assert_array_equal(out.episodes, 2)  # steps 4 and 8 end an episode
    np.testing.assert_array_equal(out.episode_steps, 8)
    np.testing.assert_array_equal(out.draws, 2)
    np.testing.assert_array_equal(out.wins, 0)
    np.testing.assert_array_equal(out.total_reward, 10.0)  # idle reward 1 on each of 10 steps
    np.testing.assert_array_equal(out.episode_return_sum, 8.0)  # the two completed episodes
    np.testing.assert_array_equal(out.final_state.episode.step, 2)  # 2 steps into episode 3
    summary = out.summary()
    assert summary["episodes"] == 8 and summary["draw_rate"] == 1.0
    assert summary["mean_episode_length"] == 4.0 and summary["total_reward"] == [40.0, 40.0]


# ------------------------------------------------------------------------------------------
# Policies and the two forms of the step
# ------------------------------------------------------------------------------------------


def test_joint_policy_takes_team0_rows_from_the_first_and_team1_rows_from_the_second():
    config = MAIN  # teams (0, 0, 1, 1), continuous actions
    state = GigastepEnv(config).reset(jax.random.key(3))[1]
    key = jax.random.key(4)
    k0, k1 = jax.random.split(key)
    got = np.asarray(joint_policy(circle, random_policy)(config, state, key))
    np.testing.assert_array_equal(got[:2], [[1.0, 0.0, 0.0]] * 2)  # circle: heading +1
    np.testing.assert_array_equal(got[2:], np.asarray(random_policy(config, state, k1))[2:])
    pursue = np.asarray(joint_policy(pursuit, circle)(config, state, key))
    np.testing.assert_array_equal(pursue[:2], np.asarray(pursuit(config, state, k0))[:2])
    assert joint_policy("circle", "random") == joint_policy(circle, random_policy)
    assert repr(joint_policy(circle, None)) == "joint_policy(circle, random)"


@pytest.mark.slow
def test_the_gpu_form_of_the_step_gives_the_same_games(main_rollout):
    # On GPU the rollout steps with the vmapped step_autoreset (no host-side conditional);
    # run that form here on the CPU and compare.
    key, out = main_rollout
    run = jax.jit(
        lambda data: grollout.play_games(
            MAIN,
            MATCH,
            STEPS,
            True,
            False,
            "threefry2x32",
            grollout.game_keys(data, "threefry2x32", GAMES),
        ),
        compiler_options=grollout.compiler_options("cpu"),
    )
    assert_trees_identical(run(jax.random.key_data(key)), out)


def test_rollout_traces_once_per_configuration_and_size(main_rollout):
    env = GigastepEnv(MAIN)
    rollout(env, GAMES, STEPS, jax.random.key(11), MATCH, trajectory=True)
    before = grollout._TRACES["rollout"]
    for seed in (12, 13):  # new keys, typed and raw, and an equal env built anew
        rollout(GigastepEnv(MAIN), GAMES, STEPS, jax.random.key(seed), MATCH, trajectory=True)
        rollout(
            env,
            GAMES,
            STEPS,
            jax.random.PRNGKey(seed),
            joint_policy("pursuit", None),
            trajectory=True,
        )
    assert grollout._TRACES["rollout"] == before


def test_typed_and_raw_keys_of_the_same_seed_give_the_same_games(win_rollout):
    raw = rollout(WIN, 8, 5, jax.random.PRNGKey(1), policy="circle")
    assert_trees_identical(raw, win_rollout)


# ------------------------------------------------------------------------------------------
# Bad arguments
# ------------------------------------------------------------------------------------------

KEY = jax.random.key(0)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"num_envs": 0}, ValueError, "num_envs must be a positive integer, got 0"),
        ({"num_envs": 2.0}, TypeError, "num_envs must be a positive integer, got float"),
        ({"num_envs": True}, TypeError, "num_envs must be a positive integer, got bool"),
        ({"num_steps": -3}, ValueError, "num_steps must be a positive integer, got -3"),
        ({"key": 0}, TypeError, "key must be a PRNG key"),
        ({"key": jax.random.split(KEY, 2)}, ValueError, "must be a single PRNG key"),
        ({"key": jnp.zeros(3, jnp.uint32)}, ValueError, "uint32 of shape (2,)"),
        ({"policy": 3}, TypeError, "policy must be None"),
        ({"policy": "pursuer"}, ValueError, "closest: ['pursuit'"),
        ({"trajectory": "yes"}, TypeError, "trajectory must be True or False"),
        ({"env": 5}, TypeError, "expected a scenario name, a GigastepEnv or an EnvConfig"),
        ({"env": "identical_2_vs_3"}, ValueError, "identical_2_vs_2"),
    ],
)
def test_bad_arguments_fail_before_any_compute(kwargs, error, message):
    args = {"env": MAIN, "num_envs": 2, "num_steps": 3, "key": KEY, **kwargs}
    traces = grollout._TRACES["rollout"]
    with pytest.raises(error) as info:
        rollout(**args)
    assert message in str(info.value)
    assert grollout._TRACES["rollout"] == traces


def test_a_policy_with_the_wrong_action_format_is_named_in_the_error():
    def team_only(config, state, key):  # team 0's rows only
        return jnp.zeros((2, 3))

    with pytest.raises(
        ValueError,
        match=r"policy team_only: continuous actions must be floats "
        r"of shape \(4, 3\).*got float32 of shape \(2, 3\)",
    ):
        rollout(MAIN, 2, 3, KEY, policy=team_only)


def test_a_versus_env_is_refused_with_a_pointer_to_joint_policy():
    from gigastep.versus import VersusEnv

    with pytest.raises(TypeError, match="joint_policy"):
        rollout(VersusEnv(GigastepEnv(MAIN), "pursuit"), 2, 3, KEY)


def test_an_error_inside_a_policy_says_which_policy_raised_it():
    def broken(config, state, key):
        raise ZeroDivisionError("no actions today")

    with pytest.raises(ZeroDivisionError, match="no actions today") as info:
        rollout(MAIN, 2, 3, KEY, policy=broken)
    assert "(raised by policy broken on one game's state)" in info.value.__notes__
