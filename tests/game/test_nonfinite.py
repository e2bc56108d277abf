"""Non-finite states: refused where states are built by hand, defined where they arise anyway.

`EnvState.create`, `TorchVecEnv.reset_to` and `load_state` / `save_state` refuse NaN or
infinite positions, speeds and headings, naming the field, the game and the agent. A state
that is non-finite all the same (built with `dataclasses.replace`, say) is observed as
defined in `gigastep.game.observations.vector`: such an agent is seen by nobody and observes all
zeros, and a seen agent at a NaN or infinite distance keeps its row (before any unseen agent).
The expected observations below are written out by hand from rules §5.2; both the JAX path
(which GPUs run) and the native kernel are held to them.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.game import _native
from gigastep.game.observations.vector import jax_vector_observations, native_vector_observations
from gigastep.types import EnvConfig, EnvState
from gigastep.viz.replay import load_state, save_state

F32 = np.float32
PATHS = ["jax", "native"]


def _observe(path, config, state, dist, detected, comm=0.0):
    if path == "native":
        if not _native.enabled():
            pytest.skip("GIGASTEP_NATIVE=0 switches the native kernel off")
        if not _native.load():
            pytest.skip("the native kernel is not available here")
        fn = native_vector_observations
    else:
        fn = jax_vector_observations
    n = config.n_agents
    boxes = jnp.zeros((max(config.max_boxes, 1), 4), jnp.float32)
    comm = jnp.full((n, n), comm, jnp.float32)
    return np.asarray(
        fn(
            config,
            state.agents,
            state.episode,
            jnp.asarray(dist, jnp.float32),
            jnp.asarray(detected),
            comm,
            boxes,
        )
    )


def _dist(x, y):
    x, y = np.asarray(x, F32), np.asarray(y, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        dx, dy = x[:, None] - x[None, :], y[:, None] - y[None, :]
        return np.sqrt(dx * dx + dy * dy).astype(F32)


def _row(config, e, i, x, y, h, v):
    """§5.2 by hand: the 9 features of agent i in ego e's observation (z = 0, full health)."""
    lx, ly = F32(config.limit_x), F32(config.limit_y)
    diag = F32(math.sqrt(config.limit_x**2 + config.limit_y**2))
    same = 1.0 if config.teams[i] == config.teams[e] else 0.0
    health, sprite = config.max_health[i], config.sprites[i]
    if i == e:
        return np.array([1, 1, x[e] / lx, y[e] / ly, 0, h[e], v[e] / diag, health, sprite], F32)
    return np.array(
        [
            1,
            same,
            (F32(x[i]) - F32(x[e])) / lx,
            (F32(y[i]) - F32(y[e])) / ly,
            0,
            h[i] - h[e],
            (F32(v[i]) - F32(v[e])) / diag,
            health,
            sprite,
        ],
        F32,
    )


# ------------------------------------------------------------------------------------------
# Refused where states are built by hand
# ------------------------------------------------------------------------------------------

SMALL = EnvConfig(teams=(0, 0, 1), obs_type="vector", stochastic_comm=False)


@pytest.mark.parametrize(
    "field,value",
    [("x", np.nan), ("y", np.inf), ("z", -np.inf), ("v", np.nan), ("heading", np.inf)],
)
def test_env_state_create_refuses_non_finite_kinematics(field, value):
    values = {"x": [1.0, 2.0, 3.0], "y": [1.0, 1.0, 1.0]}
    values[field] = [0.5, 0.5, value]
    with pytest.raises(
        ValueError,
        match=rf"EnvState.create: {field} of agent 2 is {value}; .*"
        "must be finite",
    ):
        EnvState.create(SMALL, **values)


def _batched_states(config, games=3):
    one = EnvState.create(config, x=[1.0, 2.0, 3.0], y=[1.0, 1.0, 1.0], heading=0.3)
    return one.replace(
        agents=one.agents.replace(
            **{
                name: jnp.stack([getattr(one.agents, name)] * games)
                for name in ("x", "y", "z", "v", "heading", "health", "alive", "tracked")
            }
        ),
        episode=one.episode.replace(
            **{
                name: jnp.stack([getattr(one.episode, name)] * games)
                for name in (
                    "map_idx",
                    "waypoint",
                    "waypoint_time",
                    "aux_rewards_factor",
                    "step",
                    "returns",
                )
            }
        ),
    )


def _spoil(states, field, game, agent, value):
    column = np.array(getattr(states.agents, field))
    column[game, agent] = value
    return states.replace(agents=states.agents.replace(**{field: jnp.asarray(column)}))


