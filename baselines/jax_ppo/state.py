"""The JAX trainer's state as named pytrees: `TrainState`, one `Learner`'s part, the games'
`EnvCarry` and the value normalisation's `ValueNorm`.

They are `typing.NamedTuple`s rather than `gigastep._util.pytree` dataclasses because a
named tuple flattens in the order its fields are declared, which makes the leaf order
something the code states: the carries of `baselines.jax_ppo.update`'s scans keep the
order of the positional tuples they name, and the fields below are declared in
alphabetical order, the order in which `jax.tree_util` flattens the string-keyed dicts the
state used to be. So the compiled update takes the same parameters in the same order, and a
checkpoint's ``jax_state`` (the state's leaves in tree order, `baselines.jax_ppo.convert`)
is the same list of arrays: checkpoints written before resume, and ones written now read
the same. A test holds every state type's fields sorted.

A member that only some configs have (``value_norm`` with `--value-norm`, ``pool`` with a
pool opponent, ``frozen`` with frozen opponents, ``learner1`` with `--train-both`,
``unshaped`` with reward shaping) is None otherwise: None is a pytree without leaves, so
those configs' programs and checkpoints hold exactly the arrays they held before.

Shapes: B games of n agents, N rows of the learner (`Setup.rows`), L observation features,
S state-vector features.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from gigastep.game.types import EnvState

from .policy import Params

__all__ = ["EnvCarry", "Learner", "Moments", "TrainState", "ValueNorm"]

Moments = dict[str, jax.Array]
"""Running moments (`baselines.jax_ppo.running`): ``count`` (), ``mean`` [F], ``m2`` [F]."""


class ValueNorm(NamedTuple):
    """`--value-norm`'s statistics of the returns (`update.value_norm_merge`), float32 ()."""

    mean: jax.Array
    var: jax.Array
    weight: jax.Array
    """The debiasing weight: 0 before the first update."""


class EnvCarry(NamedTuple):
    """The B games between two steps: where the next step starts from (carried by the
    rollout's scan, and from one update to the next)."""

    dead: jax.Array
    """[B, n] bool: the agents done at the last step."""
    first: jax.Array
    """[B] bool: the games whose episode starts at the next step."""
    key: jax.Array
    """The environment's PRNG key (split at every step, as `TorchVecEnv`'s)."""
    obs: jax.Array
    """[B, n, L] float32: the observations the next actions are chosen on."""
    states: EnvState
    """The games' states (leading axis B)."""
    sv: jax.Array
    """[B, 2, S] float32: each team's state vector (S = 0 without a central critic)."""
    unshaped: jax.Array | None
    """[B, n] float32: each game's unshaped return so far, with reward shaping
    (`Setup.score`); else None."""


class Learner(NamedTuple):
    """One learner's part of the `TrainState`: its network, optimiser and statistics, and
    where its rows' trajectories stand."""

    h: jax.Array
    """The recurrent state of the learner's N rows (`policy.initial_state`)."""
    obs_norm: Moments
    """Observation statistics ([L] features)."""
    opt: Any
    """The optax state of `update.make_optimizer` (clipping, Adam)."""
    params: Params
    """The network, keyed by the PyTorch `state_dict` names."""
    returns: jax.Array
    """[N] float32: the discounted returns the reward scale is taken from."""
    rew_norm: Moments
    """Statistics of those returns ([1] feature)."""
    state_norm: Moments
    """State-vector statistics ([S] features)."""
    value_norm: ValueNorm | None
    """With `--value-norm`; else None."""


class TrainState(NamedTuple):
    """Everything one run carries from update to update (`update.make_update`): learner 0's
    part at the top level (the `Learner` fields), the games, the keys and counters, and the
    optional members (see the module doc). `learner` and `with_learner` read and replace a
    learner's part."""

    env: EnvCarry
    frozen: list[dict] | None
    """With frozen opponents: each player's state (`baselines.jax_ppo.frozen.initial`)."""
    h: jax.Array
    key: jax.Array
    """The trainer's own PRNG key (actions, permutations)."""
    learner1: Learner | None
    """With `--train-both`: learner 1's part."""
    obs_norm: Moments
    opt: Any
    params: Params
    pool: dict | None
    """With pool opponents: the snapshot ring (`baselines.jax_ppo.frozen.pool_init`)."""
    returns: jax.Array
    rew_norm: Moments
    state_norm: Moments
    update: jax.Array
    """() int32: updates done."""
    value_norm: ValueNorm | None

    def learner(self, i: int) -> Learner:
        """Learner i's part (0: the top-level fields; 1: ``learner1``)."""
        if i == 0:
            return Learner(**{k: getattr(self, k) for k in Learner._fields})
        if self.learner1 is None:
            raise ValueError(f"learner {i}: this state holds one learner (no --train-both)")
        return self.learner1

    def with_learner(self, i: int, part: Learner) -> TrainState:
        """This state with learner i's part replaced by `part`."""
        return self._replace(**part._asdict()) if i == 0 else self._replace(learner1=part)
