"""Frozen opponents inside the JAX trainer's compiled update: checkpoint files and past
snapshots of the learner (the pool), the twins of `baselines.matchmaking.FrozenPlayer`,
`PoolPlayer` and `OpponentPool`.

Who plays where is the PyTorch trainer's match plan (`baselines.matchmaking.make_plan`): the
same slices and the same `frozen<i>` players on the same rows. Only where their state lives
differs: everything a frozen player needs is in the `TrainState` pytree (under ``frozen``
and ``pool``), so `--seeds K` vmaps it and a checkpoint resumes it exactly.

A checkpoint-file player acts with the file's parameters and observation statistics (its
first learner, as the PyTorch trainer takes it) and keeps its recurrent state across
rollouts, restarted at each episode's start.

The pool is a ring of `pool_size` members (parameters and observation statistics): the
initial policy is the first, and the learner after every `pool_every`-th update is added,
overwriting the oldest once the ring is full (the members are the PyTorch pool's; the
order they are kept in differs, which a uniform draw does not see). Each of the
`pool_players` parts of the pool slice draws one member uniformly per rollout. As with
`PoolPlayer`, an episode is played to its end by the member drawn when it started, with its
recurrent state: a part holds `seats` (copies of members); at a rollout's start the drawn
member is copied into a seat that no unfinished episode uses, and every episode that starts
during the rollout is played from that seat. On the CPU each step runs only the seats in use
(a `lax.cond` per seat; with `--seeds` > 1, the seats that any of the vmapped runs uses); on
GPUs, where XLA reads a conditional's index on the host, every seat runs (the same actions).

How many seats: an episode of at most L steps that starts in rollout r has ended before
rollout r + ceil(L / T) + 1 starts (T: `rollout_steps`), so ceil(L / T) + 1 seats always
leave one free (`seat_count`, capped at `MAX_SEATS`). When every seat is in use (only
possible beyond the cap, or in a game without a time limit), the episodes that start in
this rollout join the previous rollout's seat: no episode ever changes its opponent; that
rollout just adds no new draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.game.xla import platform_form

from ..policies import PolicySpec
from . import policy, running

__all__ = [
    "MAX_SEATS",
    "Frozen",
    "act",
    "begin_rollout",
    "draw",
    "initial",
    "pool_add",
    "pool_init",
    "seat_count",
]

MAX_SEATS = 32
"""The most seats a pool part holds (see the module doc): enough for the default time limit
(500 steps) down to rollouts of 17 steps."""


@dataclass(frozen=True, eq=False)
class Frozen:
    """A frozen player of the plan: its kind, the policy it acts with and its rows."""

    name: str
    """`frozen<i>`, as in the plan."""
    kind: str
    """"pool" or "file"."""
    spec: PolicySpec
    """The architecture it acts with (a file's own; the run's for the pool)."""
    rows: np.ndarray
    """[N] int: its rows of the flattened [B * n] batch."""
    row_game: np.ndarray
    row_type: np.ndarray
    """[N] int: each row's index in the run's type vocabulary."""
    seats: int = 1
    """Pool: the part's seats (`seat_count`)."""
    source: str | None = None
    """File: the checkpoint path."""
    params: dict | None = None
    """File: the parameters (host arrays)."""
    obs_norm: dict | None = None
    """File: the observation statistics (count, mean, m2)."""


def seat_count(max_episode_length: int | None, rollout_steps: int) -> int:
    """Seats that always leave one free: ceil(L / T) + 1, at most `MAX_SEATS`."""
    if max_episode_length is None:
        return MAX_SEATS
    return min(math.ceil(max_episode_length / rollout_steps) + 1, MAX_SEATS)


def _copies(tree, k: int):
    """k stacked copies of every leaf of `tree`."""
    return jax.tree_util.tree_map(lambda x: jnp.repeat(jnp.asarray(x)[None], k, axis=0), tree)


def _index(tree, i):
    return jax.tree_util.tree_map(
        lambda x: jax.lax.dynamic_index_in_dim(x, i, keepdims=False), tree
    )


# ------------------------------------------------------------------------------------------
# The pool
# ------------------------------------------------------------------------------------------


def pool_init(params: policy.Params, obs_norm: dict, capacity: int) -> dict:
    """A pool holding the initial policy (`params`, `obs_norm`) as its one member."""
    member = {"params": params, "obs_norm": obs_norm}
    return {
        "members": _copies(member, capacity),
        "update": jnp.full(capacity, -1, jnp.int32).at[0].set(0),
        "size": jnp.ones((), jnp.int32),
        "next": jnp.asarray(1 % capacity, jnp.int32),
    }


