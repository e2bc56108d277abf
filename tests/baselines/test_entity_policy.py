"""The entity policy (`--encoder entity`): one policy for every team size, started from a
checkpoint (`--init-from`, `--agent-steps`) and fine-tuned for the few-shot protocol."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import gigastep
from baselines.config import PPOConfig, budget_updates, validate
from baselines.envs import GameSpec, game_spec_from_config
from baselines.policies import ActorCritic, EntityEncoder, PolicySpec
from baselines.train import policy_spec

F = 25  # features of an entity row
ENT = "identical_{}_vs_{}_fobs_ent_void_disc"


def _spec(rows: int = 18, **fields) -> PolicySpec:
    values = dict(obs_type="entity", vector_size=F * rows, image_shape=None, n_types=2)
    values.update(discrete=True, core="mlp", hidden=16)
    return PolicySpec(**{**values, **fields})


def _rows(n: int, g: int, present: int, seed: int = 0) -> torch.Tensor:
    """[n, g * F]: an ego row and `present` other rows of random features, the rest absent."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.zeros(n, g, F)
    rows[:, : present + 1] = torch.randn(n, present + 1, F, generator=gen)
    rows[:, : present + 1, 0] = 1.0
    return rows.reshape(n, g * F)


def _encoder(seed: int = 0) -> EntityEncoder:
    torch.manual_seed(seed)
    return EntityEncoder(_spec())


TYPES = torch.tensor([[1.0, 0.0]] * 3)

# --- the encoder -------------------------------------------------------------------------


def test_the_entity_encoders_weights_do_not_depend_on_the_slot_counts():
    small, large = ActorCritic(_spec(rows=3)), ActorCritic(_spec(rows=40))
    shapes = {k: v.shape for k, v in small.state_dict().items()}
    assert shapes == {k: v.shape for k, v in large.state_dict().items()}


def test_absent_rows_do_not_change_the_features():
    enc = _encoder()
    obs = _rows(3, 4, present=3)
    padded = torch.cat([obs, torch.zeros(3, 6 * F)], dim=1)  # six more empty slots
    assert torch.allclose(enc(obs, TYPES), enc(padded, TYPES), atol=1e-6)


def test_absent_rows_are_masked_by_their_presence_flag_not_by_their_values():
    enc = _encoder()
    obs = _rows(3, 5, present=2)
    noisy = obs.clone().reshape(3, 5, F)
    noisy[:, 3:, 1:] = 7.0  # junk in two rows whose presence flag is 0
    assert torch.allclose(enc(obs, TYPES), enc(noisy.reshape(3, -1), TYPES), atol=1e-6)


def test_the_order_of_the_other_rows_does_not_matter():
    enc = _encoder()
    obs = _rows(3, 5, present=4).reshape(3, 5, F)
    swapped = obs[:, [0, 3, 1, 4, 2]]  # the ego stays first
    out = enc(swapped.reshape(3, -1), TYPES)
    assert torch.allclose(enc(obs.reshape(3, -1), TYPES), out, atol=1e-5)


def test_the_ego_row_matters():
    enc = _encoder()
    obs = _rows(3, 5, present=4)
    other = obs.clone()
    other[:, 1:F] += 1.0
    assert not torch.allclose(enc(obs, TYPES), enc(other, TYPES))


def _attention_row_by_row(enc: EntityEncoder, obs: torch.Tensor, types: torch.Tensor):
    """The encoder's definition, written out: keys and values computed for every row."""
    n = obs.shape[0]
    rows = obs.reshape(n, -1, F)
    e = torch.relu(rows @ enc.embed[0].weight.T + enc.embed[0].bias)
    ego, others = e[:, 0], e[:, 1:]
    present = rows[:, 1:, 0] > 0.5
    q = torch.cat([ego, types], -1) @ enc.query.weight.T + enc.query.bias
    keys = others @ enc.key.weight.T + enc.key.bias
    values = others @ enc.value.weight.T + enc.value.bias
    out = torch.zeros(n, e.shape[-1])
    for i in range(n):
        idx = present[i].nonzero().flatten()
        if len(idx):
            w = torch.softmax(keys[i, idx] @ q[i] / math.sqrt(e.shape[-1]), 0)
            out[i] = w @ values[i, idx]
    weight = present.float().unsqueeze(-1)
    pooled = (others * weight).sum(1) / weight.sum(1).clamp(min=1.0)
    fused = torch.cat([ego, out, pooled, types], -1)
    return torch.relu(fused @ enc.fuse[0].weight.T + enc.fuse[0].bias)


