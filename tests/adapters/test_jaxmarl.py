"""JaxMARL adapter (gigastep.jaxmarl): the MultiAgentEnv contract, JaxMARL's own wrappers, and
a few updates of JaxMARL-style IPPO and MAPPO (centralised critic on the world state).

Skipped without the `jaxmarl` extra (docs/install.md). The IPPO and MAPPO helpers below follow
JaxMARL's `baselines/IPPO/ippo_ff_mpe.py` and `baselines/MAPPO/mappo_rnn_smax.py` (FLAIROx/
JaxMARL, Apache-2.0): the same batchify / unbatchify, info reshape, GAE and clipped losses,
shrunk to a few steps and tiny networks. `SMAXWorldStateWrapper` is copied from
`mappo_rnn_smax.py` unchanged but for formatting, to show that it runs on Gigastep as is.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

pytest.importorskip("jaxmarl")
distrax = pytest.importorskip("distrax")
optax = pytest.importorskip("optax")

import flax.linen as nn  # noqa: E402  (after the skips: flax comes with jaxmarl)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax.training.train_state import TrainState  # noqa: E402
from jaxmarl.environments import spaces  # noqa: E402
from jaxmarl.environments.multi_agent_env import MultiAgentEnv  # noqa: E402
from jaxmarl.wrappers.baselines import (  # noqa: E402
    CTRolloutManager,
    JaxMARLWrapper,
    LogWrapper,
    MPELogWrapper,
    SMAXLogWrapper,
)

import gigastep  # noqa: E402
from gigastep import env as _env  # noqa: E402
from gigastep.jaxmarl import GigastepJaxMARLEnv, agent_names, make  # noqa: E402
from gigastep.versus import VersusEnv  # noqa: E402

SMALL_RGB = dict(resolution_x=16, resolution_y=16)
SCENARIOS = [
    ("identical_5_vs_5_fobs_vec_void_disc", {}),  # symmetric
    ("identical_5_vs_1_fobs_vec_void_disc", {}),  # asymmetric teams
    ("special_5_vs_5_pobs_vec_maps_disc", {}),  # heterogeneous agent types
    ("identical_2_vs_2_fobs_rgb_void_cont", SMALL_RGB),  # RGB, continuous actions
]
IDS = ["5v5-vec", "5v1-vec", "special-5v5-maps", "2v2-rgb-cont"]


def _sample(env, key):
    keys = jax.random.split(key, env.num_agents)
    return {a: env.action_space(a).sample(k) for a, k in zip(env.agents, keys, strict=True)}


def _tree_equal(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


# ------------------------------------------------------------------------------------------
# The MultiAgentEnv contract
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "overrides"), SCENARIOS, ids=IDS)
def test_contract_and_same_numbers_as_gigastep(name, overrides):
    env = make(name, **overrides)
    game = gigastep.make(name, **overrides)
    n = game.n_agents
    assert isinstance(env, MultiAgentEnv)
    assert env.num_agents == n == len(env.agents)
    assert env.agents == agent_names(game.config)
    assert env.agents[0] == "team0_agent0" and env.agents[-1].startswith("team1_agent")
    assert env.agent_classes == {
        f"team{t}": [a for a in env.agents if a.startswith(f"team{t}_")] for t in (0, 1)
    }
    obs_space, act_space = env.observation_space(env.agents[0]), env.action_space(env.agents[0])
    assert all(env.observation_space(a) is obs_space for a in env.agents)  # one shared space
    assert all(env.action_space(a) is act_space for a in env.agents)
    assert isinstance(obs_space, spaces.Box)
    if game.obs_type == "rgb":
        assert obs_space.shape == (16, 16, 3) and obs_space.dtype == jnp.uint8
    else:
        assert obs_space.shape == (game.config.vector_size,)
    if game.discrete_actions:
        assert isinstance(act_space, spaces.Discrete) and act_space.n == 27
    else:
        assert isinstance(act_space, spaces.Box) and act_space.shape == (3,)

    key = jax.random.PRNGKey(3)  # JaxMARL's baselines pass raw uint32 keys
    obs, state = env.reset(key)
    ref_obs, ref_state = game.reset(key)
    assert set(obs) == {*env.agents, "world_state"}
    for i, a in enumerate(env.agents):
        np.testing.assert_array_equal(obs[a], ref_obs[i])
        assert obs[a].shape == obs_space.shape and obs[a].dtype == obs_space.dtype
        assert bool(obs_space.contains(obs[a]))
    assert obs["world_state"].shape == (env.state_size,)
    np.testing.assert_array_equal(obs["world_state"], game.state_vector(ref_state, 0))

    step = jax.jit(env.step)
    for t in range(3):
        k_act, k_step = jax.random.split(jax.random.PRNGKey(10 + t))
        actions = _sample(env, k_act)
        obs, state, rewards, dones, infos = step(k_step, state, actions)
        joint = jnp.stack([actions[a] for a in env.agents])
        ref = game.step_autoreset(ref_state, joint, k_step)
        ref_obs, ref_state, ref_rewards, ref_dead, ref_done, _ = ref
        assert _tree_equal(state, ref_state)
        assert set(rewards) == set(env.agents) and set(dones) == {*env.agents, "__all__"}
        for i, a in enumerate(env.agents):
            np.testing.assert_array_equal(obs[a], ref_obs[i])
            assert rewards[a].shape == () and rewards[a].dtype == jnp.float32
            assert rewards[a] == ref_rewards[i]
            assert dones[a].dtype == jnp.bool_ and dones[a] == (ref_dead[i] | ref_done)
        assert dones["__all__"] == ref_done
        assert set(infos) == {"terminated", "truncated", "winner", "won"}
        assert all(v.shape == (n,) for v in infos.values())  # the baselines' info reshape


def test_avail_actions_are_all_true_masks_and_refused_for_continuous_actions():
    env = make("identical_2_vs_2_fobs_vec_void_disc")
    _, state = env.reset(jax.random.PRNGKey(0))
    avail = jax.jit(env.get_avail_actions)(state)
    assert set(avail) == set(env.agents)
    assert all(m.shape == (27,) and m.dtype == jnp.bool_ and bool(m.all()) for m in avail.values())
    cont = make("identical_2_vs_2_fobs_vec_void_cont")
    with pytest.raises(ValueError, match="discrete actions; this scenario has continuous"):
        cont.get_avail_actions(state)


def test_world_state_can_be_left_out():
    env = make("identical_2_vs_2_fobs_vec_void_disc", world_state=False)
    obs, state = env.reset(jax.random.PRNGKey(0))
    assert set(obs) == set(env.agents)
    obs = env.step(jax.random.PRNGKey(1), state, {a: jnp.int32(13) for a in env.agents})[0]
    assert set(obs) == set(env.agents)


def test_rgb_vector_scenarios_are_refused_at_make_time():
    with pytest.raises(ValueError, match="obs_type='rgb_vector'.*obs_type='vector'"):
        make("identical_2_vs_2_fobs_vec_void_disc", obs_type="rgb_vector", **SMALL_RGB)


def test_missing_actions_are_named():
    env = make("identical_2_vs_2_fobs_vec_void_disc")
    _, state = env.reset(jax.random.PRNGKey(0))
    actions = {a: jnp.int32(13) for a in env.agents[:-1]}
    with pytest.raises(KeyError, match="missing \\['team1_agent1'\\]"):
        env.step(jax.random.PRNGKey(1), state, actions)


def test_actions_may_carry_axes_of_length_one_and_other_shapes_are_named():
    env = make("identical_2_vs_2_fobs_vec_void_disc")
    _, state = env.reset(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    plain = env.step(key, state, {a: jnp.int32(i) for i, a in enumerate(env.agents)})
    boxed = env.step(key, state, {a: jnp.array([i]) for i, a in enumerate(env.agents)})
    assert _tree_equal(plain, boxed)  # ippo_ff_mpe.py passes (1,) per agent
    with pytest.raises(ValueError, match=r"actions\['team0_agent0'\] .* got shape \(2,\)"):
        env.step(key, state, {a: jnp.array([1, 2]) for a in env.agents})
    cont = make("identical_2_vs_2_fobs_vec_void_cont")
    _, state = cont.reset(jax.random.PRNGKey(0))
    out = cont.step(key, state, {a: jnp.zeros((1, 3)) for a in cont.agents})
    assert out[2]["team0_agent0"].shape == ()


def test_opponent_mode_lists_only_the_learning_team_and_matches_versus_env():
    name = "identical_5_vs_1_fobs_vec_void_disc"
    env = make(name, opponent="evade", team=1)
    versus = VersusEnv(gigastep.make(name), "evade", opponent_team=0)
    assert env.agents == ["team1_agent0"] and env.num_agents == env.num_allies == 1
    assert env.agent_classes == {"team1": ["team1_agent0"]}
    assert "team 1 vs scripted evade" in repr(env)
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key)
    ref_obs, ref_state = versus.reset(key)
    ref_step = jax.jit(versus.step_autoreset)
    np.testing.assert_array_equal(obs["team1_agent0"], ref_obs[0])
    np.testing.assert_array_equal(obs["world_state"], gigastep.make(name).state_vector(state, 1))
    for t in range(3):
        k = jax.random.PRNGKey(100 + t)
        obs, state, rewards, dones, infos = env.step(k, state, {"team1_agent0": jnp.int32(t)})
        ref_obs, ref_state, ref_r, _, _, _ = ref_step(ref_state, jnp.array([t]), k)
        assert _tree_equal(state, ref_state)
        np.testing.assert_array_equal(obs["team1_agent0"], ref_obs[0])
        assert rewards["team1_agent0"] == ref_r[0]
        assert all(v.shape == (1,) for v in infos.values())


# ------------------------------------------------------------------------------------------
# Episode ends, final observations, dead agents
# ------------------------------------------------------------------------------------------


def test_episode_end_returns_the_reset_obs_and_keeps_the_last_one_in_info():
    name = "identical_2_vs_2_fobs_vec_void_disc"
    env = make(name, final_obs=True, max_episode_length=3)
    game = gigastep.make(name, max_episode_length=3)
    obs, state = env.reset(jax.random.PRNGKey(0))
    noop = {a: jnp.int32(13) for a in env.agents}
    step = jax.jit(env.step)
    for t in range(3):
        key = jax.random.PRNGKey(t)
        before = state
        obs, state, rewards, dones, infos = step(key, state, noop)
        ended = t == 2
        assert bool(dones["__all__"]) == ended
        assert all(bool(dones[a]) == ended for a in env.agents)  # no one died: only the end
        assert infos["truncated"].tolist() == [ended] * 4
        assert not infos["terminated"].any() and infos["winner"].tolist() == [-1] * 4
    # the last step: obs is the fresh game's first observation, info the ending game's last
    joint = jnp.full((4,), 13, jnp.int32)
    k_step = jax.random.split(jax.random.PRNGKey(2))[0]  # step_autoreset's own key split
    last_obs = _env.step(game.config, before, joint, k_step)[0]
    fresh, _, _, _, _, info = game.step_autoreset(before, joint, jax.random.PRNGKey(2))
    for i, a in enumerate(env.agents):
        np.testing.assert_array_equal(infos["final_obs"][a], last_obs[i])
        np.testing.assert_array_equal(infos["final_obs"][a], info.final_obs[i])
        np.testing.assert_array_equal(obs[a], fresh[i])
        assert not np.array_equal(obs[a], infos["final_obs"][a])
    assert int(state.episode.step) == 0  # a fresh game


def test_dead_agents_are_done_with_zero_obs_and_reward_until_the_reset():
    env = make("identical_2_vs_2_fobs_vec_void_disc")
    _, state = env.reset(jax.random.PRNGKey(0))
    agents = state.agents
    state = state.replace(agents=agents.replace(alive=agents.alive.at[1].set(False)))
    noop = {a: jnp.int32(13) for a in env.agents}
    for t in range(2):
        obs, state, rewards, dones, infos = env.step(jax.random.PRNGKey(t), state, noop)
        assert bool(dones["team0_agent1"]) and not bool(dones["__all__"])
        assert not bool(dones["team0_agent0"]) and not bool(dones["team1_agent0"])
        assert not np.asarray(obs["team0_agent1"]).any() and rewards["team0_agent1"] == 0.0


def test_reset_state_restarts_a_finished_game_from_it():
    env = make("identical_2_vs_2_fobs_vec_void_disc", max_episode_length=1)
    _, state = env.reset(jax.random.PRNGKey(0))
    _, start = env.reset(jax.random.PRNGKey(7))
    noop = {a: jnp.int32(13) for a in env.agents}
    obs, nxt, _, dones, _ = jax.jit(env.step)(jax.random.PRNGKey(1), state, noop, start)
    assert bool(dones["__all__"]) and _tree_equal(nxt, start)
    at_reset = env.get_obs(start)
    k_obs = jax.random.split(jax.random.PRNGKey(1))[1]
    from gigastep.versus import observe_state

    expected = observe_state(env.config, start, k_obs)
    for i, a in enumerate(env.agents):
        np.testing.assert_array_equal(obs[a], expected[i])
        assert at_reset[a].shape == obs[a].shape
    # without the end of an episode, reset_state is not used
    env_long = make("identical_2_vs_2_fobs_vec_void_disc")
    _, state = env_long.reset(jax.random.PRNGKey(0))
    _, nxt, _, dones, _ = env_long.step(jax.random.PRNGKey(1), state, noop, start)
    assert not bool(dones["__all__"]) and int(nxt.episode.step) == 1


# ------------------------------------------------------------------------------------------
# JaxMARL's own wrappers
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("wrapper", [LogWrapper, MPELogWrapper, SMAXLogWrapper])
def test_log_wrappers_record_episodes_under_jit_and_vmap(wrapper):
    base = make("identical_5_vs_1_fobs_vec_void_disc", opponent="pursuit", max_episode_length=4)
    env = wrapper(base)
    n_envs = 3
    obs, state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), n_envs))

    @jax.jit
    def run(state):
        def one(state, key):
            keys = jax.random.split(key, n_envs)
            actions = {a: jnp.full((n_envs,), 13, jnp.int32) for a in env.agents}
            _, state, rewards, dones, infos = jax.vmap(env.step)(keys, state, actions)
            return state, (rewards, dones, infos)

        return jax.lax.scan(one, state, jax.random.split(jax.random.PRNGKey(1), 4))

    state, (rewards, dones, infos) = run(state)
    assert infos["returned_episode"].shape == (4, n_envs, 5)
    assert infos["returned_episode"][-1].all() and not infos["returned_episode"][:-1].any()
    np.testing.assert_array_equal(infos["returned_episode_lengths"][-1], 4.0)
    scale = 5.0 if wrapper is MPELogWrapper else 1.0  # MPELogWrapper multiplies by num_agents
    summed = sum(rewards[a] for a in env.agents)  # (4, n_envs)
    total = np.asarray(infos["returned_episode_returns"][-1]).sum(axis=-1)
    np.testing.assert_allclose(total, scale * np.asarray(summed).sum(axis=0), rtol=1e-5)
    # every info leaf reshapes to (NUM_ACTORS,), as the baselines do
    flat = jax.tree.map(lambda x: x[0].reshape((n_envs * env.num_agents,)), infos)
    assert all(v.shape == (15,) for v in jax.tree.leaves(flat))


def test_ct_rollout_manager_batches_pads_and_adds_the_global_state():
    base = make("identical_2_vs_2_fobs_vec_void_disc")
    env = CTRolloutManager(base, batch_size=3)
    obs, state = env.batch_reset(jax.random.PRNGKey(0))
    length = base.config.vector_size
    assert obs["team0_agent0"].shape == (3, length + 4)  # obs + one-hot agent id
    np.testing.assert_array_equal(obs["team1_agent1"][:, length:], np.eye(4)[[3, 3, 3]])
    assert obs["__all__"].shape == (3, 4 * length)
    for t in range(3):
        k_act, k_step = jax.random.split(jax.random.PRNGKey(t + 1))
        actions = {
            a: env.batch_sample(k, a)
            for a, k in zip(env.agents, jax.random.split(k_act, 4), strict=True)
        }
        obs, state, rewards, dones, infos = env.batch_step(k_step, state, actions)
    assert rewards["__all__"].shape == (3,)
    np.testing.assert_allclose(rewards["__all__"], sum(rewards[a] for a in env.agents), rtol=1e-6)
    valid = env.get_valid_actions(state)
    assert valid["team0_agent0"].shape == (3, 27) and bool(valid["team0_agent0"].all())


# ------------------------------------------------------------------------------------------
# JaxMARL-style IPPO (ippo_ff_mpe.py) and MAPPO world state (mappo_rnn_smax.py)
# ------------------------------------------------------------------------------------------


def batchify(x: dict, agent_list, num_actors):
    x = jnp.stack([x[a] for a in agent_list])
    return x.reshape((num_actors, -1))


def unbatchify(x, agent_list, num_envs, num_actors):
    x = x.reshape((num_actors, num_envs, -1))
    return {a: x[i] for i, a in enumerate(agent_list)}


class ActorCritic(nn.Module):
    action_dim: int

    @nn.compact
    def __call__(self, x):
        pi = nn.Dense(self.action_dim)(nn.tanh(nn.Dense(16)(x)))
        value = nn.Dense(1)(nn.tanh(nn.Dense(16)(x)))
        return distrax.Categorical(logits=pi), jnp.squeeze(value, axis=-1)


def make_ippo_train(env, num_envs=4, num_steps=8, num_updates=2, lr=3e-3):
    """ippo_ff_mpe.py's make_train, shrunk: one epoch, one minibatch, no LR schedule."""
    env = MPELogWrapper(env)
    num_actors = env.num_agents * num_envs
    gamma, lam, clip, vf, ent = 0.99, 0.95, 0.2, 0.5, 0.01

    def train(rng):
        network = ActorCritic(env.action_space(env.agents[0]).n)
        rng, init_rng = jax.random.split(rng)
        x = jnp.zeros(env.observation_space(env.agents[0]).shape)
        tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(lr, eps=1e-5))
        train_state = TrainState.create(
            apply_fn=network.apply, params=network.init(init_rng, x), tx=tx
        )
        rng, reset_rng = jax.random.split(rng)
        obsv, env_state = jax.vmap(env.reset)(jax.random.split(reset_rng, num_envs))

        def _update_step(runner_state, unused):
            def _env_step(runner_state, unused):
                train_state, env_state, last_obs, rng = runner_state
                obs_batch = batchify(last_obs, env.agents, num_actors)
                rng, act_rng, step_rng = jax.random.split(rng, 3)
                pi, value = network.apply(train_state.params, obs_batch)
                action = pi.sample(seed=act_rng)
                log_prob = pi.log_prob(action)
                env_act = unbatchify(action, env.agents, num_envs, env.num_agents)  # (B, 1)
                step_keys = jax.random.split(step_rng, num_envs)
                obsv, env_state, reward, done, info = jax.vmap(env.step)(
                    step_keys, env_state, env_act
                )
                info = jax.tree.map(lambda x: x.reshape(num_actors), info)
                transition = (
                    batchify(done, env.agents, num_actors).squeeze(),
                    action,
                    value,
                    batchify(reward, env.agents, num_actors).squeeze(),
                    log_prob,
                    obs_batch,
                    info,
                )
                return (train_state, env_state, obsv, rng), transition

            runner_state, traj = jax.lax.scan(_env_step, runner_state, None, num_steps)
            train_state, env_state, last_obs, rng = runner_state
            done, action, value, reward, log_prob, obs, info = traj
            _, last_val = network.apply(
                train_state.params, batchify(last_obs, env.agents, num_actors)
            )

            def _gae(carry, t):
                gae, next_value = carry
                d, v, r = t
                delta = r + gamma * next_value * (1 - d) - v
                gae = delta + gamma * lam * (1 - d) * gae
                return (gae, v), gae

            _, adv = jax.lax.scan(
                _gae, (jnp.zeros_like(last_val), last_val), (done, value, reward), reverse=True
            )
            targets = adv + value

            def _loss(params):
                pi, v = network.apply(params, obs)
                ratio = jnp.exp(pi.log_prob(action) - log_prob)
                gae = (adv - adv.mean()) / (adv.std() + 1e-8)
                actor = -jnp.minimum(
                    ratio * gae, jnp.clip(ratio, 1.0 - clip, 1.0 + clip) * gae
                ).mean()
                critic = 0.5 * jnp.square(v - targets).mean()
                return actor + vf * critic - ent * pi.entropy().mean()

            loss, grads = jax.value_and_grad(_loss)(train_state.params)
            train_state = train_state.apply_gradients(grads=grads)
            return (train_state, env_state, last_obs, rng), (loss, info)

        runner_state = (train_state, env_state, obsv, rng)
        runner_state, (losses, metrics) = jax.lax.scan(
            _update_step, runner_state, None, num_updates
        )
        return runner_state[0], losses, metrics

    return train


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "opponent"),
    [
        ("identical_5_vs_1_fobs_vec_void_disc", "pursuit"),
        ("special_5_vs_5_pobs_vec_void_disc", None),
    ],
    ids=["5v1-vs-pursuit", "special-5v5-both-teams"],
)
def test_ippo_updates_run_and_change_the_parameters(name, opponent):
    env = make(name, opponent=opponent, max_episode_length=6)
    train = jax.jit(make_ippo_train(env))
    rng = jax.random.PRNGKey(0)
    state, losses, metrics = train(rng)
    assert losses.shape == (2,) and bool(jnp.isfinite(losses).all())
    init = ActorCritic(27).init(
        jax.random.split(rng)[1], jnp.zeros(env.observation_space(env.agents[0]).shape)
    )
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), state.params, init)
    assert min(jax.tree.leaves(moved)) > 0.0  # every parameter was updated
    # 2 updates x 8 steps with episodes of 6 steps: an episode ended at steps 6 and 12
    ended = metrics["returned_episode"].reshape(16, -1).all(axis=1)
    assert np.flatnonzero(ended).tolist() == [5, 11]
    np.testing.assert_array_equal(metrics["returned_episode_lengths"].reshape(16, -1)[5], 6.0)