def test_save_state_and_load_state_refuse_non_finite_states(tmp_path):
    states = _batched_states(SMALL)
    save_state(states, tmp_path / "good.npz")
    assert np.array_equal(load_state(tmp_path / "good.npz").agents.x, states.agents.x)
    bad = _spoil(states, "heading", 1, 2, np.nan)
    with pytest.raises(ValueError, match=r"save_state: heading of game 1, agent 2 is nan"):
        save_state(bad, tmp_path / "bad.npz")
    assert not (tmp_path / "bad.npz").exists()
    # A file written by other means (an older version, another tool) is refused on loading.
    with np.load(tmp_path / "good.npz", allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["agents.y"][2, 0] = -np.inf
    np.savez(tmp_path / "edited.npz", **arrays)
    with pytest.raises(
        ValueError,
        match=r"load_state\(.*edited.npz'\): y of game 2, agent 0 "
        r"is -inf",
    ):
        load_state(tmp_path / "edited.npz")


def test_torch_vec_env_reset_to_refuses_non_finite_states():
    pytest.importorskip("torch")
    from gigastep.adapters.torch import TorchVecEnv

    states = _batched_states(SMALL, games=2)
    venv = TorchVecEnv(SMALL, 2)
    bad = _spoil(states, "v", 1, 0, np.inf)
    with pytest.raises(ValueError, match=r"TorchVecEnv.reset_to: v of game 1, agent 0 is inf"):
        venv.reset_to(bad)


# ------------------------------------------------------------------------------------------
# Defined where they arise anyway (both paths)
# ------------------------------------------------------------------------------------------


def _three_agents(config, path, field=None, value=None):
    """Agents 0 and 1 are teammates, 2 their enemy; 2 detects 1 and 1 detects 2, nobody else
    detects anything; every alive teammate shares (communication noise 1). `field` of agent
    1 is set to `value`."""
    x, y, h, v = [1.0, 2.0, 3.0], [1.0, 1.0, 1.5], [0.5, 0.25, 1.0], [1.0, 1.2, 1.5]
    state = EnvState.create(config, x=x, y=y, heading=h, v=v)
    if field is not None:
        column = np.array(getattr(state.agents, field))
        column[1] = value
        state = state.replace(agents=state.agents.replace(**{field: jnp.asarray(column)}))
    detected = np.zeros((3, 3), bool)
    detected[1, 2] = detected[2, 1] = True
    obs = _observe(path, config, state, _dist(state.agents.x, state.agents.y), detected, comm=1.0)
    return obs, (x, y, h, v)


COMM_MODES = {"deterministic": SMALL, "stochastic": SMALL.replace(stochastic_comm=True)}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mode", list(COMM_MODES))
def test_three_agents_see_each_other_when_finite(path, mode):
    """The control of the next test: 0 sees its teammate 1 and, through 1's detection, 2 (at
    distances 1 and 2.06); 1 sees 0 and 2; 2 sees 1, which it detects."""
    obs, (x, y, h, v) = _three_agents(COMM_MODES[mode], path)
    want = np.zeros((3, 27), F32)
    for e, order in ((0, (0, 1, 2)), (1, (1, 0, 2)), (2, (2, 1))):
        for r, i in enumerate(order):
            want[e, 9 * r : 9 * r + 9] = _row(SMALL, e, i, x, y, h, v)
    np.testing.assert_allclose(obs, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mode", list(COMM_MODES))
@pytest.mark.parametrize(
    "field,value",
    [("x", np.nan), ("y", -np.inf), ("z", np.nan), ("heading", np.nan), ("v", np.inf)],
)
def test_a_non_finite_agent_is_seen_by_nobody_shares_nothing_and_observes_zeros(
    path, mode, field, value
):
    """Agent 1 of the control above made non-finite: 0 no longer sees it (an alive teammate)
    nor, through its detection, 2; 2 no longer sees it (though 2 detects it); 1 observes
    nothing."""
    obs, (x, y, h, v) = _three_agents(COMM_MODES[mode], path, field, value)
    want = np.zeros((3, 27), F32)
    want[0, :9], want[2, :9] = _row(SMALL, 0, 0, x, y, h, v), _row(SMALL, 2, 2, x, y, h, v)
    np.testing.assert_allclose(obs, want, rtol=1e-6, atol=0)


FOUR = EnvConfig(teams=(0, 1, 1, 1), obs_type="vector", stochastic_comm=False)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("far", ["overflowing distance", "NaN distance"])
def test_a_seen_agent_at_a_non_finite_distance_keeps_its_row(path, far):
    """Issue 16: an unseen agent filled a visible row when a seen agent's distance was NaN
    (every comparison false) or +inf (tied with the unseen agents' key). Ego 0 sees enemies 3
    (at distance 2) and 2 (at 3e38, so the distance overflows to +inf; or, given directly, a
    NaN distance), not enemy 1 (at distance 1): rows ego, 3, 2, then a zero row."""
    x, y = [0.0, 1.0, 3e38, 2.0], [0.0, 0.0, 0.0, 0.0]
    h, v = [0.5, 0.0, 1.0, 0.75], [1.0, 1.0, 1.5, 2.0]
    state = EnvState.create(FOUR, x=x, y=y, heading=h, v=v)
    dist = _dist(x, y)
    assert np.isinf(dist[0, 2]) and dist[0, 1] == 1
    if far == "NaN distance":
        dist[0, 2] = dist[2, 0] = np.nan
    detected = np.zeros((4, 4), bool)
    detected[2, 0] = detected[3, 0] = True  # 0 detects 2 and 3, not 1
    obs = _observe(path, FOUR, state, dist, detected)
    want = np.concatenate(
        [
            _row(FOUR, 0, 0, x, y, h, v),
            _row(FOUR, 0, 3, x, y, h, v),
            _row(FOUR, 0, 2, x, y, h, v),
            np.zeros(9, F32),
        ]
    )
    np.testing.assert_allclose(obs[0], want, rtol=1e-6, atol=0)
