"""Who the JAX trainer's learner plays: frozen opponents (`baselines.jax_ppo.frozen`: the
pool's ring and draws, the seats that keep an episode with the snapshot it started with,
checked against the PyTorch trainer's `PoolPlayer` episode by episode, checkpoint-file
opponents) and `--train-both` (two learners, one per team); runs with each resume exactly.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from baselines.checkpoint import load_checkpoint, load_policy
from baselines.jax_ppo import convert, frozen, policy, running
from baselines.jax_ppo.trainer import JaxTrainer
from baselines.matchmaking import PoolPlayer
from baselines.normalize import ObsNormalizer
from baselines.policies import ActorCritic, PolicySpec
from tests.baselines.test_jax_ppo import TINY, _spec, _tiny

# ------------------------------------------------------------------------------------------
# The pool
# ------------------------------------------------------------------------------------------


def _member(value: float) -> tuple[dict, dict]:
    params = {"w": jnp.full((2,), value)}
    norm = {"count": jnp.asarray(value), "mean": jnp.zeros(3), "m2": jnp.zeros(3)}
    return params, norm


def test_the_pool_keeps_the_initial_policy_then_the_latest_members_in_a_ring():
    pool = frozen.pool_init(*_member(0.0), capacity=3)
    assert int(pool["size"]) == 1
    assert pool["update"].tolist() == [0, -1, -1]
    # pool_every = 2: updates 2, 4, 6 are added; 6 overwrites the oldest (the initial policy)
    for u in range(1, 7):
        pool = frozen.pool_add(pool, *_member(float(u)), u, jnp.asarray(u % 2 == 0))
    assert pool["update"].tolist() == [6, 2, 4]
    assert pool["members"]["params"]["w"][:, 0].tolist() == [6.0, 2.0, 4.0]
    assert pool["members"]["obs_norm"]["count"].tolist() == [6.0, 2.0, 4.0]
    assert int(pool["size"]) == 3 and int(pool["next"]) == 1


def test_a_draw_is_uniform_over_the_members_in_the_pool_only():
    pool = frozen.pool_init(*_member(0.0), capacity=4)
    pool = frozen.pool_add(pool, *_member(1.0), 1, jnp.asarray(True))  # 2 of 4 slots used
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    drawn = jax.vmap(lambda k: frozen.draw(pool, k)["params"]["w"][0])(keys)
    values, counts = np.unique(np.asarray(drawn), return_counts=True)
    assert values.tolist() == [0.0, 1.0]  # never an empty slot
    # binomial(4000, 1/2): sd 0.0079, the bounds are 6 sd away
    assert 0.45 < counts[1] / 4000 < 0.55


def test_seat_count_leaves_a_seat_free_for_episodes_up_to_the_time_limit():
    # an episode of <= L steps started in rollout r is over before rollout r + ceil(L/T) + 1
    assert frozen.seat_count(64, 32) == 3
    assert frozen.seat_count(65, 32) == 4
    assert frozen.seat_count(10, 32) == 2
    assert frozen.seat_count(10_000, 32) == frozen.MAX_SEATS
    assert frozen.seat_count(None, 32) == frozen.MAX_SEATS


# ------------------------------------------------------------------------------------------
# Seats: an episode keeps its snapshot, as in the PyTorch trainer
# ------------------------------------------------------------------------------------------


def _snapshot(spec, seed: int) -> tuple[dict, dict]:
    """(PyTorch pool snapshot, JAX member) of the same fresh policy and statistics."""
    torch.manual_seed(seed)
    net = ActorCritic(spec)
    norm = ObsNormalizer(spec.vector_size, "cpu", True)
    norm.add(torch.randn(50, spec.vector_size) * (seed + 1), torch.ones(50, dtype=torch.bool))
    norm.commit()
    stats = norm.state_dict()
    snap = {"model": net.state_dict(), "obs_norm": stats, "update": seed}
    member = {
        "params": policy.params_from_torch(net.state_dict()),
        "obs_norm": convert.moments_from_torch(stats),
    }
    return snap, member


def test_seats_follow_pytorchs_pool_player_and_never_change_mid_episode():
    spec = _spec("mlp", discrete=True)
    games, rollouts, steps = 6, 7, 3
    rng = np.random.default_rng(0)
    first = rng.random((rollouts, steps, games)) < 0.3
    first[0, 0] = True  # every game starts at the first step
    rows = np.arange(games)  # one agent per game is enough for the seats
    types_np = np.eye(spec.n_types, dtype=np.float32)[np.zeros(games, int)]
    pool_player = PoolPlayer("frozen0", spec, list(rows), torch.from_numpy(types_np), "cpu", True)
    f = frozen.Frozen(
        "frozen0", "pool", spec, rows, rows, np.zeros(games, int), seats=frozen.MAX_SEATS
    )
    snaps = [_snapshot(spec, r) for r in range(rollouts)]
    part = frozen.initial(f, snaps[0][1])
    h = pool_player.h
    obs = rng.normal(size=(games, spec.vector_size)).astype(np.float32)
    started = np.full(games, -1)  # the rollout each row's episode started in
    for r in range(rollouts):
        snap, member = snaps[r]
        pool_player.begin_rollout(snap, torch.from_numpy(first[r, 0]))
        part = frozen.begin_rollout(part, member, jnp.asarray(first[r, 0]))
        for t in range(steps):
            f_t = first[r, t]
            started = np.where(f_t, r, started)
            _, _, _, h = pool_player.act(
                torch.from_numpy(obs), torch.from_numpy(types_np), torch.from_numpy(f_t), h
            )
            key = jax.random.PRNGKey(r * steps + t)
            _, part = frozen.act(f, part, jnp.asarray(obs), jnp.asarray(f_t), key, True)
            assert np.asarray(part["seat"]).tolist() == pool_player.seat.tolist(), (r, t)
        # every row is played by the seat holding the snapshot of its episode's start
        seat_updates = [pool_player.seats[s].source for s in pool_player.seat.tolist()]
        assert seat_updates == started.tolist()


def test_a_pool_part_with_one_member_in_every_seat_acts_as_that_policy():
    spec = _spec("gru", discrete=False)
    n, steps = 5, 6
    _, member = _snapshot(spec, 3)
    f = frozen.Frozen("frozen0", "pool", spec, np.arange(n), np.arange(n), np.ones(n, int), seats=3)
    part = frozen.initial(f, member)
    rng = np.random.default_rng(1)
    types = jax.nn.one_hot(jnp.ones(n, int), spec.n_types)
    h = policy.initial_state(spec, n)
    for t in range(steps):
        if t in (0, 2, 4):  # a new draw (of the same member) each "rollout"
            part = frozen.begin_rollout(part, member, jnp.asarray(rng.random(n) < 0.5) | (t == 0))
        raw = jnp.asarray(rng.normal(size=(n, spec.vector_size)), jnp.float32)
        first = jnp.asarray(rng.random(n) < 0.3) | (t == 0)
        key = jax.random.PRNGKey(t)
        got, part = frozen.act(f, part, raw, first, key, True)
        obs = running.normalize(member["obs_norm"], raw, True)
        want, h = policy.sample(spec, member["params"], obs, types, first, h, key)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(part["h"]), np.asarray(h), rtol=1e-6, atol=1e-6)


def test_vmapped_runs_act_as_each_run_alone_with_one_branch_per_seat():
    spec = _spec("gru", discrete=True)
    n = 4
    members = [_snapshot(spec, s)[1] for s in (1, 2, 3)]
    f = frozen.Frozen(
        "frozen0", "pool", spec, np.arange(n), np.arange(n), np.zeros(n, int), seats=3
    )
    rng = np.random.default_rng(2)
    parts, inputs = [], []
    for run in range(2):
        part = frozen.initial(f, members[0])
        if run == 1:  # its rows 0 and 2 play on in seat 0, so its new episodes get seat 1
            part = dict(part, seat=jnp.zeros(n, jnp.int32))
        part = frozen.begin_rollout(part, members[run + 1], jnp.asarray([False, True] * 2))
        assert int(part["incoming"]) == run
        parts.append(part)
        raw = jnp.asarray(rng.normal(size=(n, spec.vector_size)), jnp.float32)
        first = jnp.asarray([True] * n if run == 0 else [False, True] * 2)
        inputs.append((raw, first, jax.random.PRNGKey(run)))
    alone = [frozen.act(f, p, *x, True) for p, x in zip(parts, inputs, strict=True)]
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *parts)
    xs = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *inputs)

    def one(part, raw, first, key):
        return frozen.act(f, part, raw, first, key, True, runs="runs")

    together = jax.vmap(one, axis_name="runs")(stacked, *xs)
    assert np.asarray(together[1]["seat"]).tolist() == [[0] * 4, [0, 1, 0, 1]]
    for run, (actions, part) in enumerate(alone):
        np.testing.assert_array_equal(np.asarray(together[0][run]), np.asarray(actions))
        np.testing.assert_allclose(
            np.asarray(together[1]["h"][run]), np.asarray(part["h"]), atol=1e-6
        )
        np.testing.assert_array_equal(
            np.asarray(together[1]["seat"][run]), np.asarray(part["seat"])
        )


# ------------------------------------------------------------------------------------------
# Runs with pool and checkpoint-file opponents
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory) -> JaxTrainer:
    """4 updates with pool opponents (a snapshot every 2 updates, 2 kept; checkpoints at 2
    and 4)."""
    out = tmp_path_factory.mktemp("pool") / "run"
    config = dataclasses.replace(
        TINY, out=str(out), opponent="self:0.5,pool:0.5", pool_every=2, pool_size=2
    )
    trainer = JaxTrainer(config)
    trainer.run()
    return trainer


@pytest.mark.slow
def test_pool_members_are_the_learner_after_every_pool_every_updates(pool_run):
    pool = jax.device_get(pool_run.state.pool)
    # ring of 2: the initial policy (update 0), then 2 in slot 1, then 4 over the initial one
    assert pool["update"].tolist() == [4, 2]
    out = Path(pool_run.config.out)
    for slot, name in ((0, "checkpoint_000004.pt"), (1, "checkpoint_000002.pt")):
        model = load_checkpoint(out / name)["learners"][0]["model"]
        for k, v in model.items():
            np.testing.assert_array_equal(pool["members"]["params"][k][slot], v.numpy(), err_msg=k)


@pytest.fixture(scope="module")
def file_run(pool_run, tmp_path_factory) -> Path:
    """4 updates against the pool and the pool run's checkpoint as a file opponent."""
    out = tmp_path_factory.mktemp("file") / "run"
    opponent = f"pool:0.5,{Path(pool_run.config.out) / 'checkpoint.pt'}:0.5"
    config = dataclasses.replace(TINY, out=str(out), opponent=opponent, pool_every=1, pool_size=3)
    JaxTrainer(config).run()
    return out


