"""The batched auto-reset step (`GigastepEnv.v_step_autoreset`) resets only the finished games,
yet returns bit for bit what `jax.vmap(step_autoreset)` returns (states, obs, rewards, dones,
episode dones and info), whether no game, a few games (up to its capacity
`autoreset_capacity(B)`) or more games than that finish in the step.

Bit for bit needs one precaution. On a CPU with FMA, XLA lets LLVM contract a multiply and an
add into one fused multiply-add inside a fused kernel, and which pairs it contracts depends on
how the whole program was fused: two different programs computing the same step (even
`vmap(step_autoreset)` and a loop of the jitted `step_autoreset`) then differ in the last bit
of a few floats. The comparisons therefore run in a subprocess whose XLA code generation stops
at AVX (`--xla_cpu_max_isa=AVX`, no FMA), where every program rounds each operation alone and
the results must be identical. (Elsewhere than x86-64 they run with the default code and floats
are compared to 1e-5.)

Games are made to finish by hand: a game at step `max_episode_length - 1` is truncated by the
step, a game whose team-1 agents are all outside the map is terminated (they die of the
hazard). The batches start from `reset` (a first step in which every game truncates) and two
played steps, so locks, damage and waypoints take part. Configs: a 2-vs-2 vector game with
waypoints and continuous actions, and the same game with discrete actions and `rgb_vector`
observations at 16x16. Batch 40 (capacity 2), plus a batch of one game (typed keys, no final
observation).
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial

import pytest

from tests.exact_runs import leaf_mismatches, run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH = 40


# ------------------------------------------------------------------------------------------
# The comparisons (run in the subprocess)
# ------------------------------------------------------------------------------------------


def run_cases(strict: bool) -> dict[str, dict]:
    """{case: {"done": finished games, "expected": intended, "mismatches": [leaf paths]}}."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from gigastep import env as genv
    from gigastep.env import GigastepEnv
    from gigastep.game.batching import autoreset_capacity
    from gigastep.scenarios import make_config
    from gigastep.types import EnvState
    from gigastep.versus import VersusEnv

    vec = make_config(
        "identical_2_vs_2_pobs_vec_maps_cont", enable_waypoints=True, waypoint_spawn_prob=0.5
    )
    rgbv = vec.replace(
        discrete_actions=True, obs_type="rgb_vector", resolution_x=16, resolution_y=16
    )
    cap = autoreset_capacity(BATCH)
    results = {}

    def actions_for(config, key, batch):
        if config.discrete_actions:
            return jax.random.randint(key, (batch, config.n_agents), 0, 27)
        return jax.random.uniform(key, (batch, config.n_agents, 3), minval=-1.0, maxval=1.0)

    def inputs(config, seed, batch, typed):
        k_act, k_env = jax.random.split(jax.random.key(seed))
        keys = jax.random.split(k_env, batch)
        return actions_for(config, k_act, batch), keys if typed else jax.random.key_data(keys)

    def finishing(config, states, truncate=(), eliminate=()):
        """The games in `truncate` at their last step, those in `eliminate` with every team-1
        agent outside the map."""
        ep, ag = states.episode, states.agents
        step = ep.step.at[np.asarray(truncate, int)].set(config.max_episode_length - 1)
        gone = np.zeros(ag.x.shape, bool)
        gone[np.asarray(eliminate, int)] = np.asarray(config.teams) == 1
        x = jnp.where(jnp.asarray(gone), -1.0, ag.x)
        return states.replace(episode=ep.replace(step=step), agents=ag.replace(x=x))

    def run(config, final_obs, batch, typed, cases, versus=False):
        ref = jax.jit(jax.vmap(partial(genv.step_autoreset, config, final_obs=final_obs)))
        env = GigastepEnv(config)
        # With an opponent (team 1 scripted): VersusEnv's batched form against its vmapped
        # step_autoreset, on the same states, keys and the learner team's actions.
        vs = VersusEnv(env, "random") if versus else None
        ref_vs = vs and jax.jit(jax.vmap(partial(vs.step_autoreset, final_obs=final_obs)))
        n = config.n_agents
        one = EnvState.create(config, x=np.linspace(2.0, 8.0, n), y=np.full(n, 5.0))
        states = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (batch, *a.shape)), one)
        states = finishing(config, states, truncate=range(batch))
        for t in range(3):  # every game is reset by the first step, then played two steps
            out = ref(states, *inputs(config, 100 + t, batch, typed))
            assert bool(jnp.all(out[4])) == (t == 0)
            states = out[1]
        # actions and keys with which no game ends by itself (a collision or a flight out of
        # the map can end a 2-vs-2 game early), so that exactly the chosen games finish
        for seed in range(1, 100):
            actions, keys = inputs(config, seed, batch, typed)
            if not bool(jnp.any(ref(states, actions, keys)[4])):
                break
        for name, truncate, eliminate in cases:
            s = finishing(config, states, truncate, eliminate)
            want = ref(s, actions, keys)
            got = env.v_step_autoreset(s, actions, keys, final_obs)
            results[name] = {
                "done": int(np.sum(np.asarray(want[4]))),
                "expected": len(set(truncate) | set(eliminate)),
                "terminated": int(np.sum(np.asarray(want[5].terminated))),
                "mismatches": leaf_mismatches(got, want, strict),
            }
            if vs:
                team = actions[:, np.asarray(vs.team_indices)]
                want = ref_vs(s, team, keys)
                got = vs.v_step_autoreset(s, team, keys, final_obs)
                results[f"{name}/versus"] = {
                    "done": int(np.sum(np.asarray(want[4]))),
                    "expected": len(set(truncate) | set(eliminate)),
                    "mismatches": leaf_mismatches(got, want, strict),
                }

    few = [int(g) for g in np.linspace(0, BATCH - 1, cap)]
    more = list(range(0, 3 * (cap + 1), 3))
    for tag, config in (("vec", vec), ("rgbv", rgbv)):
        run(
            config,
            True,
            BATCH,
            False,
            versus=tag == "vec",
            cases=[
                (f"{tag}/none", [], []),
                (f"{tag}/one", [7], []),
                (f"{tag}/capacity", few[1:], few[:1]),
                (f"{tag}/capacity+1", more[::2], more[1::2]),
                (f"{tag}/all", list(range(BATCH)), more[1::2]),
            ],
        )
    run(vec, False, 1, True, [("single/none", [], []), ("single/one", [0], [])])
    return results