class SMAXWorldStateWrapper(JaxMARLWrapper):
    """Provides a `"world_state"` observation for the centralised critic (copied from
    JaxMARL's baselines/MAPPO/mappo_rnn_smax.py, Apache-2.0)."""

    def __init__(self, env, obs_with_agent_id=True):
        super().__init__(env)
        self.obs_with_agent_id = obs_with_agent_id
        if not self.obs_with_agent_id:
            self._world_state_size = self._env.state_size
            self.world_state_fn = self.ws_just_env_state
        else:
            self._world_state_size = self._env.state_size + self._env.num_allies
            self.world_state_fn = self.ws_with_agent_id

    @partial(jax.jit, static_argnums=0)
    def reset(self, key):
        obs, env_state = self._env.reset(key)
        obs["world_state"] = self.world_state_fn(obs, env_state)
        return obs, env_state

    @partial(jax.jit, static_argnums=0)
    def step(self, key, state, action):
        obs, env_state, reward, done, info = self._env.step(key, state, action)
        obs["world_state"] = self.world_state_fn(obs, state)
        return obs, env_state, reward, done, info

    @partial(jax.jit, static_argnums=0)
    def ws_just_env_state(self, obs, state):
        world_state = obs["world_state"]
        world_state = world_state[None].repeat(self._env.num_allies, axis=0)
        return world_state

    @partial(jax.jit, static_argnums=0)
    def ws_with_agent_id(self, obs, state):
        world_state = obs["world_state"]
        world_state = world_state[None].repeat(self._env.num_allies, axis=0)
        one_hot = jnp.eye(self._env.num_allies)
        return jnp.concatenate((world_state, one_hot), axis=1)

    def world_state_size(self):
        return self._world_state_size