@pytest.mark.slow
def test_a_file_opponent_plays_the_files_policy(pool_run, file_run):
    config = dataclasses.replace(
        TINY,
        out=str(file_run.parent / "unused"),
        opponent=f"{Path(pool_run.config.out) / 'checkpoint.pt'}",
    )
    player = JaxTrainer(config).setup.frozen[0]
    want = load_checkpoint(Path(pool_run.config.out) / "checkpoint.pt")["learners"][0]
    assert player.kind == "file" and player.params is not None
    for k, v in want["model"].items():
        np.testing.assert_array_equal(player.params[k], v.numpy(), err_msg=k)
    assert player.obs_norm is not None
    np.testing.assert_allclose(player.obs_norm["mean"], want["obs_norm"]["mean"].numpy(), rtol=1e-6)


@pytest.mark.slow
def test_a_run_with_pool_and_file_opponents_resumes_exactly(file_run, tmp_path):
    out = tmp_path / "resumed"
    shutil.copytree(file_run, out)
    shutil.copyfile(out / "checkpoint_000002.pt", out / "checkpoint.pt")
    config = load_checkpoint(file_run / "checkpoint.pt")["config"]
    resumed = dataclasses.replace(
        TINY, out=str(out), resume=True, opponent=config["opponent"], pool_every=1, pool_size=3
    )
    JaxTrainer(resumed).run()
    mine, ref = load_checkpoint(out / "checkpoint.pt"), load_checkpoint(file_run / "checkpoint.pt")
    assert mine["update"] == ref["update"] == 4
    assert len(mine["jax_state"]) == len(ref["jax_state"])
    for a, b in zip(mine["jax_state"], ref["jax_state"], strict=True):
        assert torch.equal(a, b)


