"""What the library gives a trainer: the global state vector, scripted teams inside the
compiled step, the finished state, and exact snapshots of a TorchVecEnv."""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from gigastep import opponents
from gigastep.adapters.torch import ScriptedTeam, TorchVecEnv
from gigastep.env import GigastepEnv
from gigastep.game.observations.global_state import state_vector_size
from gigastep.types import EnvConfig, EnvState

# 2 vs 1 on a 10 x 20 world with one waypoint and the boxes of the "center_block" map.
SMALL = EnvConfig(
    teams=(0, 0, 1),
    obs_type="vector",
    limit_x=10.0,
    limit_y=20.0,
    z_max=5.0,
    max_health=(1.0, 2.0, 4.0),
    enable_waypoints=True,
    max_tracking_steps=10,
    max_episode_length=50,
    map_set="center_block",
)


def _small_state():
    return EnvState.create(
        SMALL,
        x=[1.0, 5.0, 9.0],
        y=[2.0, 10.0, 18.0],
        z=[0.0, 2.5, 5.0],
        v=[1.0, 2.0, 3.0],
        heading=[0.0, math.pi / 2, -math.pi / 2],
        health=[1.0, 1.0, 2.0],
        alive=[True, False, True],
        tracked=[[0, 0, 4], [0, 0, 0], [20, 1, 0]],
        waypoint=[2.0, 4.0, 3.0, 5.0],
        waypoint_time=3.0,
        step=10,
    )


def test_state_vector_layout_seen_from_team_0():
    env = GigastepEnv(SMALL)
    v = np.asarray(env.state_vector(_small_state(), team=0))
    assert v.shape == (env.state_vector_size,) == (9 * 3 + 9 + 1 + 5 + 4 * SMALL.max_boxes,)
    diag = math.sqrt(10.0**2 + 20.0**2)
    agents = v[:27].reshape(3, 9)
    # alive, own team, x/lx, y/ly, z/zmax, cos h, sin h, v/diag, health/max_health
    np.testing.assert_allclose(agents[0], [1, 1, 0.1, 0.1, 0.0, 1, 0, 1 / diag, 1.0], atol=1e-6)
    np.testing.assert_allclose(agents[1], [0, 1, 0.5, 0.5, 0.5, 0, 1, 2 / diag, 0.5], atol=1e-6)
    np.testing.assert_allclose(agents[2], [1, 0, 0.9, 0.9, 1.0, 0, -1, 3 / diag, 0.5], atol=1e-6)
    # locks [target, shooter] / max_tracking_steps, clipped to 1
    np.testing.assert_allclose(v[27:36].reshape(3, 3), [[0, 0, 0.4], [0, 0, 0], [1, 0.1, 0]])
    assert v[36] == pytest.approx(10 / 50)
    np.testing.assert_allclose(v[37:42], [0.2, 0.2, 0.3, 0.25, 1.0])
    # boxes are given on the 10 x 10 reference world and scaled to the world: /10 normalised
    np.testing.assert_allclose(
        v[42:].reshape(-1, 4), np.asarray(SMALL.maps[0].boxes) / 10, atol=1e-6
    )


def test_state_vector_seen_from_team_1_puts_its_agents_first():
    env = GigastepEnv(SMALL)
    v0 = np.asarray(env.state_vector(_small_state(), team=0))
    v1 = np.asarray(env.state_vector(_small_state(), team=1))
    a0, a1 = v0[:27].reshape(3, 9), v1[:27].reshape(3, 9)
    np.testing.assert_array_equal(a1[0, 2:], a0[2, 2:])  # agent 2 first
    np.testing.assert_array_equal(a1[1:, 2:], a0[:2, 2:])
    assert a1[:, 1].tolist() == [1, 0, 0]
    # the lock of shooter 0 on target 2 is now [target 0, shooter 1]
    np.testing.assert_allclose(v1[27:36].reshape(3, 3), [[0, 1, 0.1], [0.4, 0, 0], [0, 0, 0]])


def test_state_vector_batched_equals_single_and_rejects_a_bad_team():
    env = GigastepEnv(SMALL)
    one = _small_state()
    batch = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), one)
    np.testing.assert_array_equal(
        np.asarray(env.v_state_vector(batch, 1))[1], np.asarray(env.state_vector(one, 1))
    )
    with pytest.raises(ValueError, match="team must be 0 or 1, got 2"):
        env.state_vector(one, team=2)
    assert state_vector_size(SMALL) == env.state_vector_size


GAME = "identical_2_vs_2_fobs_vec_void_disc"


