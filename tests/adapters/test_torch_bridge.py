"""The JAX <-> PyTorch bridge (gigastep.adapters.torch): zero-copy conversion and TorchVecEnv.

Device-aware: every test runs on the `torch_device` fixture's device ($GIGASTEP_TEST_DEVICE,
cpu by default; `.ci/gpu` runs them on cuda), the same tests on the CPU and on a GPU.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings
import weakref
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import gigastep.adapters.dlpack as bridge
import gigastep.adapters.torch as gt
from gigastep.adapters.torch import TorchVecEnv, jax_to_torch, torch_to_jax
from gigastep.env import GigastepEnv
from gigastep.scenarios import make_config
from gigastep.types import EnvConfig, EnvState

DTYPES = [
    (jnp.float32, torch.float32),
    (jnp.int32, torch.int32),
    (jnp.uint8, torch.uint8),
    (jnp.bool_, torch.bool),
]


def _jax_array(dtype, shape=(3, 5), device=None):
    values = jnp.arange(int(np.prod(shape))).reshape(shape) % 7
    values = values.astype(dtype)
    return values if device is None else jax.device_put(values, gt._jax_device(device))


# ------------------------------------------------------------------------------------------
# Zero-copy conversion
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("jdtype", "tdtype"), DTYPES)
def test_jax_to_torch_shares_memory_and_values(jdtype, tdtype, torch_device):
    x = _jax_array(jdtype, device=torch_device)
    t = jax_to_torch(x)
    assert t.dtype == tdtype and tuple(t.shape) == x.shape
    assert t.device.type == torch_device.type
    assert t.data_ptr() == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(t.cpu().numpy(), np.asarray(x))


@pytest.mark.parametrize(("jdtype", "tdtype"), DTYPES)
def test_torch_to_jax_shares_memory_and_values(jdtype, tdtype, torch_device):
    t = (torch.arange(15, device=torch_device).reshape(3, 5) % 7).to(tdtype)
    x = torch_to_jax(t)
    assert x.dtype == jdtype and x.shape == (3, 5)
    assert x.devices() == {gt._jax_device(torch_device)}
    assert x.unsafe_buffer_pointer() == t.data_ptr()
    np.testing.assert_array_equal(np.asarray(x), t.cpu().numpy())


def test_pytrees_convert_leaf_by_leaf_without_copies(torch_device):
    config = EnvConfig(teams=(0, 1), obs_type="vector")
    state = EnvState.create(config, x=[1.0, 2.0], y=[3.0, 4.0])
    state = jax.device_put(state, gt._jax_device(torch_device))
    pair = (
        _jax_array(jnp.float32, device=torch_device),
        _jax_array(jnp.bool_, device=torch_device),
    )
    tree = {"pair": pair, "state": state}
    out = jax_to_torch(tree)
    assert isinstance(out["state"], EnvState)
    assert out["state"].agents.x.data_ptr() == state.agents.x.unsafe_buffer_pointer()
    assert out["pair"][1].dtype == torch.bool
    back = torch_to_jax(out)
    assert isinstance(back["state"], EnvState)
    assert back["state"].agents.x.unsafe_buffer_pointer() == state.agents.x.unsafe_buffer_pointer()
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(tree), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_non_contiguous_tensor_converts_with_the_right_values(torch_device):
    t = torch.arange(12, dtype=torch.float32, device=torch_device).reshape(3, 4).T  # a view
    np.testing.assert_array_equal(np.asarray(torch_to_jax(t)), t.cpu().numpy())


def test_copy_predicate_flags_misaligned_and_non_contiguous_tensors():
    """`_needs_copy` on CPU tensors (the predicate is the same for CUDA ones): XLA's GPU
    executables take parameters at multiples of 16 bytes only."""
    base = torch.arange(64, dtype=torch.float32)
    assert base.data_ptr() % bridge.XLA_PARAMETER_ALIGNMENT == 0  # torch aligns its allocations
    assert not bridge._needs_copy(base)
    assert bridge._needs_copy(base[1:])  # 4 bytes in
    assert bridge._needs_copy(base[2:])  # 8 bytes in
    assert not bridge._needs_copy(base[4:])  # 16 bytes in: aligned
    assert bridge._needs_copy(base.reshape(8, 8).T)  # aligned, not contiguous
    assert bridge._needs_copy(base[::2])
    assert not bridge._needs_copy(base.reshape(8, 8)[2:])  # 64 bytes in
    as_bytes = torch.arange(64, dtype=torch.uint8)
    assert bridge._needs_copy(as_bytes[15:]) and not bridge._needs_copy(as_bytes[16:])
    assert not bridge._needs_copy(base[1:1])  # empty: nothing to align


def test_a_misaligned_view_is_copied_with_the_right_values(torch_device):
    t = torch.arange(33, dtype=torch.float32, device=torch_device)[1:]
    assert t.data_ptr() % bridge.XLA_PARAMETER_ALIGNMENT != 0
    x = torch_to_jax(t)
    assert x.unsafe_buffer_pointer() != t.data_ptr()  # a copy, not a view
    assert x.unsafe_buffer_pointer() % bridge.XLA_PARAMETER_ALIGNMENT == 0
    doubled = jax.jit(lambda a: a * 2)(x)  # a compiled program takes it as a parameter
    np.testing.assert_array_equal(np.asarray(doubled), 2 * np.arange(1, 33, dtype=np.float32))


def test_non_array_leaves_are_rejected_with_their_type():
    with pytest.raises(TypeError, match="str"):
        jax_to_torch({"a": "text"})
    with pytest.raises(TypeError, match="list|int"):
        torch_to_jax([1, 2])


# ------------------------------------------------------------------------------------------
# GPU memory setting at import
# ------------------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_import_turns_jax_preallocation_off_when_nothing_is_set():
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in bridge._MEMORY_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    code = (
        "import os, gigastep.adapters.torch as g; "
        "print(g.JAX_MEMORY_SETTING, os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["set", "false"]


def test_a_users_memory_setting_is_left_alone(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
    assert bridge._configure_jax_gpu_memory() == "user"
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ


def test_a_late_import_changes_nothing_and_warns_only_where_jax_runs_on_a_gpu(monkeypatch):
    for name in bridge._MEMORY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    on_gpu = any(d.platform == "gpu" for d in jax.devices())  # a backend is running
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert bridge._configure_jax_gpu_memory() == "late"
    late = [w for w in caught if "imported after JAX started on the GPU" in str(w.message)]
    assert len(late) == (1 if on_gpu else 0), [str(w.message) for w in caught]
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ


# ------------------------------------------------------------------------------------------
# TorchVecEnv
# ------------------------------------------------------------------------------------------

# A 2-vs-1 duel without randomness: agent 0 (team 0) and agent 2 (team 1) fly head-on and
# collide at step 3; agent 1 (team 0) flies on far away and survives. Rewards: idle reward 1
# per agent and step (alive at the start of the step), 10 to each survivor of the winning
# team, nothing else; no division by team size; no damage.
COLLISION = EnvConfig(
    teams=(0, 0, 1),
    obs_type="vector",
    map_set="empty",
    stochastic_obs=False,
    stochastic_comm=False,
    idle_reward=(1.0, 1.0, 1.0),
    reward_game_won=10.0,
    reward_defeat_one_opponent=0.0,
    divide_reward_by_team_size=False,
    damage_per_second=0.0,
)


def _collision_states(batch: int) -> EnvState:
    # Head-on at distance 0.95 with no-op actions: each agent moves dt * v2 per step, v2 =
    # v - dt drag v^2 (v = 1 at start, then the 1.3 speed floor): 0.096, then 0.12324.
    # Distances after steps 1, 2, 3: 0.758, 0.5115, 0.2650; collision radius 0.4 -> step 3.
    one = EnvState.create(
        COLLISION, x=[5.0, 2.0, 5.95], y=[5.0, 8.0, 5.0], heading=[0.0, 0.0, np.pi]
    )
    return jax.tree_util.tree_map(lambda x: jnp.stack([x] * batch), one)


@pytest.fixture(scope="module")
def duel(torch_device):
    """Three steps of the duel in a TorchVecEnv of 2 games, and the reference rollout."""
    venv = TorchVecEnv.from_states(COLLISION, _collision_states(2), seed=0, device=torch_device)
    noop = torch.zeros(2, 3, 3, device=torch_device)
    steps = [venv.step(noop) for _ in range(3)]
    fresh_state = jax.tree_util.tree_map(np.asarray, venv.states)
    after = venv.step(noop)
    # Reference: the plain env step from the same state (no randomness in this config).
    env = GigastepEnv(COLLISION)
    step = jax.jit(env.step)
    state = jax.tree_util.tree_map(lambda x: x[0], _collision_states(1))
    ref = []
    for t in range(3):
        obs, state, rewards, dones, done = step(state, jnp.zeros((3, 3)), jax.random.PRNGKey(t))
        ref.append((np.asarray(obs), np.asarray(rewards), np.asarray(dones), bool(done)))
    return dict(steps=steps, fresh=fresh_state, after=after, ref=ref)


def test_duel_ends_at_the_collision_step_and_not_before(duel):
    ep_dones = [s[3].tolist() for s in duel["steps"]]
    assert ep_dones == [[False, False], [False, False], [True, True]]
    info = duel["steps"][2][4]
    assert info["terminated"].tolist() == [True, True]
    assert info["truncated"].tolist() == [False, False]
    assert duel["steps"][2][2].tolist() == [[True, False, True]] * 2


def test_finished_game_is_reset_in_the_same_step(duel):
    fresh = duel["fresh"]
    assert fresh.agents.alive.all()
    assert (fresh.episode.step == 0).all() and (fresh.episode.returns == 0).all()
    # Reset placement: each team inside its start region of the drawn map ("empty" or
    # "empty_flipped", whose regions are x in [1, 4] and [6, 9]).
    for b in range(2):
        spec = COLLISION.maps[int(fresh.episode.map_idx[b])]
        for agent, region in ((0, spec.start_team0), (1, spec.start_team0), (2, spec.start_team1)):
            assert region[0] <= fresh.agents.x[b, agent] <= region[2]
            assert region[1] <= fresh.agents.y[b, agent] <= region[3]
    obs = duel["steps"][2][0].cpu().numpy()
    assert (np.abs(obs).sum(axis=-1) > 0).all()  # every agent of the new game is alive


def test_final_obs_is_the_terminal_observation(duel):
    final = duel["steps"][2][4]["final_obs"].cpu().numpy()
    ref_obs = duel["ref"][2][0]
    for b in range(2):
        np.testing.assert_allclose(final[b], ref_obs, atol=1e-6)
    assert not np.allclose(final[0], duel["steps"][2][0].cpu().numpy()[0])
    # The dead agents' final observations are zeros, the survivor's is not.
    assert (final[:, [0, 2]] == 0).all() and (np.abs(final[:, 1]).sum(-1) > 0).all()


def test_rewards_and_observations_before_the_end_match_the_plain_step(duel):
    for t in range(2):
        obs, rewards = duel["steps"][t][0].cpu().numpy(), duel["steps"][t][1].cpu().numpy()
        np.testing.assert_allclose(obs[0], duel["ref"][t][0], atol=1e-6)
        np.testing.assert_allclose(rewards[1], duel["ref"][t][1], atol=1e-6)


def test_episode_statistics_of_the_duel(duel):
    # Idle reward 1 in each of the 3 steps for every agent (all alive at the start of each);
    # the survivor of team 0 also gets game won 10 at step 3. Length 3.
    rewards = duel["steps"][2][1].cpu().numpy()
    np.testing.assert_allclose(rewards, [[1.0, 11.0, 1.0]] * 2)
    info = duel["steps"][2][4]
    np.testing.assert_allclose(info["episode_return"].cpu().numpy(), [[3.0, 13.0, 3.0]] * 2)
    assert info["episode_length"].tolist() == [3, 3]
    # The next step belongs to the new game: running length 1.
    assert duel["after"][4]["episode_length"].tolist() == [1, 1]


def test_outputs_are_torch_tensors_of_the_documented_shapes(duel, torch_device):
    obs, rewards, dones, ep_dones, info = duel["steps"][0]
    assert {t.device.type for t in (obs, rewards, dones, ep_dones)} == {torch_device.type}
    length = COLLISION.vector_size
    assert obs.shape == (2, 3, length) and obs.dtype == torch.float32
    assert rewards.shape == (2, 3) and rewards.dtype == torch.float32
    assert dones.shape == (2, 3) and dones.dtype == torch.bool
    assert ep_dones.shape == (2,) and ep_dones.dtype == torch.bool
    assert set(info) == {
        "terminated",
        "truncated",
        "final_obs",
        "episode_return",
        "episode_length",
        "winner",
    }
    assert all(isinstance(v, torch.Tensor) for v in info.values())
    assert info["winner"].shape == (2,) and info["winner"].dtype == torch.int32


@pytest.fixture(scope="module")
def versus_venv(torch_device):
    return TorchVecEnv(
        "identical_2_vs_2_fobs_vec_void_disc", 4, seed=1, opponent="pursuit", device=torch_device
    )


@pytest.mark.slow
def test_with_an_opponent_the_learner_sees_only_its_team(versus_venv):
    obs = versus_venv.reset()
    length = versus_venv.config.vector_size
    assert obs.shape == (4, 2, length)
    obs, rewards, dones, ep_dones, info = versus_venv.step(
        torch.randint(0, 27, (4, 2), device=versus_venv.device)
    )
    assert obs.shape == (4, 2, length) and rewards.shape == (4, 2) and dones.shape == (4, 2)
    assert info["episode_return"].shape == (4, 2) and info["final_obs"].shape == (4, 2, length)


def test_same_seed_replays_the_same_rollout(versus_venv):
    actions = torch.randint(0, 27, (4, 2), generator=torch.Generator().manual_seed(0))
    actions = actions.to(versus_venv.device)
    runs = []
    for _ in range(2):
        first = versus_venv.reset(seed=5).clone()
        out = [versus_venv.step(actions)[0].clone() for _ in range(3)]
        runs.append([first, *out])
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)
    other = versus_venv.reset(seed=6)
    assert not torch.equal(other, runs[0][0])


def test_wrong_action_shape_dtype_or_type_is_a_clear_error(versus_venv):
    versus_venv.reset()
    with pytest.raises(ValueError, match=r"\(4, 2\)"):
        versus_venv.step(torch.zeros(4, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="integer"):
        versus_venv.step(torch.zeros(4, 2))
    with pytest.raises(TypeError, match="torch.Tensor"):
        versus_venv.step(np.zeros((4, 2), np.int32))


def test_the_actions_stay_alive_until_the_next_step_is_queued(torch_device):
    """XLA reads the actions asynchronously through a view of the caller's memory: the env
    holds them until the next step has been queued, even where the caller drops them."""
    venv = TorchVecEnv.from_states(COLLISION, _collision_states(2), device=torch_device)
    actions = torch.zeros(2, 3, 3, device=torch_device)
    held = weakref.ref(actions)
    venv.step(actions)
    del actions
    gc.collect()
    assert held() is not None
    venv.step(torch.zeros(2, 3, 3, device=torch_device))
    gc.collect()
    assert held() is None  # released once the next step is queued: no leak either


def test_step_before_reset_is_an_error():
    venv = TorchVecEnv(COLLISION, 2)
    with pytest.raises(RuntimeError, match="reset"):
        venv.step(torch.zeros(2, 3, 3))


@pytest.mark.slow
def test_states_are_the_batched_env_state_and_advance_with_each_step(torch_device):
    venv = TorchVecEnv("identical_2_vs_2_fobs_vec_void_disc", 3, seed=2, device=torch_device)
    venv.reset()
    before = venv.states
    assert isinstance(before, EnvState) and before.agents.x.shape == (3, 4)
    steps = np.asarray(before.episode.step).copy()
    _, _, _, ep_dones, _ = venv.step(
        torch.full((3, 4), 13, dtype=torch.int32, device=torch_device)
    )  # no-op actions
    after = venv.states
    assert isinstance(after, EnvState)
    ended = ep_dones.cpu().numpy()
    np.testing.assert_array_equal(np.asarray(after.episode.step)[~ended], steps[~ended] + 1)


# ------------------------------------------------------------------------------------------
# The last step of an episode (rules §4.9, §7.1): final observation, flags and info.
# COLLISION's time limit is the default 500 steps; game 0 starts at step 499 (this step is its
# last), game 1 at step 10. Agents at (2, 2), (2, 8) (team 0) and (8, 5) (team 1), heading 0:
# one no-op step moves each by 0.096 along +x (speed 1.3 after it); no enemy is within the
# detection radius 3 (d ~ 6.7) and team 0's agents see each other as teammates (d 6), so the
# terminal observation is, by hand (rules §5.2, diag = sqrt(200)):
# ------------------------------------------------------------------------------------------

_V = 1.3 / np.sqrt(200.0)
TERMINAL_3 = np.array(
    [
        [1, 1, 0.2096, 0.2, 0, 0, _V, 1, 1] + [1, 1, 0, 0.6, 0, 0, 0, 1, 1] + [0] * 9,
        [1, 1, 0.2096, 0.8, 0, 0, _V, 1, 1] + [1, 1, 0, -0.6, 0, 0, 0, 1, 1] + [0] * 9,
        [1, 1, 0.8096, 0.5, 0, 0, _V, 1, 1] + [0] * 18,
    ],
    np.float32,
)


def _far_states(config, steps, returns=None) -> EnvState:
    n = config.n_agents
    games = []
    for step in steps:
        one = EnvState.create(
            config, x=[2.0, 2.0, 8.0, 8.0][:n], y=[2.0, 8.0, 5.0, 8.0][:n], step=step
        )
        games.append(one)
    states = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *games)
    if returns is not None:
        states = states.replace(episode=states.episode.replace(returns=jnp.asarray(returns)))
    return states


def test_last_step_torch_vec_env_reports_the_final_observation_and_episode_info(torch_device):
    """docs/pytorch.md: `info` holds terminated, truncated, final_obs (the last observation of
    games that ended this step, else this step's obs), episode_return and episode_length (the
    finished episode's where ep_dones, else running values) and winner (-1: a draw). Rewards:
    idle reward 1 per agent (no division); returns (5, 6, 7) before the last step."""
    # the duel fixture's game and batch size: the same compiled step
    states = _far_states(COLLISION, [499, 10], returns=[[5.0, 6.0, 7.0], [0.0, 0.0, 0.0]])
    venv = TorchVecEnv.from_states(COLLISION, states, device=torch_device)
    obs, rewards, dones, ep_dones, info = venv.step(torch.zeros(2, 3, 3, device=torch_device))
    assert ep_dones.tolist() == [True, False] and not dones.any()
    assert info["truncated"].tolist() == [True, False]
    assert info["terminated"].tolist() == [False, False]
    assert info["winner"].tolist() == [-1, -1]
    assert info["episode_length"].tolist() == [500, 11]
    np.testing.assert_allclose(rewards.cpu().numpy(), [[1.0] * 3] * 2)
    np.testing.assert_allclose(info["episode_return"].cpu().numpy(), [[6.0, 7.0, 8.0], [1.0] * 3])
    final = info["final_obs"].cpu().numpy()
    np.testing.assert_allclose(final[0], TERMINAL_3, atol=1e-5)
    np.testing.assert_array_equal(final[1], obs.cpu().numpy()[1])  # a game that goes on
    fresh = obs.cpu().numpy()[0]  # the new game: every agent alive at the reset speed 1
    np.testing.assert_array_equal(fresh[:, 0], 1.0)
    np.testing.assert_allclose(fresh[:, 6], 1.0 / np.sqrt(200.0), atol=1e-7)
    assert np.asarray(venv.states.episode.step).tolist() == [0, 11]


def test_last_step_torch_vec_env_with_an_opponent_reports_its_teams_final_observation(
    torch_device,
):
    """docs/pytorch.md with `opponent`: the final observation is the learner team's rows. The
    versus_venv fixture's game (2 vs 2, pursuit plays team 1) and batch size; game 0 ends by
    the time limit. Team 0's ego rows are, by hand, those of agents 0 and 1 above (the
    other rows show the pursuers, moved by their policy)."""
    states = _far_states(make_config("identical_2_vs_2_fobs_vec_void_disc"), [499, 10, 10, 10])
    venv = TorchVecEnv.from_states(
        "identical_2_vs_2_fobs_vec_void_disc",
        states,
        seed=1,
        opponent="pursuit",
        device=torch_device,
    )
    actions = torch.full((4, 2), 13, dtype=torch.int32, device=torch_device)
    obs, rewards, dones, ep_dones, info = venv.step(actions)
    assert ep_dones.tolist() == [True, False, False, False]
    assert info["truncated"].tolist() == [True, False, False, False]
    assert info["final_obs"].shape == obs.shape == (4, 2, venv.config.vector_size)
    np.testing.assert_allclose(
        info["final_obs"].cpu().numpy()[0, :, :9], TERMINAL_3[:2, :9], atol=1e-5
    )
    np.testing.assert_allclose(obs.cpu().numpy()[0, :, 6], 1.0 / np.sqrt(200.0), atol=1e-7)