def test_a_file_opponent_of_another_architecture_plays_with_its_own(tmp_path):
    from baselines.train import Trainer

    other = _tiny(
        tmp_path, framework="torch", updates=1, policy="gru", hidden=8, out=str(tmp_path / "h8")
    )
    Trainer(other).run()
    path = tmp_path / "h8" / "checkpoint.pt"
    trainer = JaxTrainer(_tiny(tmp_path, opponent=f"{path}:0.5,pursuit:0.5", updates=1))
    trainer.run()
    assert load_checkpoint(tmp_path / "run")["update"] == 1
    # A checkpoint of other observations (a 5 vs 5 game's vector) is refused, naming it.
    Trainer(
        _tiny(
            tmp_path,
            framework="torch",
            updates=1,
            scenario="identical_5_vs_5_fobs_vec_void_disc",
            out=str(tmp_path / "5v5"),
        )
    ).run()
    wrong = tmp_path / "5v5" / "checkpoint.pt"
    with pytest.raises(ValueError, match=r"observations or actions differ .*'vector_size'"):
        JaxTrainer(_tiny(tmp_path, opponent=str(wrong), out=str(tmp_path / "x")))
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------
# --train-both: one learner per team
# ------------------------------------------------------------------------------------------

ASYMMETRIC = "identical_5_vs_1_fobs_vec_void_disc"


