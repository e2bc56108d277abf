"""The GPU forms (`gigastep.game.xla.platform_form`) run on the CPU give bit for bit what the CPU
forms give: the counted placement loop of a reset (`gigastep.game.reset.place_agents`) and
the auto-resetting batched step that computes every game (`gigastep.game.batching.where_masked`)
against the `while` loop and the conditionals on the count of finished games.

The GPU form is forced with `_force_form("gpu")`, the reference with `_force_form("cpu")` (what
the CPU runs anyway). As in tests/game/test_autoreset_batched.py, two different programs may
contract a multiply and an add into an FMA differently, so the comparisons run in a subprocess
whose XLA code stops at AVX (x86-64: bit for bit; elsewhere floats to 1e-5).

Resets: the most crowded start of the catalogue (identical_20_vs_5, 20 agents in an 8 x 2
band: its games are redrawn, which the test asserts), the same with 3 rounds (some games
exhaust them and start in conflict, asserted), a user map with boxes in the start region and
a first-draw-only config (0 rounds). Auto-resetting steps: 4 steps of a batch of 40 games in
which none, one, more than the capacity (2) and all games finish, with vector (crowded) and
RGB observations, discrete and continuous actions; the vmapped `step_autoreset` (what
`TorchVecEnv` runs on a GPU) too.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial

import pytest

from tests.exact_runs import TINY_JAX_PPO, leaf_mismatches, run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH = 40
RESET_KEYS = 256


def _configs():
    from gigastep import EnvConfig, MapSpec
    from gigastep.scenarios import make_config

    crowded = make_config("identical_20_vs_5_fobs_vec_void_disc")
    boxed = MapSpec(
        name="boxed",
        boxes=((2.0, 2.0, 2.5, 3.0), (1.0, 1.0, 3.5, 1.6)),
        start_team0=(1.0, 1.0, 3.5, 4.0),
        start_team1=(4.0, 6.0, 9.0, 9.0),
        height=(0.0, 1.5),
    )
    user = EnvConfig(teams=(0,) * 6 + (1,) * 4, maps=(boxed,), obs_type="vector")
    return {
        "crowded": crowded,
        "crowded_3_rounds": crowded.replace(reset_max_rounds=3),
        "boxes": user,
        "first_draw": user.replace(reset_max_rounds=0),
    }


def run_cases(strict: bool) -> dict[str, dict]:
    """{case: {"mismatches": [leaf paths], ...what the case is meant to contain}}."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from gigastep import env as genv
    from gigastep.game.arena import map_arrays
    from gigastep.game.batching import autoreset_capacity
    from gigastep.game.reset import placement_conflicts, reset_state_streamed
    from gigastep.game.xla import _force_form
    from gigastep.scenarios import make_config

    results: dict[str, dict] = {}

    def both(fn, *args):
        """fn(*args) with the GPU form and with the CPU form (fn is jitted inside)."""
        out = {}
        for form in ("gpu", "cpu"):
            with _force_form(form):
                out[form] = jax.device_get(jax.jit(fn)(*args))
        return out["gpu"], out["cpu"]

    # --- resets ------------------------------------------------------------------------------
    configs = _configs()
    keys = jax.random.split(jax.random.key(3), RESET_KEYS)
    for name, config in configs.items():
        got, want = both(jax.vmap(partial(reset_state_streamed, config)), keys)
        first = jax.jit(
            jax.vmap(partial(reset_state_streamed, config.replace(reset_max_rounds=0)))
        )(keys)
        agents = want[0].agents
        maps = map_arrays(config)
        idx = want[0].episode.map_idx
        boxes, valid = jnp.asarray(maps.boxes)[idx], jnp.asarray(maps.box_valid)[idx]
        conflicts = jax.vmap(partial(placement_conflicts, config), in_axes=(0, 0, 0, None))(
            agents, boxes, valid, 0.1
        )
        results[f"reset/{name}"] = {
            "mismatches": leaf_mismatches(got, want, strict),
            "redrawn": int(np.sum(np.any(first[0].agents.x != agents.x, axis=1))),
            "in_conflict": int(np.sum(np.any(np.asarray(conflicts), axis=1))),
        }
        if name in ("crowded", "boxes"):  # the public batched reset (observations too)
            got, want = both(partial(genv.batched_reset, config), keys)
            results[f"v_reset/{name}"] = {"mismatches": leaf_mismatches(got, want, strict)}

    # --- auto-resetting steps ----------------------------------------------------------------
    cap = autoreset_capacity(BATCH)
    finishing_sets = [[], [7], list(range(0, 3 * (cap + 1), 3)), list(range(BATCH))]

    def play(step, config, seed):
        """Four steps from a fresh batch, with each form; step t truncates the games
        finishing_sets[t] first. Returns (GPU form's outputs, CPU form's outputs)."""
        k_reset, k_act, k_step = jax.random.split(jax.random.key(seed), 3)
        _, start = jax.jit(partial(genv.batched_reset, config))(jax.random.split(k_reset, BATCH))
        n, t_max = config.n_agents, len(finishing_sets)
        if config.discrete_actions:
            actions = jax.random.randint(k_act, (t_max, BATCH, n), 0, 27)
        else:
            actions = jax.random.uniform(k_act, (t_max, BATCH, n, 3), minval=-1.0, maxval=1.0)
        step_keys = jax.random.split(k_step, (t_max, BATCH))
        outs = {}
        for form in ("gpu", "cpu"):
            with _force_form(form):
                jitted, states, outs[form] = jax.jit(step), start, []
                for t, games in enumerate(finishing_sets):
                    mask = np.zeros(BATCH, bool)
                    mask[games] = True
                    ep = states.episode
                    step_t = jnp.where(mask, config.max_episode_length - 1, ep.step)
                    states = states.replace(episode=ep.replace(step=step_t))
                    out = jitted(states, actions[t], step_keys[t])
                    outs[form].append(jax.device_get(out))
                    states = out[1]
        return outs["gpu"], outs["cpu"]

    rgb = make_config("hide_and_seek_5_vs_5_fobs_rgb_maps_cont")
    cases = {
        "crowded": (configs["crowded"], True),
        "rgb_maps_cont": (rgb, True),
        "crowded_no_final_obs": (configs["crowded"], False),
    }
    for name, (config, final_obs) in cases.items():
        step = partial(genv.batched_step_autoreset, config, final_obs=final_obs)
        got, want = play(step, config, seed=5)
        results[f"autoreset/{name}"] = {
            "mismatches": leaf_mismatches(got, want, strict),
            "done": [int(np.sum(o[4])) for o in want],
        }
    # the vmapped form (TorchVecEnv's step on a GPU device)
    config = configs["crowded"]
    step = jax.vmap(partial(genv.step_autoreset, config, final_obs=True))
    got, want = play(step, config, seed=6)
    results["vmapped_autoreset/crowded"] = {
        "mismatches": leaf_mismatches(got, want, strict),
        "done": [int(np.sum(o[4])) for o in want],
    }
    return results


