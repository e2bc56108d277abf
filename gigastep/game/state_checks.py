"""Checks that a value is one game, or one batch of games, of a config (shapes only).

They run at trace time, before any compute, and name what was given and what was expected
(the batched or single form to use instead). The checks of plain values (keys, actions,
teams) are in `gigastep._util.checks`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gigastep._util import checks as _checks
from gigastep.game.types import EnvConfig, EnvState

__all__ = ["check_batch", "check_batched_state", "check_single_state"]


def _games(batch: tuple[int, ...]) -> str:
    count = int(np.prod(batch))
    shape = f", shape {batch}" if len(batch) > 1 else ""
    return f"{count} game{'s' if count != 1 else ''}{shape}"


def _state_batch(config: EnvConfig, state: object, what: str) -> tuple[int, ...]:
    """The batch shape of `state` (() for one game); a TypeError unless it is an `EnvState`,
    a ValueError unless its games have this config's agent count."""
    if not isinstance(state, EnvState):
        raise TypeError(
            f"{what} must be a gigastep EnvState (as returned by reset or v_reset), "
            f"got {type(state).__name__}"
        )
    shape = tuple(np.shape(state.agents.x))
    if not shape or shape[-1] != config.n_agents:
        raise ValueError(
            f"{what} holds {shape[-1] if shape else 0} agents per game but this game has "
            f"{config.n_agents} (a state of another scenario?)"
        )
    return shape[:-1]


def check_single_state(config: EnvConfig, state: object, batched_form: str = "v_step") -> None:
    """Raise a clear error unless `state` is one game of `config` (shapes only: trace time).

    `batched_form` names the batched function to suggest for a batch of games."""
    batch = _state_batch(config, state, "state")
    if batch:
        raise ValueError(
            f"this state is batched ({_games(batch)}); use {batched_form} for a batch of games, "
            "or index one game out of it"
        )


def check_batch(
    config: EnvConfig, states: object, actions: Any, keys: Any, single_form: str = "step"
) -> int:
    """The batch size B of `states` after checking that they are a batch of games of `config`
    (one leading axis) and that `actions` and `keys` hold B games too (shapes only)."""
    batch = _state_batch(config, states, "states")
    if not batch:
        raise ValueError(
            f"this state is a single game (no batch axis); use {single_form} for one game, "
            "or v_reset(jax.random.split(key, B)) to start a batch"
        )
    if len(batch) != 1:
        raise ValueError(f"states must have one batch axis, got batch shape {batch}")
    b = batch[0]
    for what, value in (("actions", actions), ("keys", keys)):
        shape = np.shape(value)
        if not shape or shape[0] != b:
            got = f"{shape[0]} games (shape {shape})" if shape else f"a scalar {value!r}"
            raise ValueError(f"states hold {b} games but {what} hold {got}")
    _checks.check_keys(keys)
    return b


def check_batched_state(config: EnvConfig, states: object, single_form: str) -> int:
    """The batch size B of `states` after checking that they are a batch of games of
    `config` with one leading axis (shapes only); `single_form` names the one-game form."""
    batch = _state_batch(config, states, "states")
    if len(batch) != 1:
        hint = f"; use {single_form} for one game" if not batch else ""
        raise ValueError(f"states must have one batch axis, got batch shape {batch}{hint}")
    return batch[0]