def test_train_both_starts_from_pytorchs_two_initial_networks(tmp_path):
    from baselines.train import Trainer

    config = _tiny(tmp_path, scenario=ASYMMETRIC, num_envs=4, train_both=True, opponent="auto")
    trainer = Trainer(dataclasses.replace(config, framework="torch"))
    spec = trainer.spec
    for i, learner in enumerate(trainer.learners):
        got = policy.init_params(spec, config.seed, skip=i)
        for k, v in learner.net.state_dict().items():
            if k not in policy.BUFFERS:
                np.testing.assert_array_equal(got[k], v.numpy(), err_msg=f"learner{i} {k}")


@pytest.fixture(scope="module")
def both_run(tmp_path_factory) -> Path:
    """4 updates of --train-both in a 5 vs 1 game (checkpoints at 2 and 4)."""
    out = tmp_path_factory.mktemp("both") / "run"
    config = dataclasses.replace(
        TINY, out=str(out), scenario=ASYMMETRIC, num_envs=4, train_both=True, opponent="auto"
    )
    JaxTrainer(config).run()
    return out


@pytest.mark.slow
def test_train_both_trains_one_learner_per_team_and_logs_both(both_run):
    ckpt = load_checkpoint(both_run / "checkpoint.pt")
    learners = ckpt["learners"]
    assert [(x["name"], x["team"]) for x in learners] == [("learner0", 0), ("learner1", 1)]
    for i, learner in enumerate(learners):
        start = policy.init_params(PolicySpec.from_dict(ckpt["policy_spec"]), 0, skip=i)
        moved = [
            k
            for k, v in learner["model"].items()
            if k in start and not np.array_equal(start[k], v.numpy())
        ]
        assert moved, f"learner{i} did not train"
        # the optimiser state is its own: Adam's step count is the number of minibatch steps
        steps = {int(s["step"]) for s in learner["optimizer"]["state"].values()}
        assert steps == {4 * TINY.epochs * TINY.minibatches}
    rows = [json.loads(x) for x in (both_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        for name in ("policy_loss", "value_loss", "entropy", "grad_norm", "epochs"):
            assert r[name] is not None and r[f"{name}_team1"] is not None
        assert r["games/learner"] is not None
    # the file plays either team as a PyTorch player
    loaded = load_policy(both_run / "checkpoint.pt")
    assert sorted(loaded.teams) == [0, 1]


@pytest.mark.slow
def test_a_train_both_run_resumes_exactly(both_run, tmp_path):
    out = tmp_path / "resumed"
    shutil.copytree(both_run, out)
    shutil.copyfile(out / "checkpoint_000002.pt", out / "checkpoint.pt")
    config = dataclasses.replace(
        TINY,
        out=str(out),
        resume=True,
        scenario=ASYMMETRIC,
        num_envs=4,
        train_both=True,
        opponent="auto",
    )
    JaxTrainer(config).run()
    mine, ref = load_checkpoint(out / "checkpoint.pt"), load_checkpoint(both_run / "checkpoint.pt")
    assert mine["update"] == ref["update"] == 4
    for a, b in zip(mine["jax_state"], ref["jax_state"], strict=True):
        assert torch.equal(a, b)