def run_ppo(strict: bool) -> dict[str, dict]:
    """Two JAX PPO updates (frozen pool seats among the opponents, games truncated inside the
    rollout) with each form: {"mismatches": [leaf paths], "truncated": games}."""

    import jax
    import jax.numpy as jnp
    import numpy as np

    import gigastep
    from baselines.config import PPOConfig
    from baselines.jax_ppo.trainer import make_setup
    from baselines.jax_ppo.update import initial_state, make_update
    from gigastep.game.xla import _force_form

    config = PPOConfig(**TINY_JAX_PPO)
    setup = make_setup(config)
    assert setup.uses_pool
    length = gigastep.make(config.scenario).config.max_episode_length
    start = initial_state(setup, 0)
    states = start.env.states
    ep = states.episode
    step = jnp.where(jnp.arange(ep.step.shape[0]) % 2 == 0, length - 2, ep.step)
    start = start._replace(
        env=start.env._replace(states=states.replace(episode=ep.replace(step=step)))
    )
    out = {}
    for form in ("gpu", "cpu"):
        with _force_form(form):
            update = jax.jit(make_update(setup))
            state, results = start, []
            for _ in range(2):
                state, stats = update(state, np.float32(1e-3))
                results.append(jax.device_get((state, stats)))
            out[form] = results
    return {
        "mismatches": leaf_mismatches(out["gpu"], out["cpu"], strict),
        "truncated": int(np.sum(np.asarray(step) == length - 2)),
    }


if __name__ == "__main__":
    run = run_ppo if sys.argv[2:] == ["ppo"] else run_cases
    print(json.dumps(run(strict=sys.argv[1] == "strict")))


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results():
    return run_script(__file__, timeout=1200)