def test_the_attention_equals_keys_and_values_computed_row_by_row():
    enc = _encoder(3)
    with torch.no_grad():  # biases away from their zero start, so their terms count
        for layer in (enc.query, enc.key, enc.value):
            layer.bias.normal_()
    obs = torch.cat([_rows(2, 6, present=4, seed=1), _rows(1, 6, present=0, seed=2)])
    types = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    expected = _attention_row_by_row(enc, obs, types)
    assert torch.allclose(enc(obs, types), expected, atol=1e-5)


@pytest.mark.parametrize("g", [1, 6])
def test_nothing_present_gives_finite_features_and_gradients(g):
    """A dead ego observes all zeros; an ego alone has no other row present."""
    net = ActorCritic(_spec())
    for obs in (torch.zeros(3, g * F), _rows(3, g, present=0)):
        obs.requires_grad_(True)
        h = net.initial_state(3)
        first = torch.ones(3, dtype=torch.bool)
        _, logp, value, _ = net.act(obs, TYPES, first, h, uniforms=torch.full((3, 1), 0.5))
        (logp.sum() + value.sum()).backward()
        assert torch.isfinite(logp).all() and torch.isfinite(value).all()
        grads = [p.grad for p in net.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads)
        net.zero_grad()


def test_an_entity_spec_needs_whole_rows():
    with pytest.raises(ValueError, match="rows of 25 features; vector_size 30"):
        _spec(vector_size=30)


def test_old_policy_and_game_descriptions_still_load():
    """Checkpoints written before the entity encoder: their dicts lack no field they need."""
    old = dict(obs_type="vector", vector_size=5, image_shape=None, n_types=1, discrete=True)
    assert PolicySpec.from_dict(old).obs_norm_size == 5
    game = GameSpec("g", "h", (0, 1), ("a", "b"), "vector", 5, None, True, 0)
    assert game.type_vocab == ("a", "b")


# --- the trainer's options -----------------------------------------------------------------


def _game(scenario: str) -> GameSpec:
    return game_spec_from_config(gigastep.make(scenario).config, scenario)


def test_auto_picks_the_entity_encoder_and_it_reads_the_entity_size():
    game = _game(ENT.format(2, 2))
    config = gigastep.make(ENT.format(2, 2)).config
    spec = policy_spec(PPOConfig(encoder="auto"), game)
    assert spec.obs_type == "entity" and spec.vector_size == config.entity_size
    assert spec.obs_norm_size == 0  # the presence flags stay 0 / 1
    assert policy_spec(PPOConfig(encoder="entity"), game) == spec


def test_the_entity_encoder_is_refused_on_vector_games():
    game = _game("identical_2_vs_2_fobs_vec_void_disc")
    with pytest.raises(ValueError, match="--encoder entity needs entity.*_ent suffix"):
        policy_spec(PPOConfig(encoder="entity"), game)


def test_the_jax_trainer_refuses_the_fine_tuning_options():
    from baselines.jax_ppo.trainer import unsupported

    assert unsupported(PPOConfig(encoder="entity")) is None  # the JAX twin below
    assert "--init-from" in unsupported(PPOConfig(init_from="x.pt"))
    assert "--agent-steps" in unsupported(PPOConfig(agent_steps=10))


