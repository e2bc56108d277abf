"""Input checks shared by the library: each raises a clear error naming what was given and what
was expected, before any compute (shapes and dtypes only, so they also run at trace time).

A leaf module: it imports nothing from gigastep, so every other module may use it.
"""

from __future__ import annotations

import difflib
import math
import operator
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "NotAnIntegerError",
    "as_actions",
    "check_actions",
    "check_key",
    "check_keys",
    "check_positive_int",
    "check_seed",
    "check_team",
    "closest",
    "float_tuple",
]


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The `n` names in `choices` that look most like `name` (for error messages)."""
    choices = list(choices)
    found = difflib.get_close_matches(name, choices, n=n, cutoff=0.0)
    return found or choices[:n]


def check_team(team: Any, what: str = "team") -> int:
    """`team` as an int after checking that it is 0 or 1 (a bool is refused); `what` names the
    argument in the ValueError."""
    if isinstance(team, bool) or team not in (0, 1):
        raise ValueError(f"{what} must be 0 or 1, got {team!r}")
    return int(team)


class NotAnIntegerError(TypeError, ValueError):
    """A count given as a bool or a non-integer (2.0 included). Both a TypeError (its kind) and
    a ValueError (what these checks raised before they were shared), so callers catching
    either keep working."""


def check_positive_int(value: Any, name: str) -> int:
    """`value` as an int after checking that it is an integer >= 1: a `NotAnIntegerError`
    (a TypeError and a ValueError) for a bool or a non-integer, a ValueError for one below 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise NotAnIntegerError(
            f"{name} must be a positive integer, got {type(value).__name__} {value!r}"
        )
    value = operator.index(value)
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


SEED_MAX = 2**32 - 1
"""The largest seed: `jax.random.PRNGKey` keeps a seed's low 32 bits only, so seeds 0 and
2**32 (or -1 and 2**32 - 1) would play the same games."""


def check_seed(seed: Any, what: str = "seed") -> int:
    """`seed` as an int after checking that it is an integer in 0..2**32 - 1 (a bool is
    refused): a `NotAnIntegerError` for a non-integer, a ValueError outside the range, whose
    seeds would alias seeds inside it."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise NotAnIntegerError(
            f"{what} must be an integer in 0..{SEED_MAX}, got {type(seed).__name__} {seed!r}"
        )
    seed = operator.index(seed)
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(
            f"{what} must be in 0..2**32 - 1 = {SEED_MAX} (a PRNG key keeps 32 bits, so "
            f"{seed} would play the games of seed {seed % 2**32}), got {seed}"
        )
    return seed


def float_tuple(values: Any, size: int, what: str) -> tuple[float, ...]:
    """`values` as a tuple of `size` finite floats (a TypeError unless they are numbers, a
    ValueError for the wrong count or a non-finite one)."""
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be {size} numbers, got {values!r}") from None
    if len(out) != size:
        raise ValueError(f"{what} must have {size} numbers, got {len(out)}: {values!r}")
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{what} must be finite, got {values!r}")
    return out


def check_key(key: Any, what: str = "key") -> None:
    """Raise a ValueError unless `key` is one PRNG key: a typed key of shape () or a raw
    uint32 key of shape (2,)."""
    key = jnp.asarray(key) if not hasattr(key, "dtype") else key
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(
                f"{what} must be a single PRNG key, got a key array of shape {key.shape}"
            )
        return
    if key.shape != (2,) or key.dtype != jnp.uint32:
        raise ValueError(
            f"{what} must be a PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed), "
            f"uint32 of shape (2,)); got {key.dtype} of shape {key.shape}"
        )


def check_keys(keys: Any, what: str = "keys") -> None:
    """Raise a ValueError unless `keys` is a batch of PRNG keys: (B, 2) uint32 or (B,) typed."""
    keys = keys if hasattr(keys, "dtype") else jnp.asarray(keys)
    typed = jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)
    if (typed and keys.ndim != 1) or (not typed and (keys.ndim != 2 or keys.shape[-1] != 2)):
        raise ValueError(
            f"{what} must be a batch of PRNG keys, shape (B, 2) uint32 or (B,) typed keys "
            f"(e.g. jax.random.split(key, B)); got {keys.dtype} of shape {keys.shape}"
        )


def check_actions(actions: Any, n: int, discrete: bool, who: str = "") -> None:
    """Raise a clear ValueError unless `actions` fit `n` agents: int (n,) indices 0..26 when
    `discrete`, else float (n, 3) (heading, dive, throttle). Shapes and dtypes only, so it
    runs at trace time, before any compute. `who` prefixes the message (e.g. "team 0 ")."""
    shape, dtype = np.shape(actions), jnp.result_type(actions)
    if discrete:
        if shape != (n,) or not jnp.issubdtype(dtype, jnp.integer):
            raise ValueError(
                f"{who}discrete actions must be integers of shape ({n},) (one index 0..26 per "
                f"agent); got {dtype} of shape {shape}"
            )
    elif shape != (n, 3) or not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f"{who}continuous actions must be floats of shape ({n}, 3) (heading, dive, "
            f"throttle in [-1, 1] per agent); got {dtype} of shape {shape}"
        )


def as_actions(actions: Any, what: str = "actions") -> Any:
    """`actions` as one array when given as a Python list or tuple (numbers, or rows of
    numbers), else unchanged: a list crossing `jax.jit` would be a pytree of scalars, not the
    array the step expects. A ragged or non-numeric list is a ValueError naming `what`."""
    if not isinstance(actions, (list, tuple)):
        return actions
    try:
        out = np.asarray(actions)
    except ValueError:
        raise ValueError(
            f"{what} given as a Python {type(actions).__name__} must be rectangular (one number "
            f"per agent, or one row of 3 numbers per agent); got {actions!r}"
        ) from None
    if out.dtype.kind not in "iufb":
        raise ValueError(
            f"{what} given as a Python {type(actions).__name__} must hold numbers, got {actions!r}"
        )
    if out.dtype.kind == "i":
        out = out.astype(np.int32)
    elif out.dtype.kind == "f":
        out = out.astype(np.float32)
    return jnp.asarray(out)
