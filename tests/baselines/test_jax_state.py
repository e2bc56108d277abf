"""The JAX trainer's `TrainState` as named tuples keeps the leaves of the string-keyed dicts it
replaced: a checkpoint's ``jax_state`` (the state's leaves in tree order) and the compiled
update's parameters come in the same order, so checkpoints written before still resume.

The reference order is `jax.tree_util`'s own flattening of the former dicts (sorted keys,
members absent when their option is off), rebuilt here from the named fields."""

from __future__ import annotations

import dataclasses

import jax
import pytest

from baselines.config import PPOConfig
from baselines.jax_ppo.state import EnvCarry, Learner, TrainState, ValueNorm
from baselines.jax_ppo.trainer import make_setup
from baselines.jax_ppo.update import initial_state

TINY = PPOConfig(
    scenario="identical_2_vs_2_fobs_vec_void_disc",
    framework="jax",
    num_envs=4,
    rollout_steps=4,
    hidden=8,
    s5_state_dim=4,
    progress=False,
    tensorboard=False,
    plots=False,
)
OPTIONS = {
    "plain": dict(opponent="pursuit"),
    "value_norm_and_pool": dict(algo="mappo", value_norm=True, opponent="self:0.5,pool:0.5"),
    "two_learners_shaped": dict(train_both=True, env="reward_damage=1"),
}


def _as_former_dicts(tree):
    """The named tuples of `tree` as the dicts the state used to be: a field per key, and
    no key where the member is None (an option that is off)."""
    if isinstance(tree, (TrainState, Learner, EnvCarry, ValueNorm)):
        return {k: _as_former_dicts(v) for k, v in tree._asdict().items() if v is not None}
    if isinstance(tree, list):
        return [_as_former_dicts(x) for x in tree]
    return tree


@pytest.mark.parametrize("cls", [TrainState, Learner, EnvCarry, ValueNorm])
def test_state_fields_are_declared_in_the_sorted_key_order_of_the_dicts_they_replace(cls):
    assert list(cls._fields) == sorted(cls._fields)


@pytest.mark.parametrize("name", OPTIONS)
def test_the_state_flattens_to_the_leaves_of_the_former_dict_state(name, tmp_path):
    config = dataclasses.replace(TINY, out=str(tmp_path / "run"), **OPTIONS[name])
    state = initial_state(make_setup(config), 0)
    optional = {k for k in ("value_norm", "pool", "frozen", "learner1") if getattr(state, k)}
    if state.env.unshaped is not None:
        optional.add("unshaped")
    want = {
        "plain": set(),
        "value_norm_and_pool": {"value_norm", "pool", "frozen"},
        "two_learners_shaped": {"learner1", "unshaped"},
    }[name]
    assert optional == want
    ours = jax.tree_util.tree_leaves(state)
    former = jax.tree_util.tree_leaves(_as_former_dicts(state))
    assert len(ours) == len(former)
    assert all(a is b for a, b in zip(ours, former, strict=True))


def test_learner_parts_read_and_replace_their_own_fields(tmp_path):
    config = dataclasses.replace(TINY, out=str(tmp_path / "run"), **OPTIONS["two_learners_shaped"])
    state = initial_state(make_setup(config), 0)
    zero, one = state.learner(0), state.learner(1)
    assert zero.params is state.params and one is state.learner1
    assert zero.params is not one.params
    swapped = state.with_learner(0, one).with_learner(1, zero)
    assert swapped.params is one.params and swapped.learner1 is zero
    assert swapped.env is state.env and swapped.key is state.key


def test_the_second_learner_of_a_one_learner_state_is_refused(tmp_path):
    config = dataclasses.replace(TINY, out=str(tmp_path / "run"), **OPTIONS["plain"])
    state = initial_state(make_setup(config), 0)
    with pytest.raises(ValueError, match="one learner"):
        state.learner(1)