@pytest.mark.slow
def test_mappo_world_state_feeds_a_centralised_critic():
    base = make("identical_5_vs_1_fobs_vec_void_disc", opponent="pursuit")
    env = SMAXLogWrapper(SMAXWorldStateWrapper(base, obs_with_agent_id=True))
    num_envs = 2
    num_actors = env.num_agents * num_envs
    assert env.world_state_size() == base.state_size + 5
    obs, state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    assert obs["world_state"].shape == (num_envs, 5, env.world_state_size())
    actions = {a: jnp.full((num_envs,), 13, jnp.int32) for a in env.agents}
    keys = jax.random.split(jax.random.PRNGKey(1), num_envs)
    obs, state, reward, done, info = jax.jit(jax.vmap(env.step))(keys, state, actions)
    avail = jax.vmap(env.get_avail_actions)(state.env_state)
    assert batchify(avail, env.agents, num_actors).shape == (num_actors, 27)
    # mappo_rnn_smax.py: (num_envs, num_agents, S) -> (num_actors, S), agent-major
    world_state = obs["world_state"].swapaxes(0, 1).reshape((num_actors, -1))
    np.testing.assert_array_equal(world_state[:, -5:], np.repeat(np.eye(5), num_envs, axis=0))
    critic = nn.Dense(1)
    params = critic.init(jax.random.PRNGKey(2), world_state)
    targets = batchify(reward, env.agents, num_actors).squeeze()

    def loss(p):
        return jnp.square(critic.apply(p, world_state).squeeze(-1) - targets).mean()

    before, grads = jax.value_and_grad(loss)(params)
    params = jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)
    assert float(loss(params)) < float(before)
    ws_game = jax.vmap(lambda s: gigastep.make(base.game.spec.name).state_vector(s, 0))
    np.testing.assert_array_equal(obs["world_state"][:, 0, :-5], ws_game(state.env_state))


def test_the_public_entry_is_the_adapter():
    assert make is gigastep.jaxmarl.make
    assert GigastepJaxMARLEnv.__module__ == "gigastep.adapters.jaxmarl"