@pytest.mark.slow
def test_a_scripted_team_plays_exactly_as_the_policy_would():
    """Games 0-2 with team 1 scripted by pursuit inside the step equal a plain batch whose
    team-1 actions are computed from the same states by pursuit (deterministic policy)."""
    scripted = TorchVecEnv(GAME, 4, seed=5, scripted=[ScriptedTeam(0, 3, 1, "pursuit")])
    plain = TorchVecEnv(GAME, 4, seed=5)
    scripted.reset(), plain.reset()
    config = plain.config
    pursue = jax.jit(jax.vmap(lambda s: opponents.pursuit(config, s, None)))
    noop = torch.full((4, 4), 13, dtype=torch.int32)
    for _ in range(6):
        joint = noop.clone()
        chosen = torch.from_numpy(np.array(pursue(plain.states))).to(torch.int32)
        joint[:3, 2:] = chosen[:3, 2:]
        a = scripted.step(noop)
        b = plain.step(joint)
        for x, y in zip(a[:4], b[:4], strict=True):
            assert torch.equal(x, y)


def test_scripted_teams_are_checked():
    with pytest.raises(ValueError, match="reaches past the batch of 4 games"):
        TorchVecEnv(GAME, 4, scripted=[ScriptedTeam(2, 5, 1)])
    with pytest.raises(ValueError, match="overlaps games"):
        TorchVecEnv(GAME, 4, scripted=[ScriptedTeam(0, 3, 1), ScriptedTeam(2, 4, 1)])
    with pytest.raises(ValueError, match="closest"):
        ScriptedTeam(0, 2, 1, "persuit")
    with pytest.raises(ValueError, match="cannot be combined with opponent"):
        TorchVecEnv(GAME, 4, opponent="random", scripted=[ScriptedTeam(0, 2, 1)])


@pytest.mark.slow
def test_state_vectors_of_the_next_and_the_finished_state():
    venv = TorchVecEnv(GAME, 3, seed=2, state_vectors=True)
    venv.reset()
    env = GigastepEnv(venv.config)
    before = venv.state_vector()
    np.testing.assert_array_equal(
        before[:, 1].numpy(), np.asarray(env.v_state_vector(venv.states, 1))
    )
    for _ in range(3):
        *_, info = venv.step(torch.randint(0, 27, (3, 4), dtype=torch.int32))
    np.testing.assert_array_equal(
        info["state_vector"][:, 0].numpy(), np.asarray(env.v_state_vector(venv.states, 0))
    )
    # no game ended: the finished state is the next state
    assert torch.equal(info["state_vector"], info["final_state_vector"])