RESETS = ["crowded", "crowded_3_rounds", "boxes", "first_draw"]


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("name", RESETS)
def test_reset_gpu_form_equals_cpu_form(results, name):
    for kind in ("reset", "v_reset") if name in ("crowded", "boxes") else ("reset",):
        r = results[f"{kind}/{name}"]
        assert not r["mismatches"], f"{kind}/{name}: the GPU form differs in {r['mismatches']}"


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_reset_cases_redraw_and_exhaust_their_rounds(results):
    """The cases are what they are meant to be: the crowded start and the boxes redraw
    agents, the crowded start with 3 rounds leaves games in conflict (exhausted rounds, where
    the GPU form must stop where the CPU form stops), the default rounds leave none, and the
    first draw is kept with 0 rounds."""
    assert results["reset/crowded"]["redrawn"] > RESET_KEYS // 2
    assert results["reset/crowded"]["in_conflict"] == 0
    assert results["reset/boxes"]["redrawn"] > 0
    assert results["reset/boxes"]["in_conflict"] == 0
    assert results["reset/crowded_3_rounds"]["in_conflict"] > 0
    assert results["reset/first_draw"]["redrawn"] == 0
    assert results["reset/first_draw"]["in_conflict"] > 0


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize(
    "name",
    ["crowded", "rgb_maps_cont", "crowded_no_final_obs", "vmapped"],
)
def test_autoreset_gpu_form_equals_cpu_form(results, name):
    key = "vmapped_autoreset/crowded" if name == "vmapped" else f"autoreset/{name}"
    r = results[key]
    # (about) none, one, more than the capacity (2) and all of the 40 games finish
    assert r["done"][1] >= 1 and r["done"][2] > 2 and r["done"][3] == 40
    assert not r["mismatches"], f"{key}: the GPU form differs in {r['mismatches']}"


@pytest.mark.slow
def test_force_form_switches_the_placement_and_the_finished_games_forms():
    """What the comparisons above rely on: `_force_form` gives the counted placement loop (a
    scan) and no conditional with "gpu", the `while` loop and the conditional with "cpu"."""
    import jax
    import numpy as np

    from gigastep import env as genv
    from gigastep.game.reset import reset_state_streamed
    from gigastep.game.xla import _force_form

    config = _configs()["boxes"]
    keys = jax.random.split(jax.random.key(0), 4)

    _, states = genv.batched_reset(config, keys)
    actions = np.zeros((4, config.n_agents, 3), np.float32)

    def data_conds(closed):
        """The top-level conditionals whose index is not the platform's."""
        producer = {id(v): e.primitive.name for e in closed.jaxpr.eqns for v in e.outvars}
        return [
            e
            for e in closed.jaxpr.eqns
            if e.primitive.name == "cond" and producer.get(id(e.invars[0])) != "platform_index"
        ]

    found = {}
    for form in ("gpu", "cpu"):
        with _force_form(form):
            reset = jax.make_jaxpr(jax.vmap(partial(reset_state_streamed, config)))(keys)
            step = jax.make_jaxpr(partial(genv.batched_step_autoreset, config))(
                states, actions, keys
            )
        found[form] = (str(reset), str(step), len(data_conds(step)))
    assert "scan" in found["gpu"][0] and "while" not in found["gpu"][0]
    assert "while" in found["cpu"][0] and "scan" not in found["cpu"][0]
    assert "while" not in found["gpu"][1] and "while" in found["cpu"][1]
    # the CPU form's conditionals on the count of finished games (reset, final obs)
    assert (found["gpu"][2], found["cpu"][2]) == (0, 2)


def test_force_form_rejects_an_unknown_form():
    from gigastep.game.xla import _force_form

    with pytest.raises(ValueError, match="'cpu' or 'gpu'"), _force_form("tpu"):
        pass


@pytest.mark.slow
@pytest.mark.subprocess
def test_jax_ppo_update_gpu_form_equals_cpu_form():
    """The PPO update's selects (final values of truncated games, every frozen seat run)
    give the CPU form's branches' values: two updates, every state leaf and statistic."""
    r = run_script(__file__, "ppo", timeout=1200)
    assert r["truncated"] > 0
    assert not r["mismatches"], f"the GPU form differs in {r['mismatches']}"