def test_agent_steps_give_the_fewest_updates_that_reach_them():
    config = PPOConfig(rollout_steps=8, num_envs=4)  # 8 * 4 * 4 agents = 128 per update
    assert budget_updates(dataclasses.replace(config, agent_steps=128), 4) == 1
    assert budget_updates(dataclasses.replace(config, agent_steps=129), 4) == 2
    assert budget_updates(dataclasses.replace(config, agent_steps=1), 4) == 1
    assert budget_updates(config, 4) == config.updates  # 0: --updates


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(agent_steps=-1), "--agent-steps must be an integer >= 0"),
        (dict(init_from="a.pt", warm_start="pursuit"), "drop one of the two"),
    ],
)
def test_bad_fine_tuning_options_are_refused_before_any_compute(fields, message):
    with pytest.raises(ValueError, match=message):
        validate(PPOConfig(**fields))


# --- end to end: train on 2 vs 2, play and fine-tune at other sizes ------------------------

TINY = PPOConfig(
    scenario=ENT.format(2, 2),
    num_envs=4,
    rollout_steps=8,
    policy="gru",
    hidden=16,
    epochs=1,
    minibatches=1,
    opponent="random",
    progress=False,
    tensorboard=False,
    plots=False,
)
SHORT = {"max_episode_length": 16}  # games end quickly


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """Two updates on 2 vs 2, budgeted in agent-steps (4 * 8 * 4 = 128 per update)."""
    from baselines.train import Trainer

    out = tmp_path_factory.mktemp("entity") / "run"
    config = dataclasses.replace(TINY, agent_steps=129, out=str(out))
    trainer = Trainer(config)
    trainer.run()
    assert trainer.update == 2 and trainer.agent_steps == 256
    return out / "checkpoint.pt"


@pytest.mark.slow
@pytest.mark.parametrize("a, b", [(1, 1), (5, 5), (5, 1)])
def test_a_2v2_entity_checkpoint_plays_other_team_sizes(checkpoint, a, b):
    from gigastep.eval.matches import evaluate

    result = evaluate(str(checkpoint), "random", ENT.format(a, b), games=2, batch_size=2, **SHORT)
    assert result.games == 2


@pytest.mark.slow
def test_init_from_starts_from_the_checkpoints_weights_with_a_fresh_optimiser(checkpoint, tmp_path):
    from baselines.checkpoint import load_policy
    from baselines.train import Trainer

    config = dataclasses.replace(
        TINY, scenario=ENT.format(5, 1), init_from=str(checkpoint), out=str(tmp_path)
    )
    trainer = Trainer(config)
    trainer.start()
    trained = load_policy(checkpoint).nets[0].state_dict()
    learner = trainer.learners[0]
    for name, value in learner.net.state_dict().items():
        assert torch.equal(value, trained[name]), name
    assert not learner.opt.state  # no Adam moments yet
    assert trainer.game.type_vocab == ("default",)  # the checkpoint's one-hot, not 5v1's


@pytest.mark.slow
def test_init_from_is_refused_where_the_policy_does_not_fit(checkpoint, tmp_path):
    from baselines.train import Trainer

    vector = dataclasses.replace(
        TINY,
        scenario="identical_2_vs_2_fobs_vec_void_disc",
        init_from=str(checkpoint),
        out=str(tmp_path),
    )
    with pytest.raises(ValueError, match="does not fit.*obs_type.*'entity', 'vector'"):
        Trainer(vector)
    wider = dataclasses.replace(TINY, hidden=32, init_from=str(checkpoint), out=str(tmp_path))
    with pytest.raises(ValueError, match="does not fit.*'hidden': \\(16, 32\\)"):
        Trainer(wider)


