"""The factored action head (`--action-head factored`): turn, dive and throttle as three
3-way categoricals whose log-probabilities add, over the same 27 actions as the joint head."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from baselines.jax_ppo import policy as jpolicy
from baselines.policies import ActorCritic, PolicySpec, joint_log_probs
from gigastep.game.dynamics import ACTION_TABLE

LEVELS = (-1.0, 0.0, 1.0)


def _spec(**kw) -> PolicySpec:
    values = dict(obs_type="vector", vector_size=5, image_shape=None, n_types=1, discrete=True)
    return PolicySpec(**{**values, "core": "mlp", "hidden": 8, **kw})


def test_a_joint_actions_log_prob_is_the_sum_of_its_turn_dive_and_throttle_log_probs():
    out = torch.tensor([[0.3, -1.2, 2.0, 0.0, 0.5, -0.5, 1.5, 1.0, -2.0]])
    turn, dive, throttle = (torch.log_softmax(out[0, 3 * k : 3 * k + 3], 0) for k in range(3))
    joint = joint_log_probs(out)[0]
    for r in range(27):
        heading_level, dive_level, throttle_level = ACTION_TABLE[r]  # the game's meaning of r
        expected = (
            turn[LEVELS.index(heading_level)]
            + dive[LEVELS.index(dive_level)]
            + throttle[LEVELS.index(throttle_level)]
        )
        assert float(joint[r]) == pytest.approx(float(expected), abs=1e-6)


@pytest.mark.parametrize("head", ["joint", "factored"])
def test_both_heads_give_a_distribution_over_the_same_27_actions(head):
    torch.manual_seed(0)
    spec = _spec(action_head=head)
    net = ActorCritic(spec)
    obs, types = torch.randn(64, 5), torch.ones(64, 1)
    first = torch.ones(64, dtype=torch.bool)
    y, _, _ = net._step(obs, types, first, net.initial_state(64))
    logits, _ = net._outputs(y, None)
    assert logits.shape == (64, 27)
    probs = torch.softmax(logits, -1)
    torch.testing.assert_close(probs.sum(-1), torch.ones(64))
    assert net.heads.out_features == (9 if head == "factored" else 27) + 1
    actions, logp, _, _ = net.act(obs, types, first, net.initial_state(64))
    assert actions.min() >= 0 and actions.max() <= 26
    replay, entropy, _ = net.evaluate(
        obs[None], types, first[None], net.initial_state(64), actions[None]
    )
    torch.testing.assert_close(replay[0], logp)
    assert (entropy <= np.log(27) + 1e-5).all()


def test_the_factored_heads_entropy_is_the_sum_of_the_three_factors():
    out = torch.randn(4, 9)
    joint = joint_log_probs(out)
    entropy = -(joint.exp() * joint).sum(-1)
    parts = sum(
        -(torch.log_softmax(out[:, s], -1).exp() * torch.log_softmax(out[:, s], -1)).sum(-1)
        for s in (slice(0, 3), slice(3, 6), slice(6, 9))
    )
    torch.testing.assert_close(entropy, parts)


def test_jax_and_pytorch_factored_heads_agree():
    torch.manual_seed(1)
    spec = _spec(action_head="factored")
    net = ActorCritic(spec)
    params = jpolicy.params_from_torch(net.state_dict())
    obs, types = torch.randn(6, 3, 5), torch.ones(3, 1)
    first = torch.zeros(6, 3, dtype=torch.bool)
    first[0] = True
    actions = torch.randint(0, 27, (6, 3))
    logp, entropy, value = net.evaluate(obs, types, first, net.initial_state(3), actions)
    j_logp, j_entropy, j_value = jpolicy.evaluate(
        spec,
        params,
        jnp.asarray(obs.numpy()),
        jnp.asarray(types.numpy()),
        jnp.asarray(first.numpy()),
        jpolicy.initial_state(spec, 3),
        jnp.asarray(actions.numpy()),
    )
    np.testing.assert_allclose(np.asarray(j_logp), logp.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(j_entropy), entropy.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(j_value), value.detach().numpy(), atol=1e-5)


def test_the_factored_head_is_refused_for_continuous_actions_and_unknown_heads():
    with pytest.raises(ValueError, match="discrete"):
        _spec(discrete=False, action_head="factored")
    with pytest.raises(ValueError, match="joint or factored, got 'split'"):
        _spec(action_head="split")


def test_a_checkpoint_without_an_action_head_loads_as_joint():
    values = _spec().to_dict()
    del values["action_head"]  # a policy spec saved before the option existed
    assert PolicySpec.from_dict(values).action_head == "joint"


def test_resuming_a_checkpoint_written_before_the_option_existed_is_not_a_mismatch():
    from dataclasses import asdict

    from baselines.config import PPOConfig
    from baselines.runfolder import resume_mismatches

    config = asdict(PPOConfig())
    old_config = {k: v for k, v in config.items() if k not in ("action_head", "signal")}
    old_spec = {k: v for k, v in _spec().to_dict().items() if k != "action_head"}
    ckpt = {"config": old_config, "policy_spec": old_spec, "game": {"scenario_hash": "h"}}
    assert resume_mismatches(config, "h", _spec().to_dict(), ckpt) == []
    changed = _spec(action_head="factored").to_dict()
    assert resume_mismatches(config, "h", changed, ckpt) == [
        "architecture action_head: given 'factored', checkpoint 'joint'"
    ]
