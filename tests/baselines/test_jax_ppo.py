"""The JAX PPO twin against the PyTorch trainer: the same GAE, loss terms, gradients and
log-probabilities on the same parameters and batch (also with `--value-norm` and
`--separate-critic`); checkpoints that each framework reads; exact resumption; `--seeds K`
equal to K separate runs; the learning-rate schedule; evaluation during training; the command
line's artefacts.

Float tolerances (float32 on both sides, different summation orders): GAE 1e-5 absolute,
loss terms rtol 1e-5 / atol 1e-6, gradients atol 2e-5 + rtol 1e-4, log-probs atol 1e-4,
value-normalisation statistics rtol 1e-5 (float32 against PyTorch's float64).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from baselines.buffer import compute_gae
from baselines.checkpoint import load_checkpoint, load_policy
from baselines.config import PPOConfig
from baselines.jax_ppo import algorithm, convert, policy, running, update
from baselines.jax_ppo.trainer import JaxTrainer, make_setup
from baselines.jax_ppo.update import initial_state, rollout
from baselines.loss import ppo_loss
from baselines.policies import ActorCritic, PolicySpec
from baselines.valuenorm import ValueNorm, normalized_value_terms
from tests.baselines.eval_checks import check_evaluations

ROOT = Path(__file__).resolve().parents[2]
TINY = PPOConfig(
    scenario="identical_2_vs_2_fobs_vec_void_disc",
    framework="jax",
    num_envs=8,
    rollout_steps=12,
    updates=4,
    hidden=16,
    s5_state_dim=8,
    epochs=2,
    minibatches=2,
    opponent="self:0.5,pursuit:0.5",
    progress=False,
    tensorboard=False,
    plots=False,
    checkpoint_every=2,
)
CORES = ("s5", "gru", "mlp")


def _tiny(tmp_path, **changes) -> PPOConfig:
    changes.setdefault("out", str(tmp_path / "run"))
    return dataclasses.replace(TINY, **changes)


def _spec(core: str, discrete: bool, central: bool = False, **flags) -> PolicySpec:
    return PolicySpec(
        obs_type="vector",
        vector_size=7,
        image_shape=None,
        n_types=2,
        discrete=discrete,
        core=core,
        hidden=8,
        s5_state_dim=4,
        s5_layers=2 if core == "s5" else 1,
        central_critic=central,
        state_size=5 if central else 0,
        n_slots=3,
        critic_hidden=16,
        **flags,
    )


def _batch(spec: PolicySpec, t: int = 6, n: int = 5, seed: int = 0) -> dict:
    """A random batch: observations, episode starts, a non-zero initial state, actions."""
    rng = np.random.default_rng(seed)
    first = rng.random((t, n)) < 0.25
    cores = 2 if spec.separate_critic else 1  # the actor's and the critic's, concatenated
    if spec.core == "s5":
        shape = (spec.s5_layers, n, cores * spec.s5_state_dim // 2)
        h0 = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    else:
        width = cores * spec.hidden if spec.core == "gru" else 0
        h0 = rng.normal(size=(n, width)).astype(np.float32)
    if spec.discrete:
        actions = rng.integers(0, 27, size=(t, n))
    else:
        actions = rng.normal(size=(t, n, 3)).astype(np.float32)
    types = np.eye(spec.n_types, dtype=np.float32)[rng.integers(0, spec.n_types, size=n)]
    return {
        "obs": rng.normal(size=(t, n, spec.vector_size)).astype(np.float32),
        "types": types,
        "first": first,
        "h0": h0,
        "actions": actions,
        "critic_in": rng.normal(size=(t, n, 5 + 3 + 2)).astype(np.float32)
        if spec.central_critic
        else None,
        "old_logp": rng.normal(-3.0, 0.3, size=(t, n)).astype(np.float32),
        "adv": rng.normal(size=(t, n)).astype(np.float32),
        "old_values": rng.normal(size=(t, n)).astype(np.float32),
        "returns": rng.normal(size=(t, n)).astype(np.float32),
        "mask": rng.random((t, n)) < 0.8,
    }


def _torch(x):
    return None if x is None else torch.from_numpy(np.array(x))


# ------------------------------------------------------------------------------------------
# Pure pieces
# ------------------------------------------------------------------------------------------


def test_gae_is_the_same_in_both_frameworks_and_matches_a_hand_computed_case():
    rng = np.random.default_rng(3)
    t, n = 9, 4
    r, v, fv = (rng.normal(size=(t, n)).astype(np.float32) for _ in range(3))
    cont, boot = rng.random((t, n)) < 0.8, rng.random((t, n)) < 0.2
    nv = rng.normal(size=n).astype(np.float32)
    adv_t, ret_t = compute_gae(*map(_torch, (r, v, cont, boot, fv, nv)), 0.9, 0.8)
    adv_j, ret_j = algorithm.compute_gae(*map(jnp.asarray, (r, v, cont, boot, fv, nv)), 0.9, 0.8)
    np.testing.assert_allclose(np.asarray(adv_j), adv_t.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(ret_j), ret_t.numpy(), atol=1e-5)
    # two steps by hand: r = (1, 2), V = (0.5, 0.25), V_next = 1, both continue, no boot
    # delta_1 = 2 + 0.9 * 1 - 0.25 = 2.65; A_1 = 2.65
    # delta_0 = 1 + 0.9 * 0.25 - 0.5 = 0.725; A_0 = 0.725 + 0.9 * 0.8 * 2.65 = 2.633
    one = jnp.ones((2, 1), bool)
    adv, _ = algorithm.compute_gae(
        jnp.array([[1.0], [2.0]]),
        jnp.array([[0.5], [0.25]]),
        one,
        ~one,
        jnp.zeros((2, 1)),
        jnp.array([1.0]),
        0.9,
        0.8,
    )
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [2.633, 2.65], atol=1e-5)


def _assert_loss_and_gradients_match(loss, parts, grads, out, torch_grads) -> None:
    """JAX's loss, its terms and gradients equal PyTorch's (`out`, `torch_grads`) within the
    float32 tolerances of these tests."""
    np.testing.assert_allclose(float(loss), float(out.loss.detach()), rtol=1e-5, atol=1e-6)
    for name, theirs in (
        ("policy_loss", out.policy),
        ("value_loss", out.value),
        ("entropy", out.entropy),
        ("approx_kl", out.approx_kl),
        ("clip_frac", out.clip_frac),
    ):
        np.testing.assert_allclose(float(parts[name]), float(theirs), rtol=1e-5, atol=1e-6)
    assert set(grads) == set(torch_grads)
    for name, g in torch_grads.items():
        np.testing.assert_allclose(np.asarray(grads[name]), g, atol=2e-5, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize(
    "core, discrete, central",
    [(c, d, False) for c in CORES for d in (True, False)] + [("s5", True, True)],
)
@pytest.mark.slow
def test_loss_terms_and_gradients_match_pytorch(core, discrete, central):
    spec = _spec(core, discrete, central)
    torch.manual_seed(1)
    net = ActorCritic(spec)
    params = policy.params_from_torch(net.state_dict())
    b = _batch(spec)
    kw = dict(clip=0.2, vf_coef=0.5, ent_coef=0.01, clip_value=True, norm_adv=True)

    logp, entropy, value = net.evaluate(
        *map(_torch, (b["obs"], b["types"], b["first"], b["h0"], b["actions"], b["critic_in"]))
    )
    out = ppo_loss(
        logp,
        *map(_torch, (b["old_logp"], b["adv"])),
        value,
        *map(_torch, (b["old_values"], b["returns"])),
        entropy,
        _torch(b["mask"]),
        **kw,
    )
    out.loss.backward()
    torch_grads = {k: p.grad.numpy() for k, p in net.named_parameters()}

    def loss_fn(p):
        lp, ent, val = policy.evaluate(
            spec, p, b["obs"], b["types"], b["first"], b["h0"], b["actions"], b["critic_in"]
        )
        return algorithm.ppo_loss(
            lp, b["old_logp"], b["adv"], val, b["old_values"], b["returns"], ent, b["mask"], **kw
        )

    (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    _assert_loss_and_gradients_match(loss, parts, grads, out, torch_grads)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.slow
def test_one_step_acting_equals_the_sequence_replay(core):
    """`act` step by step gives the states and log-probs `evaluate` replays (resets included)."""
    spec = _spec(core, True)
    params = policy.init_params(spec, 0)
    b = _batch(spec, t=7, seed=4)
    h, logps = jnp.asarray(b["h0"]), []
    for t in range(7):
        x = policy._encode(params, b["obs"][t], b["types"])
        y, h = policy._core_step(spec, params, x, b["first"][t], h)
        logits = policy._outputs(spec, params, y, None)[0]
        logps.append(jax.nn.log_softmax(logits)[np.arange(5), b["actions"][t]])
    replay, _, _ = policy.evaluate(
        spec, params, b["obs"], b["types"], b["first"], b["h0"], b["actions"]
    )
    np.testing.assert_allclose(np.asarray(replay), np.stack(logps), atol=1e-5)


# ------------------------------------------------------------------------------------------
# Value normalisation and a separate critic
# ------------------------------------------------------------------------------------------


def test_the_reward_scale_is_pytorchs_also_before_the_returns_have_a_spread():
    from baselines.normalize import RewardScaler

    for returns in ([0.0] * 6, [0.0, 0.0, 5.0, 0.0, 1.0, 2.0]):
        scaler = RewardScaler(1, gamma=0.5)
        x = torch.tensor(returns, dtype=torch.float64)[:, None]
        scaler.stats.add(x)
        scaler.commit()
        m = running.merge(
            running.moments(1), running.sums(jnp.asarray(returns)[:, None], jnp.ones(6, bool))
        )
        want = float(scaler._scale)
        assert float(running.reward_scale(m)) == pytest.approx(want, rel=1e-5)
    assert want == pytest.approx(1 / np.sqrt(np.var(returns) + 1e-8), rel=1e-6)


def test_the_unshaped_return_sums_the_rewards_of_the_game_without_its_shaping(tmp_path):
    # Hiders (team 1) of hide and seek earn a reward every step they live, so the unshaped
    # return is not zero; --env adds an idle penalty. Acting does not read rewards, so one
    # rollout of each game takes the same steps: the shaped run's running unshaped returns
    # are the running returns the unshaped game keeps in its own state, bit for bit.
    common = dict(
        scenario="hide_and_seek_5_vs_5_fobs_vec_void_disc",
        team=1,
        num_envs=4,
        rollout_steps=16,
        opponent="random:0.5,pursuit:0.5",
    )
    shaped = make_setup(_tiny(tmp_path, env="reward_idle=1,max_episode_length=12", **common))
    plain = make_setup(_tiny(tmp_path, env="max_episode_length=12", **common))
    assert plain.score is None and shaped.score is not None
    assert shaped.score == plain.env_config
    outs = []
    for setup in (shaped, plain):
        state = initial_state(setup, 0)
        outs.append(jax.jit(lambda s, k, u=setup: rollout(u, s, k))(state, jax.random.key(5)))
    (s_state, _, s_totals), (p_state, _, p_totals) = jax.device_get(outs)
    running, kept = s_state.env.unshaped, p_state.env.states.episode.returns
    assert np.any(running != 0)
    np.testing.assert_array_equal(running, kept)
    s_counts, p_counts = s_totals.counts, p_totals.counts
    assert p_counts[3].sum() > 0, "some episodes should end in the rollout"
    np.testing.assert_array_equal(s_counts[6], p_counts[5])  # unshaped == the plain return
    np.testing.assert_array_equal(p_counts[6], p_counts[5])  # no shaping: the same
    assert np.all(s_counts[5] < s_counts[6])  # the penalty lowers the return as trained


def test_value_norm_statistics_match_pytorchs_and_convert_both_ways():
    rng = np.random.default_rng(7)
    ours, theirs = update.value_norm_init(), ValueNorm()
    np.testing.assert_allclose(update.value_moments(ours), theirs.moments())  # (0, 1)
    batches = []
    for k in range(3):  # means far from 0 against their spread; masked entries hold NaN
        r = rng.normal(20.0 + 5.0 * k, 0.5, size=(6, 5)).astype(np.float32)
        m = rng.random((6, 5)) < 0.7
        batches.append((np.where(m, r, np.nan).astype(np.float32), m))
    batches.append((np.full((6, 5), np.nan, np.float32), np.zeros((6, 5), bool)))  # no-op
    for r, m in batches:
        ours = update.value_norm_merge(ours, jnp.asarray(r), jnp.asarray(m))
        theirs.update(torch.from_numpy(r), torch.from_numpy(m), lambda x: x)
        np.testing.assert_allclose(update.value_moments(ours), theirs.moments(), rtol=1e-5)
    buffers = convert.value_norm_to_torch(ours)
    for key in ("mean", "mean_sq", "weight"):
        mine = buffers[f"value_norm.{key}"]
        assert mine.dtype == torch.float64
        np.testing.assert_allclose(float(mine), float(getattr(theirs, key)), rtol=1e-5)
    back = convert.value_norm_from_torch(
        {f"value_norm.{k}": getattr(theirs, k) for k in ("mean", "mean_sq", "weight")}
    )
    np.testing.assert_allclose(update.value_moments(back), theirs.moments(), rtol=1e-6)


OPTIONS = [
    ("s5", True, False, dict(value_norm=True)),
    ("mlp", False, False, dict(value_norm=True)),
    ("s5", True, True, dict(value_norm=True)),  # MAPPO's critic, normalised
    ("s5", True, False, dict(separate_critic=True)),
    ("gru", True, False, dict(separate_critic=True)),
    ("mlp", False, False, dict(separate_critic=True)),
    ("gru", False, False, dict(separate_critic=True, value_norm=True)),
]


def _options_net(spec: PolicySpec, seed: int) -> tuple[ActorCritic, policy.Params, tuple | None]:
    """A PyTorch policy (its `ValueNorm` fed returns far from (0, 1)) and the JAX parameters
    and value moments converted from its state dict."""
    torch.manual_seed(seed)
    net = ActorCritic(spec)
    if net.value_norm is not None:
        returns = torch.randn(4, 6) * 3.0 + 4.0
        net.value_norm.update(returns, torch.ones(4, 6, dtype=torch.bool), lambda x: x)
    state = net.state_dict()
    moments = None
    if spec.value_norm:
        moments = update.value_moments(convert.value_norm_from_torch(state))
    return net, policy.params_from_torch(state), moments


@pytest.mark.parametrize("core, discrete, central, flags", OPTIONS)
@pytest.mark.slow
def test_value_norm_and_separate_critic_losses_and_gradients_match_pytorch(
    core, discrete, central, flags
):
    """The trainer's minibatch loss (`update._minibatch_loss`) against `Trainer`'s: values on
    the return scale, the value terms standardised, every gradient."""
    spec = _spec(core, discrete, central, **flags)
    net, params, moments = _options_net(spec, 2)
    b = _batch(spec, seed=5)
    kw = dict(clip=0.2, vf_coef=0.5, ent_coef=0.01, clip_value=True, norm_adv=True)

    logp, entropy, value = net.evaluate(
        *map(_torch, (b["obs"], b["types"], b["first"], b["h0"], b["actions"], b["critic_in"]))
    )
    terms = normalized_value_terms(net, value, *map(_torch, (b["old_values"], b["returns"])))
    out = ppo_loss(
        logp, *map(_torch, (b["old_logp"], b["adv"])), *terms, entropy, _torch(b["mask"]), **kw
    )
    out.loss.backward()
    torch_grads = {k: p.grad.numpy() for k, p in net.named_parameters()}

    n = b["mask"].shape[1]
    setup = SimpleNamespace(config=PPOConfig(**kw), spec=spec, row_type=b["types"].argmax(-1))
    buf = {k: b[k] for k in ("obs", "first", "h0", "actions", "critic_in")}
    buf.update(alive=b["mask"], logp=b["old_logp"], values=b["old_values"])
    loss_fn = partial(update._minibatch_loss, setup)
    (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, buf, b["adv"], b["returns"], jnp.arange(n), jnp.ones(n, bool), moments
    )
    _, _, values = policy.evaluate(
        spec,
        params,
        *(b[k] for k in ("obs", "types", "first", "h0", "actions", "critic_in")),
        moments,
    )
    np.testing.assert_allclose(np.asarray(values), value.detach().numpy(), rtol=1e-5, atol=1e-5)
    _assert_loss_and_gradients_match(loss, parts, grads, out, torch_grads)


@pytest.mark.parametrize("core", CORES)
@pytest.mark.slow
def test_a_separate_critic_acts_as_pytorchs_with_the_same_state_layout(core):
    """Step by step from the same state: the same actions, log-probs, values and recurrent
    state (the actor's and the critic's concatenated) as `ActorCritic.act` and `.value`."""
    spec = _spec(core, True, separate_critic=True, value_norm=True)
    net, params, moments = _options_net(spec, 3)
    b = _batch(spec, t=6, seed=6)
    h_t, h_j = _torch(b["h0"]), jnp.asarray(b["h0"])
    types = b["types"]
    for t in range(6):
        obs, first = b["obs"][t], b["first"][t]
        with torch.no_grad():
            v_t = net.value(_torch(obs), _torch(types), _torch(first), h_t)
            a_t, logp_t, va_t, h_t = net.act(
                _torch(obs), _torch(types), _torch(first), h_t, deterministic=True
            )
        v_j = policy.value(spec, params, obs, types, first, h_j, None, moments)
        a_j, logp_j, va_j, h_j = policy.act(
            spec, params, obs, types, first, h_j, None, jax.random.key(0), True, moments
        )
        np.testing.assert_array_equal(np.asarray(a_j), a_t.numpy())
        np.testing.assert_allclose(np.asarray(logp_j), logp_t.numpy(), atol=1e-5)
        np.testing.assert_allclose(np.asarray(v_j), v_t.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(va_j), va_t.numpy(), rtol=1e-5, atol=1e-5)
        assert h_j.shape == tuple(h_t.shape)
        np.testing.assert_allclose(np.asarray(h_j), h_t.numpy(), atol=1e-5)


# ------------------------------------------------------------------------------------------
# A real rollout, replayed by PyTorch
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "core, scenario",
    [
        ("s5", "identical_2_vs_2_fobs_vec_void_disc"),
        ("s5", "identical_2_vs_2_fobs_vec_void_cont"),
        ("gru", "identical_2_vs_2_fobs_vec_void_disc"),
        ("mlp", "identical_2_vs_2_fobs_vec_void_cont"),
    ],
)
@pytest.mark.slow
def test_pytorch_replays_a_jax_rollout_to_the_acting_log_probs(core, scenario, tmp_path):
    config = _tiny(tmp_path, policy=core, scenario=scenario, rollout_steps=40, num_envs=4)
    setup = make_setup(config)
    state = initial_state(setup, 0)
    _, (buf,), _ = jax.jit(lambda s, k: rollout(setup, s, k))(state, jax.random.key(5))
    buf = jax.device_get(buf)
    assert buf["first"][1:].any(), "the rollout should cross an episode boundary"
    net = ActorCritic(setup.spec)
    net.load_state_dict(policy.params_to_torch(state.params))
    types = np.eye(setup.spec.n_types, dtype=np.float32)[setup.row_type]
    with torch.no_grad():
        logp, _, value = net.evaluate(
            *map(_torch, (buf["obs"], types, buf["first"], buf["h0"], buf["actions"]))
        )
    alive = buf["alive"]
    np.testing.assert_allclose(logp.numpy()[alive], buf["logp"][alive], atol=1e-4)
    np.testing.assert_allclose(value.numpy()[alive], buf["values"][alive], atol=1e-4)


# ------------------------------------------------------------------------------------------
# Runs: checkpoints, resumption, seeds, the command line
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jax_trained(tmp_path_factory) -> JaxTrainer:
    """4 updates of the tiny config in JAX (checkpoints at 2 and 4): the trainer, with its
    compiled update."""
    trainer = JaxTrainer(_tiny(tmp_path_factory.mktemp("jax")))
    trainer.run()
    return trainer


@pytest.fixture(scope="module")
def jax_run(jax_trained) -> Path:
    """The run folder of `jax_trained`."""
    return Path(jax_trained.config.out)


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x]


def _observations(scenario: str, steps: int, games: int):
    """Observations and episode starts of team 0 in a few random-action games (torch)."""
    from gigastep.adapters.torch import TorchVecEnv

    env = TorchVecEnv(scenario, games, seed=3)
    obs, first, out = env.reset(), torch.ones(games, dtype=torch.bool), []
    team0 = np.flatnonzero(np.asarray(env.config.teams) == 0)
    for _ in range(steps):
        out.append((obs[:, team0].clone(), first.clone()))
        actions = torch.randint(0, 27, (games, env.n_agents), dtype=torch.int32)
        obs, _, _, first, _ = env.step(actions)
    return out


def _same_actions(path: Path, scenario: str):
    torch_actor = load_policy(path).actor(team=0, num_envs=4, deterministic=True)
    jax_actor = convert.JaxActor(convert.load_jax_policy(path), 0, 4, deterministic=True)
    for obs, first in _observations(scenario, 30, 4):
        a_torch = torch_actor(obs, first).numpy()
        a_jax = np.asarray(jax_actor(obs.numpy(), first.numpy()))
        np.testing.assert_array_equal(a_jax, a_torch)


@pytest.mark.slow
def test_a_jax_checkpoint_plays_as_a_pytorch_player_with_the_same_actions(jax_run):
    ckpt = load_checkpoint(jax_run / "checkpoint.pt")
    assert ckpt["framework"] == "jax" and ckpt["update"] == 4
    _same_actions(jax_run / "checkpoint.pt", TINY.scenario)


def test_a_pytorch_checkpoint_loads_into_jax_with_the_same_actions(tmp_path):
    from baselines.train import Trainer

    config = _tiny(tmp_path, framework="torch", updates=2)
    Trainer(config).run()
    _same_actions(Path(config.out) / "checkpoint.pt", TINY.scenario)


def _same_values(path: Path, scenario: str):
    """The PyTorch and the JAX reading of a checkpoint give the same values (on the return
    scale: the value normalisation's statistics are read too) on the same observations."""
    loaded, jax_policy = load_policy(path), convert.load_jax_policy(path)
    net, spec = loaded.nets[0], loaded.spec
    params = jax_policy.params[0]
    moments = None
    if spec.value_norm:
        assert jax_policy.value_norm is not None
        moments = update.value_moments(jax_policy.value_norm[0])
    obs, first = _observations(scenario, 1, 4)[0]
    flat = obs.reshape(-1, obs.shape[-1])
    x = loaded.normalizers[0](flat)
    types = torch.eye(spec.n_types)[torch.zeros(len(flat), dtype=torch.long)]
    starts = torch.ones(len(flat), dtype=torch.bool)
    with torch.no_grad():
        want = net.value(x, types, starts, net.initial_state(len(flat))).numpy()
    h = policy.initial_state(spec, len(flat))
    got = policy.value(spec, params, x.numpy(), types.numpy(), starts.numpy(), h, None, moments)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_separate_critic_and_value_norm_checkpoints_are_read_by_both_frameworks(tmp_path):
    from baselines.train import Trainer

    options = dict(separate_critic=True, value_norm=True, updates=2, anneal_lr=False)
    torch_cfg = _tiny(tmp_path, framework="torch", out=str(tmp_path / "torch"), **options)
    Trainer(torch_cfg).run()
    jax_cfg = _tiny(tmp_path, out=str(tmp_path / "jax"), **options)
    JaxTrainer(jax_cfg).run()
    names = None
    for cfg in (torch_cfg, jax_cfg):
        path = Path(cfg.out) / "checkpoint.pt"
        model = load_checkpoint(path)["learners"][0]["model"]
        assert names is None or set(model) == names  # the same state-dict names both ways
        names = set(model)
        assert any(k.startswith("critic_core.") for k in model) and "critic_head.weight" in model
        assert model["value_norm.weight"].dtype == torch.float64
        assert float(model["value_norm.weight"]) > 0  # two updates took in their returns
        _same_actions(path, TINY.scenario)
        _same_values(path, TINY.scenario)


@pytest.mark.slow
def test_a_resumed_jax_run_ends_exactly_where_the_uninterrupted_one_does(jax_run, tmp_path):
    out = tmp_path / "resumed"
    shutil.copytree(jax_run, out)
    shutil.copyfile(out / "checkpoint_000002.pt", out / "checkpoint.pt")
    JaxTrainer(_tiny(tmp_path, out=str(out), resume=True)).run()
    mine, ref = load_checkpoint(out / "checkpoint.pt"), load_checkpoint(jax_run / "checkpoint.pt")
    assert mine["update"] == ref["update"] == 4
    for a, b in zip(mine["jax_state"], ref["jax_state"], strict=True):
        assert torch.equal(a, b)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    want = [json.loads(x) for x in (jax_run / "metrics.jsonl").read_text().splitlines()]
    timing = {"wall_s", "update_s", "update_agent_steps_per_s", "rss_mb", "peak_rss_mb"}
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    for r, w in zip(rows, want, strict=True):
        assert {k: v for k, v in r.items() if k not in timing} == {
            k: v for k, v in w.items() if k not in timing
        }


@pytest.mark.slow
def test_seeds_2_gives_each_seed_the_result_of_its_own_run(jax_run, tmp_path):
    JaxTrainer(_tiny(tmp_path, out=str(tmp_path / "two"), seeds=2)).run()
    JaxTrainer(_tiny(tmp_path, out=str(tmp_path / "one"), seed=1)).run()
    for seed, ref in ((0, jax_run), (1, tmp_path / "one")):
        folder = tmp_path / "two" / f"seed_{seed}"
        assert json.loads((folder / "config.json").read_text())["seed"] == seed
        mine, theirs = load_checkpoint(folder / "checkpoint.pt"), load_checkpoint(ref)
        for name, p in theirs["learners"][0]["model"].items():
            # vmap batches the matmuls: the same maths, summed in another order
            np.testing.assert_allclose(
                mine["learners"][0]["model"][name].numpy(), p.numpy(), atol=1e-4, err_msg=name
            )
        rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
        want = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
        assert [r["episodes"] for r in rows] == [w["episodes"] for w in want]
    a = load_checkpoint(tmp_path / "two" / "seed_0" / "checkpoint.pt")["learners"][0]["model"]
    b = load_checkpoint(tmp_path / "two" / "seed_1" / "checkpoint.pt")["learners"][0]["model"]
    assert not torch.equal(a["heads.weight"], b["heads.weight"])


@pytest.mark.slow
def test_the_command_line_writes_the_pytorch_trainers_artefacts(tmp_path):
    out = tmp_path / "cli"
    args = [
        sys.executable,
        "-m",
        "baselines.ppo",
        "--framework",
        "jax",
        "--scenario",
        TINY.scenario,
        "--num-envs",
        "4",
        "--rollout-steps",
        "8",
        "--updates",
        "2",
        "--hidden",
        "8",
        "--s5-state-dim",
        "4",
        "--epochs",
        "1",
        "--minibatches",
        "2",
        "--opponent",
        "pursuit",
        "--checkpoint-every",
        "1",
        "--no-progress",
        "--no-tensorboard",
        "--out",
        str(out),
    ]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    names = {p.name for p in out.iterdir()}
    assert {"checkpoint.pt", "checkpoint_000002.pt", "config.json", "metrics.csv"} <= names
    assert {"metrics.jsonl", "learning_curves.png"} <= names
    assert json.loads((out / "config.json").read_text())["framework"] == "jax"
    assert len((out / "metrics.csv").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--scenario", "identical_2_vs_2_fobs_rgb_void_disc"], "vector observations"),
        (["--compile"], "--compile"),
    ],
)
def test_options_the_jax_side_lacks_fail_naming_them(flags, named, tmp_path, capsys):
    from baselines.ppo import main

    code = main(["--framework", "jax", "--out", str(tmp_path / "x"), *flags])
    assert code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_pytorch_seeds_2_trains_one_run_per_seed_folder(tmp_path):
    from baselines.ppo import main

    out = tmp_path / "torch2"
    flags = ["--scenario", TINY.scenario, "--num-envs", "4", "--rollout-steps", "6"]
    flags += ["--updates", "1", "--hidden", "8", "--s5-state-dim", "4", "--epochs", "1"]
    flags += ["--opponent", "pursuit", "--no-progress", "--no-tensorboard", "--no-plots"]
    assert main([*flags, "--seeds", "2", "--seed", "3", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["seeds"] == 2
    models = []
    for seed in (3, 4):
        ckpt = load_checkpoint(out / f"seed_{seed}" / "checkpoint.pt")
        assert ckpt["config"]["seed"] == seed and ckpt["config"]["seeds"] == 1
        models.append(ckpt["learners"][0]["model"]["heads.weight"])
    assert not torch.equal(*models)


# ------------------------------------------------------------------------------------------
# The learning-rate schedule and evaluation during training
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_learning_rate_is_pytorchs_across_a_resume_with_more_updates(jax_run, tmp_path):
    from baselines.train import Trainer

    # PyTorch: planned for 4 updates, stopped after 2, resumed with --updates 8
    config = _tiny(tmp_path, framework="torch", out=str(tmp_path / "torch"))
    interrupted = Trainer(config)
    interrupted.start()
    torch_rates = [interrupted.step()["lr"] for _ in range(2)]
    Path(config.out).mkdir()
    interrupted.save(Path(config.out))
    run = Trainer(dataclasses.replace(config, updates=8, resume=True)).run()
    torch_rates += [r["lr"] for r in _rows(run / "metrics.jsonl")]
    # JAX: the same from the update-2 checkpoint of the 4-update run
    out = tmp_path / "jax"
    shutil.copytree(jax_run, out)
    shutil.copyfile(out / "checkpoint_000002.pt", out / "checkpoint.pt")
    JaxTrainer(_tiny(tmp_path, out=str(out), updates=8, resume=True)).run()
    jax_rates = [r["lr"] for r in _rows(out / "metrics.jsonl")]
    assert jax_rates == torch_rates
    # 1, 0.75 of the 4-update schedule, then 0.5 decaying to 0 over the 6 updates left
    expected = [1.0, 0.75] + [0.5 - 0.5 * j / 6 for j in range(6)]
    assert jax_rates == pytest.approx([TINY.lr * e for e in expected])


@pytest.mark.slow
def test_with_a_time_budget_the_learning_rate_is_pytorchs_also_after_a_resume(
    jax_trained, tmp_path
):
    """The same (update, training time) gives the same rate in both trainers: annealed over
    the share of the budget used, and continued from there with a longer budget."""
    from baselines.train import Trainer

    jax_cfg = _tiny(tmp_path, out=str(tmp_path / "jax"), updates=10**6, time_budget_s=100.0)
    torch_cfg = dataclasses.replace(jax_cfg, framework="torch", out=str(tmp_path / "torch"))
    rates: dict[str, list[float]] = {"jax": [], "torch": []}

    def borrow(trainer: JaxTrainer) -> JaxTrainer:  # the fixture's program: lr is its argument
        trainer._compiled = jax_trained._compiled
        return trainer

    def steps(trainers: dict, clock: list[float]) -> None:
        for wall in clock:  # the training time before each update
            for name, trainer in trainers.items():
                trainer.wall_s = wall
                rates[name].append(trainer.step()["lr"])

    jt = borrow(JaxTrainer(jax_cfg))
    jt.state = jax.tree_util.tree_map(jnp.copy, jax_trained.state)
    tt = Trainer(torch_cfg)
    tt.start()
    steps({"jax": jt, "torch": tt}, [0.0, 25.0, 40.0])
    for trainer in (jt, tt):
        trainer.wall_s = 50.0  # half the budget used when the checkpoints are written
        Path(trainer.config.out).mkdir()
    jt.save()
    tt.save(Path(torch_cfg.out))
    longer = dict(time_budget_s=200.0, resume=True)  # 150 s left for the rate 0.5 -> 0
    jt = borrow(JaxTrainer(dataclasses.replace(jax_cfg, **longer)))
    jt.load()
    tt = Trainer(dataclasses.replace(torch_cfg, **longer))
    tt.load_state_dict(load_checkpoint(Path(torch_cfg.out) / "checkpoint.pt"))
    steps({"jax": jt, "torch": tt}, [50.0, 125.0])
    assert rates["jax"] == rates["torch"]
    shares = (0.0, 0.25, 0.4, 0.5, 0.75)  # the updates' share (3 in a million) is negligible
    assert rates["jax"] == pytest.approx([TINY.lr * (1 - p) for p in shares], rel=1e-4)


@pytest.mark.slow
def test_eval_every_logs_wilson_intervals_keeps_best_pt_and_leaves_training_alone(
    jax_run, tmp_path
):
    config = _tiny(tmp_path, eval_every=2, eval_games=6, eval_opponents="random")
    run = JaxTrainer(config).run()
    assert (run / "eval.csv").exists()
    # every 2 updates and at the end; 8 games x 12 steps x 4 agents per update
    check_evaluations(run, jax_run, [2, 4], games=6, per_update=8 * 12 * 4)