if __name__ == "__main__":
    print(json.dumps(run_cases(strict=sys.argv[1] == "strict")))


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results():
    return run_script(__file__)


def assert_case(results, name):
    r = results[name]
    assert r["done"] == r["expected"], f"{name}: the batch is not what the test means: {r}"
    assert not r["mismatches"], f"{name}: differs from vmap(step_autoreset) in {r['mismatches']}"


@pytest.mark.subprocess
@pytest.mark.parametrize("config", ["vec", "rgbv"])
def test_equals_vmapped_step_autoreset_when_no_game_finishes(results, config):
    assert_case(results, f"{config}/none")


@pytest.mark.subprocess
@pytest.mark.parametrize("config", ["vec", "rgbv"])
@pytest.mark.parametrize("case", ["one", "capacity"])
def test_equals_vmapped_step_autoreset_when_up_to_capacity_games_finish(results, config, case):
    assert_case(results, f"{config}/{case}")


@pytest.mark.subprocess
@pytest.mark.parametrize("config", ["vec", "rgbv"])
@pytest.mark.parametrize("case", ["capacity+1", "all"])
def test_equals_vmapped_step_autoreset_when_more_than_capacity_games_finish(results, config, case):
    assert_case(results, f"{config}/{case}")


@pytest.mark.subprocess
@pytest.mark.parametrize("config", ["vec", "rgbv"])
def test_terminated_and_truncated_games_are_both_reset(results, config):
    # the mixed batches hold eliminated (terminated) games besides truncated ones
    for case in ("capacity", "capacity+1"):
        assert results[f"{config}/{case}"]["terminated"] >= 1
        assert_case(results, f"{config}/{case}")


@pytest.mark.subprocess
@pytest.mark.parametrize("case", ["none", "one"])
def test_equals_vmapped_step_autoreset_for_one_game_typed_keys_no_final_obs(results, case):
    assert_case(results, f"single/{case}")


@pytest.mark.subprocess
@pytest.mark.parametrize("case", ["none", "one", "capacity", "capacity+1", "all"])
def test_versus_env_batched_form_equals_its_vmapped_step_autoreset(results, case):
    # the scripted opponent may end a game on its own, so at least the chosen games finish
    r = results[f"vec/{case}/versus"]
    assert r["done"] >= r["expected"], r
    assert not r["mismatches"], f"differs from vmap(VersusEnv.step_autoreset) in {r['mismatches']}"


@pytest.fixture(scope="module")
def full_reset():
    """A batch of 40 fresh 2-vs-2 games (obs, states), their keys and the plain reset."""
    import jax

    from gigastep.env import GigastepEnv
    from gigastep.scenarios import make_config

    env = GigastepEnv(make_config("identical_2_vs_2_pobs_vec_maps_cont"))
    keys = jax.random.split(jax.random.key(3), BATCH)
    return env, keys, jax.jit(jax.vmap(env.reset))(keys)


# the fast tier runs the case past the capacity; CI every case
@pytest.mark.parametrize(
    "games",
    [
        pytest.param([], marks=pytest.mark.slow),
        pytest.param([5], marks=pytest.mark.slow),
        pytest.param([0, 39], marks=pytest.mark.slow),
        [1, 2, 3],
        pytest.param(list(range(BATCH)), marks=pytest.mark.slow),
    ],
    ids=["none", "one", "capacity", "capacity+1", "all"],
)
def test_reset_where_resets_exactly_the_masked_games(full_reset, games):
    """`reset_where` (behind the auto-reset steps and Gymnasium's NEXT_STEP mode) gives
    `vmap(reset)(keys)` at every masked game, whether it resets none, the few masked ones
    (capacity 2 of 40) or the whole batch."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from gigastep.game.batching import autoreset_capacity, reset_where

    env, keys, want = full_reset
    assert autoreset_capacity(BATCH) == 2
    mask = jnp.zeros(BATCH, bool).at[jnp.asarray(games, jnp.int32)].set(True)
    got = jax.jit(lambda m, k: reset_where(env.reset, m, k))(mask, keys)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        g, w = np.asarray(g)[games], np.asarray(w)[games]
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)