def pool_add(pool: dict, params: policy.Params, obs_norm: dict, update, add) -> dict:
    """The pool with (params, obs_norm) of `update` added where `add` (a traced bool),
    overwriting the oldest member when full."""
    capacity = pool["update"].shape[0]
    i = pool["next"]
    member = {"params": params, "obs_norm": obs_norm}
    new = {
        "members": jax.tree_util.tree_map(lambda m, x: m.at[i].set(x), pool["members"], member),
        "update": pool["update"].at[i].set(jnp.asarray(update, jnp.int32)),
        "size": jnp.minimum(pool["size"] + 1, capacity),
        "next": (i + 1) % capacity,
    }
    return jax.tree_util.tree_map(lambda a, b: jnp.where(add, a, b), new, pool)


def draw(pool: dict, key: jax.Array) -> dict:
    """One member drawn uniformly from those in the pool."""
    return _index(pool["members"], jax.random.randint(key, (), 0, pool["size"]))


# ------------------------------------------------------------------------------------------
# Players
# ------------------------------------------------------------------------------------------


def initial(f: Frozen, member: dict | None = None) -> dict:
    """The state of frozen player `f` at the start of a run (`member`: the pool's first, for
    a pool part)."""
    n = len(f.rows)
    h = policy.initial_state(f.spec, n)
    if f.kind == "file":
        assert f.params is not None and f.obs_norm is not None
        params = {k: jnp.asarray(v) for k, v in f.params.items()}
        norm = {k: jnp.asarray(v, jnp.float32) for k, v in f.obs_norm.items()}
        return {"params": params, "obs_norm": norm, "h": h}
    assert member is not None
    return {
        "seats": _copies(member, f.seats),
        "seat": jnp.full(n, -1, jnp.int32),
        "incoming": jnp.zeros((), jnp.int32),
        "h": h,
    }


def begin_rollout(part: dict, member: dict, first: jax.Array) -> dict:
    """A pool part at a rollout's start: `member` copied into a seat that no unfinished
    episode uses (`first` [N] bool: the rows whose episode starts at the rollout's first
    step), which becomes the seat of the episodes that start during the rollout."""
    k = jax.tree_util.tree_leaves(part["seats"])[0].shape[0]
    playing = ~first & (part["seat"] >= 0)
    busy = jnp.zeros(k, bool).at[jnp.where(playing, part["seat"], k)].set(True, mode="drop")
    free = ~busy
    load = free.any()
    incoming = jnp.where(load, jnp.argmax(free), part["incoming"]).astype(jnp.int32)
    loaded = jax.tree_util.tree_map(
        lambda s, x: s.at[incoming].set(jnp.where(load, x, s[incoming])), part["seats"], member
    )
    return dict(part, seats=loaded, incoming=incoming)


def act(f: Frozen, player: dict, raw, first, key, norm_obs: bool, runs: str | None = None):
    """(actions, player) of one step of frozen player `f` on its rows' raw observations
    `raw` [N, L] (`first` [N] bool: the rows whose episode starts at this step).

    `runs`: the name of the `vmap` axis over runs (`--seeds`), if any. A seat then runs when
    any run uses it (one predicate for all runs, so `lax.cond` stays a branch instead of
    becoming a select that runs every seat)."""
    types = jax.nn.one_hot(jnp.asarray(f.row_type), f.spec.n_types, dtype=jnp.float32)
    h = player["h"]
    if f.kind == "file":
        obs = running.normalize(player["obs_norm"], raw, norm_obs)
        actions, h = policy.sample(f.spec, player["params"], obs, types, first, h, key)
        return actions, dict(player, h=h)
    seat = jnp.where(first, player["incoming"], player["seat"])
    axis = policy.state_axis(f.spec)
    k = jax.tree_util.tree_leaves(player["seats"])[0].shape[0]
    shape = () if f.spec.discrete else (3,)
    dtype = jnp.int32 if f.spec.discrete else jnp.float32

    def one_seat(s, carry):
        actions, h_out = carry
        mine = seat == s

        def run(_):
            member = _index(player["seats"], s)
            obs = running.normalize(member["obs_norm"], raw, norm_obs)
            return policy.sample(f.spec, member["params"], obs, types, first, h, key)

        def idle(_):
            return jnp.zeros((len(f.rows), *shape), dtype), h

        used = mine.any()
        if runs is not None:
            used = jax.lax.psum(used.astype(jnp.int32), runs) > 0
        # On the CPU the seat runs only when used; elsewhere (XLA:GPU would read the branch
        # index on the host) it always runs, and the rows of an unused seat are not kept.
        a, h_s = platform_form(
            used,
            cpu=lambda used: jax.lax.cond(used, run, idle, None),
            gpu=lambda used: run(None),
        )
        keep = mine.reshape((-1,) + (1,) * (a.ndim - 1))
        actions = jnp.where(keep, a.astype(dtype), actions)
        rows = [1] * h.ndim
        rows[axis] = -1
        h_out = jnp.where(mine.reshape(rows), h_s, h_out)
        return actions, h_out

    start = (jnp.zeros((len(f.rows), *shape), dtype), h)
    actions, h = jax.lax.fori_loop(0, k, one_seat, start)
    return actions, dict(player, seat=seat, h=h)
