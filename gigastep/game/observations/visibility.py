"""Which agents each ego sees: detections shared within its team (rules §5.1, §15 row 21)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.game.types import AgentState, EnvConfig

__all__ = ["finite_agents", "visibility"]


def finite_agents(agents: AgentState) -> jax.Array:
    """(n,) bool: agents whose x, y, z, heading and speed are all finite.

    The observations treat any other agent as seen by nobody, sharing nothing (not even its
    detections) and, as a dead ego, observing all zeros, in the JAX path and the native kernel
    alike. States built by hand are
    refused when not finite (`EnvState.create`); this defines what happens when a state
    becomes non-finite anyway (say through `dataclasses.replace`, or a huge action).
    """
    # One reduction over a stacked (5, n) array, not five `isfinite` joined elementwise: XLA on
    # the CPU duplicates an elementwise producer into every consumer fusion and recomputes it
    # per element (in the n^3 sort and the observation writer too); a reduction is stored once
    # as an (n,) mask.
    fields = jnp.stack([agents.x, agents.y, agents.z, agents.heading, agents.v])
    return jnp.all(jnp.isfinite(fields), axis=0)


def visibility(
    config: EnvConfig,
    alive: jax.Array,
    dist: jax.Array,
    detected: jax.Array,
    comm_noise: jax.Array,
    finite: jax.Array | None = None,
) -> jax.Array:
    """seen[e, i]: ego e sees agent i. (n, n) bool.

    Stochastic communication: teammate j shares with ego e iff
    clip(d_ej / R, 0, 1) <= u[e, j] (so with probability 1 - min(d/R, 1)); an alive ego always
    shares with itself, opponents and dead agents never. e sees every agent detected by a
    sharing teammate, and the sharing teammates themselves.
    Deterministic communication: e sees every agent its team detects and its alive teammates.
    A dead ego sees nothing. An agent that is not `finite` sees nothing, is seen by nobody and
    shares nothing (not even its detections, in either mode).

    Args:
        alive: (n,) bool. dist: (n, n) float32 planar distances. detected: (n, n) bool HD[i, j].
        comm_noise: (n, n) float32 uniforms [e, j].
        finite: (n,) bool, `finite_agents(agents)`; None: every agent is finite.
    """
    if finite is not None:
        alive, detected = alive & finite, detected & finite[None, :]
    teams = np.asarray(config.teams)
    same = jnp.asarray(teams[:, None] == teams[None, :])  # [e, j]
    n = config.n_agents
    if config.stochastic_comm:
        if config.communication_range > 0:
            ratio = jnp.clip(dist / np.float32(config.communication_range), 0.0, 1.0)
        else:
            ratio = jnp.where(dist > 0, 1.0, 0.0)
        shares = same & alive[None, :] & (ratio <= comm_noise)  # [e, j]
        # e sees i if a sharing teammate j detected i (HD[i, j]), or i itself shares.
        if n <= 32:
            # An AND of two bit sets over j: each row of `shares` and `detected` is packed
            # into one word by a reduction along its contiguous axis, and everything after
            # reads only those words. XLA on CPU recomputes fused elementwise producers
            # (hashes, cosines) for every element of every consumer; a product of 0/1
            # matrices does that for the transposed `detected`, without vectorisation.
            share_bits, detect_bits = _bits(shares), _bits(detected)  # (n,) uint32 each
            relayed = (share_bits[:, None] & detect_bits[None, :]) != 0
            own = (jnp.right_shift(share_bits[:, None], jnp.arange(n, dtype=jnp.uint32)) & 1) != 0
            seen = relayed | own
        else:  # one product of 0/1 matrices: past one word, bit sets need several per row
            reach = detected.T | jnp.eye(n, dtype=bool)  # [j, i]: j detects i, or j is i
            seen = jnp.dot(shares.astype(jnp.float32), reach.astype(jnp.float32)) > 0
    else:
        team1 = jnp.asarray(teams == 1)
        by_team1 = jnp.any(detected & team1[None, :], axis=1)  # [i]
        by_team0 = jnp.any(detected & ~team1[None, :], axis=1)
        by_my_team = jnp.where(team1[:, None], by_team1[None, :], by_team0[None, :])  # [e, i]
        seen = by_my_team | (same & alive[None, :])
    seen = seen & alive[:, None]
    return seen if finite is None else seen & finite[None, :]


def _bits(mask: jax.Array) -> jax.Array:
    """(n, m <= 32) bool -> (n,) uint32: row e as a bit set (bit j set iff mask[e, j])."""
    weight = jnp.left_shift(jnp.uint32(1), jnp.arange(mask.shape[1], dtype=jnp.uint32))
    return jnp.sum(jnp.where(mask, weight, jnp.uint32(0)), axis=1, dtype=jnp.uint32)