def test_the_final_state_is_the_state_before_the_reset():
    from gigastep.env import step, step_autoreset

    config = SMALL.replace(max_episode_length=2)
    _, state = GigastepEnv(config).reset(jax.random.key(0))
    actions = jnp.zeros((3, 3))

    @jax.jit
    def run(state, key):
        _, state, *_ = step(config, state, actions, key)
        k_step = jax.random.split(key)[0]  # step_autoreset steps with the first half
        expected = step(config, state, actions, k_step)[1]
        *_, done, info = step_autoreset(config, state, actions, key, final_state=True)
        plain = step_autoreset(config, state, actions, key)[-1]
        return expected, done, info.final_state, plain.final_state

    expected, done, final, plain = run(state, jax.random.key(2))
    assert bool(done) and plain is None
    for a, b in zip(
        jax.tree_util.tree_leaves(final), jax.tree_util.tree_leaves(expected), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_a_restored_snapshot_continues_exactly():
    venv = TorchVecEnv(GAME, 4, seed=1, scripted=[ScriptedTeam(0, 2, 1, "random")])
    venv.reset()
    gen = torch.Generator().manual_seed(0)
    actions = [torch.randint(0, 27, (4, 4), generator=gen, dtype=torch.int32) for _ in range(30)]
    for a in actions[:5]:
        venv.step(a)
    snap = venv.snapshot()
    first = [venv.step(a) for a in actions[5:]]
    venv.restore(snap)
    assert torch.equal(venv.last_obs, snap["last_obs"])
    second = [venv.step(a) for a in actions[5:]]
    for x, y in zip(first, second, strict=True):
        for a, b in zip(x[:4], y[:4], strict=True):
            assert torch.equal(a, b)


def test_a_snapshot_of_another_batch_is_refused():
    venv = TorchVecEnv(GAME, 4)
    venv.reset()
    other = TorchVecEnv(GAME, 3)
    other.reset()
    with pytest.raises(ValueError, match="do not fit this TorchVecEnv"):
        venv.restore(other.snapshot())
    with pytest.raises(ValueError, match="missing"):
        venv.restore({"key": None})


# --- the step's rewards under other weights (`score`) ---------------------------------------

# SMALL with shaping terms that are non-zero from the first step (idle, detection, damage).
SHAPED = SMALL.replace(reward_idle=2.0, reward_detection=0.5, reward_damage=1.0)


def _play(venv: TorchVecEnv, steps: int, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    venv.reset()
    shape = (venv.num_envs, venv.n_agents)
    return [
        venv.step(
            torch.randint(0, 27, shape, generator=g, dtype=torch.int32)
            if venv.config.discrete_actions
            else torch.rand(*shape, 3, generator=g) * 2 - 1
        )
        for _ in range(steps)
    ]


@pytest.mark.parametrize("opponent", [None, "pursuit"])
def test_the_score_is_the_reward_of_the_game_with_the_score_weights(opponent):
    # The game does not depend on its reward weights, so the unshaped game on the same seed
    # and actions takes the same steps: its rewards are the shaped game's score, bit for bit.
    shaped = _play(TorchVecEnv(SHAPED, 4, seed=3, opponent=opponent, score=SMALL), 60)
    plain = _play(TorchVecEnv(SMALL, 4, seed=3, opponent=opponent), 60)
    ended = differ = 0
    for (_, reward, _, done, info), (_, want, _, _, plain_info) in zip(shaped, plain, strict=True):
        assert torch.equal(info["score"], want)
        assert "score" not in plain_info
        ended += int(done.sum())
        differ += int((reward != want).sum())
    assert ended > 0 and differ > 0  # episodes restarted; the shaping changed rewards


def test_the_score_of_the_game_s_own_weights_is_its_reward_in_both_step_forms():
    from gigastep.env import batched_step_autoreset, step_autoreset

    _, states = GigastepEnv(SHAPED).v_reset(jax.random.split(jax.random.key(1), 3))
    actions = jax.random.uniform(jax.random.key(2), (3, 3, 3), minval=-1.0, maxval=1.0)
    keys = jax.random.split(jax.random.key(3), 3)
    out = jax.jit(partial(batched_step_autoreset, SHAPED, score=SHAPED))(states, actions, keys)
    np.testing.assert_array_equal(np.asarray(out[-1].score), np.asarray(out[2]))
    plain = jax.jit(partial(batched_step_autoreset, SMALL))(states, actions, keys)
    one = jax.jit(jax.vmap(partial(step_autoreset, SHAPED, score=SMALL)))(states, actions, keys)
    np.testing.assert_array_equal(np.asarray(one[-1].score), np.asarray(plain[2]))
    assert batched_step_autoreset(SMALL, states, actions, keys)[-1].score is None


def test_a_score_config_that_changes_more_than_the_rewards_is_refused_naming_the_field():
    from gigastep.env import step_autoreset
    from gigastep.game.rewards import WEIGHT_FIELDS

    other = SMALL.replace(max_episode_length=7)
    with pytest.raises(ValueError, match=r"its max_episode_length is 7, the game's 50"):
        TorchVecEnv(SHAPED, 2, score=other)
    _, state = GigastepEnv(SMALL).reset(jax.random.key(0))
    with pytest.raises(ValueError, match="only in its reward weights"):
        step_autoreset(SMALL, state, jnp.zeros((3, 3)), jax.random.key(1), score=other)
    with pytest.raises(ValueError, match="score must be an EnvConfig, got dict"):
        step_autoreset(SMALL, state, jnp.zeros((3, 3)), jax.random.key(1), score={})
    assert "reward_damage" in WEIGHT_FIELDS and "max_episode_length" not in WEIGHT_FIELDS


def test_the_weight_fields_are_every_reward_weight_and_name_every_term():
    import dataclasses

    from gigastep.game import rewards

    _, state = GigastepEnv(SMALL).reset(jax.random.key(0))
    n = SMALL.n_agents
    inputs = rewards.RewardInputs(
        alive_pre=jnp.ones(n, bool),
        alive=jnp.ones(n, bool),
        hit_waypoint=jnp.zeros(n, bool),
        collided=jnp.zeros(n, bool),
        hazard_death=jnp.zeros(n, bool),
        detected=jnp.zeros((n, n), bool),
        damage=jnp.zeros((n, n)),
    )
    terms = set(rewards.reward_terms(SMALL, inputs))
    weights = {f.name for f in dataclasses.fields(EnvConfig) if f.name.startswith("reward_")}
    assert weights == {f"reward_{t}" for t in terms}
    assert set(rewards.WEIGHT_FIELDS) == weights | {"idle_reward", "divide_reward_by_team_size"}