@pytest.mark.slow
def test_the_few_shot_protocol_fine_tunes_the_entity_policy(checkpoint, tmp_path):
    from gigastep.eval.players import resolve_player
    from gigastep.eval.splits import FineTunable, evaluate_split

    split = tmp_path / "sizes.toml"
    items = "".join(
        f'[[items]]\nid = "{i}"\nrole = "{role}"\nscenario = "{ENT.format(a, b)}"\n'
        f'opponents = ["random"]\nseed = {k}\nenv = {{ max_episode_length = 16 }}\n\n'
        for k, (i, role, a, b) in enumerate([("2v2", "train", 2, 2), ("5v1", "test", 5, 1)])
    )
    split.write_text(
        f'name = "sizes-ent"\nversion = 1\nfamily = "team_sizes"\ngames = 2\n\n{items}'
    )
    player = resolve_player(str(checkpoint), "cpu")
    assert isinstance(player, FineTunable)
    result = evaluate_split(split, player, games=2, few_shot=(64,), batch_size=2)
    (test,) = [r for r in result.rows if r.role == "test"]
    shot = test.few_shot[64]
    assert shot.error == "" and shot.result is not None and shot.result.games == 2
    assert math.isfinite(shot.points)


@pytest.mark.slow
def test_finetune_trains_the_budget_and_changes_the_weights(checkpoint):
    from baselines.players import load

    player = load(torch.load(checkpoint, weights_only=True))
    config = gigastep.make(ENT.format(5, 1), **SHORT).config
    tuned = player.finetune(config, ("random",), 1, seed=0)
    assert tuned.policy.update == 1  # one update reaches one agent-step
    before, after = player.policy.nets[0].state_dict(), tuned.policy.nets[0].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert tuned.name.endswith("+finetune1")
    with pytest.raises(ValueError, match="agent_steps must be a positive integer"):
        player.finetune(config, ("random",), 0, seed=0)


# --- the JAX twin of the encoder ---------------------------------------------------------


@pytest.mark.parametrize("g", [1, 7])
def test_the_jax_entity_encoder_acts_as_pytorchs(g):
    """The same actions, log-probs, values and states from the same parameters, on rows
    with absent slots, an agent alone and a dead agent (all zeros)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from baselines.jax_ppo import policy

    spec = _spec(rows=g, core="gru")
    params = policy.init_params(spec, seed=3)
    net = ActorCritic(spec)
    net.load_state_dict(policy.params_to_torch(params))
    obs = torch.cat([_rows(3, g, present=min(2, g - 1), seed=1), torch.zeros(1, g * F)])
    obs = torch.cat([obs, _rows(2, g, present=0, seed=2)])
    n = obs.shape[0]
    types = torch.zeros(n, 2)
    types[:, 0] = 1.0
    first = torch.ones(n, dtype=torch.bool)
    h_t = net.initial_state(n)
    with torch.no_grad():
        a_t, logp_t, v_t, h_t = net.act(obs, types, first, h_t, deterministic=True)
    a_j, logp_j, v_j, h_j = policy.act(
        spec,
        params,
        jnp.asarray(obs.numpy()),
        jnp.asarray(types.numpy()),
        jnp.asarray(first.numpy()),
        policy.initial_state(spec, n),
        None,
        jax.random.key(0),
        True,
    )
    np.testing.assert_array_equal(np.asarray(a_j), a_t.numpy())
    np.testing.assert_allclose(np.asarray(logp_j), logp_t.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(v_j), v_t.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(h_j), h_t.numpy(), atol=1e-5)
    assert np.isfinite(np.asarray(logp_j)).all()


@pytest.mark.slow
def test_a_jax_entity_run_trains_and_its_checkpoint_plays_other_sizes_in_pytorch(tmp_path):
    from baselines.checkpoint import load_policy
    from baselines.jax_ppo.trainer import JaxTrainer
    from gigastep.eval.matches import evaluate

    config = dataclasses.replace(TINY, framework="jax", updates=1, out=str(tmp_path))
    JaxTrainer(config).run()
    policy = load_policy(tmp_path / "checkpoint.pt")
    assert policy.spec.obs_type == "entity" and policy.update == 1
    result = evaluate(
        str(tmp_path / "checkpoint.pt"), "random", ENT.format(5, 1), games=2, batch_size=2, **SHORT
    )
    assert result.games == 2
