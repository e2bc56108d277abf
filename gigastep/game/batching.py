"""Batched games computed where a mask is set: the machinery of the batched auto-reset.

A batched step in which a few games finish resets those few games only (`reset_where`), and
observes their last state only (`where_masked`); `select_games` then takes, game by game, the
fresh or the continuing values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from gigastep.game.xla import platform_form, varying_like

__all__ = ["autoreset_capacity", "reset_where", "select_games", "where_masked"]


def select_games(done: Any, a: Any, b: Any) -> Any:
    """The pytree `a` at the games where `done` is set, `b` elsewhere.

    `done` is () for one game or (B,) for a batch whose leading axis every leaf of `a` and `b`
    (equal structures and shapes) carries.
    """
    return jax.tree_util.tree_map(
        lambda x, y: (
            jnp.where(jnp.reshape(done, (-1,) + (1,) * (x.ndim - done.ndim)), x, y)
            if done.ndim
            else jnp.where(done, x, y)
        ),
        a,
        b,
    )


def autoreset_capacity(batch: int) -> int:
    """How many finished games the cheap path of `batched_step_autoreset` resets (static):
    one per 32 games. A step in which more games finish resets the whole batch instead."""
    return max(1, -(-batch // 32))


def where_masked(fn: Callable[..., Any], mask: jax.Array, *args: Any) -> Any:
    """`jax.vmap(fn)(*args)` at the games where `mask` (B,) is set; the other games' entries
    are unspecified (zeros, or fn's value there).

    Only the masked games are computed: none when no game is masked, the first
    `autoreset_capacity(B)` of them (gathered, computed, scattered into zeros) when few are,
    the whole batch otherwise. The choice is a conditional on the count of masked games, made
    on the CPU only (`platform_form`): XLA:GPU would read its index on the host at every call,
    so on other platforms the whole batch is computed (the masked games' values are the same).
    """
    b = mask.shape[0]
    cap = autoreset_capacity(b)
    v_fn = jax.vmap(fn)
    shapes = jax.eval_shape(v_fn, *args)

    def zeros(_: None) -> Any:
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def few(_: None) -> Any:
        (idx,) = jnp.nonzero(mask, size=cap, fill_value=b)
        # the unused slots compute a copy of the first masked game and are dropped
        take = jnp.where(idx < b, idx, idx[0])
        out = v_fn(*jax.tree_util.tree_map(lambda x: x[take], args))
        return jax.tree_util.tree_map(
            lambda full, new: full.at[idx].set(new, mode="drop"), zeros(None), out
        )

    def every(_: None) -> Any:
        return v_fn(*args)

    def alike(branch: Callable[[None], Any]) -> Callable[[None], Any]:
        # Inside shard_map every branch must vary over the same mesh axes; the zeros are built
        # without reading the inputs, so they are marked as varying like them.
        return lambda _: varying_like((mask, args), branch(None))

    def chosen(mask: jax.Array) -> Any:
        # The CPU form: a conditional on the count of masked games.
        count = jnp.sum(mask, dtype=jnp.int32)
        if cap >= b:
            return jax.lax.cond(count > 0, alike(every), alike(zeros), None)
        branch = (count > 0).astype(jnp.int32) + (count > cap).astype(jnp.int32)
        return jax.lax.switch(branch, (alike(zeros), alike(few), alike(every)), None)

    # The GPU form: the whole batch, without a conditional.
    return platform_form(mask, cpu=chosen, gpu=lambda _: alike(every)(None))


def reset_where(reset_one: Callable[[Any], Any], mask: jax.Array, keys: jax.Array) -> Any:
    """`jax.vmap(reset_one)(keys)` at the games where `mask` (B,) is set; the other games'
    entries are unspecified (zeros or a fresh game). See `where_masked`: resetting a few games
    costs a fraction of resetting the batch, since the placement loop of a batched reset runs
    until its worst game is placed (on the CPU; elsewhere the whole batch is reset)."""
    return where_masked(reset_one, mask, keys)
