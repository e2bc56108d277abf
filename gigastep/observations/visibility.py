"""Which agents each ego sees: detections shared within its team (SPEC §5.1, §15 row 21)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from gigastep.types import EnvConfig

__all__ = ["visibility"]


def visibility(config: EnvConfig, alive, dist, detected, comm_noise):
    """seen[e, i]: ego e sees agent i. (n, n) bool.

    Stochastic communication: teammate j shares with ego e iff
    clip(d_ej / R, 0, 1) <= u[e, j] (so with probability 1 - min(d/R, 1)); an alive ego always
    shares with itself, opponents and dead agents never. e sees every agent detected by a
    sharing teammate, and the sharing teammates themselves.
    Deterministic communication: e sees every agent its team detects and its alive teammates.
    A dead ego sees nothing.

    Args:
        alive: (n,) bool. dist: (n, n) float32 planar distances. detected: (n, n) bool HD[i, j].
        comm_noise: (n, n) float32 uniforms [e, j].
    """
    teams = np.asarray(config.teams)
    same = jnp.asarray(teams[:, None] == teams[None, :])  # [e, j]
    n = config.n_agents
    if config.stochastic_comm:
        if config.communication_range > 0:
            ratio = jnp.clip(dist / np.float32(config.communication_range), 0.0, 1.0)
        else:
            ratio = jnp.where(dist > 0, 1.0, 0.0)
        shares = same & alive[None, :] & (ratio <= comm_noise)  # [e, j]
        reach = detected.T | jnp.eye(n, dtype=bool)  # [j, i]: j detects i, or j is i
        seen = jnp.dot(shares.astype(jnp.float32), reach.astype(jnp.float32)) > 0
    else:
        team1 = jnp.asarray(teams == 1)
        by_team1 = jnp.any(detected & team1[None, :], axis=1)  # [i]
        by_team0 = jnp.any(detected & ~team1[None, :], axis=1)
        by_my_team = jnp.where(team1[:, None], by_team1[None, :], by_team0[None, :])  # [e, i]
        seen = by_my_team | (same & alive[None, :])
    return seen & alive[:, None]
