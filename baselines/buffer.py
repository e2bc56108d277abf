r"""The rollout buffer of one learner and generalised advantage estimation.

Shapes: T steps, N agents (the learner's rows of the batch, flattened over games and
agents). The buffer is allocated once and reused by every rollout, so an update keeps no
tensors of the previous one alive.

Masks (all [T, N] bool):
    `first[t]`  the agent's episode started at step t (its recurrent state restarts);
    `alive[t]`  the agent was alive before step t, i.e. it acted; every loss term and every
                statistic is restricted to these entries;
    `cont[t]`   its trajectory goes on to step t + 1 in the same episode (alive after the
                step, and the episode did not end);
    `boot[t]`   the episode was truncated (time limit) at step t with the agent alive: the
                return is bootstrapped from the value of the final observation,
                `final_value[t]`. An episode that terminated (a team eliminated) or an agent
                that died is not bootstrapped.
"""

from __future__ import annotations

import torch

__all__ = ["RolloutBuffer", "compute_gae"]


def compute_gae(rewards, values, cont, boot, final_values, next_values, gamma: float, lam: float):
    r"""Generalised advantage estimates and returns of one rollout.

    .. math::

        \delta_t = r_t + \gamma\,(c_t V_{t+1} + b_t V^{final}_t) - V_t, \qquad
        A_t = \delta_t + \gamma \lambda\, c_t A_{t+1},

    with :math:`V_T` = `next_values` (the value of the observation after the rollout) and
    :math:`A_T = 0`; :math:`c_t` = `cont`, :math:`b_t` = `boot`. Returns are
    :math:`A_t + V_t`.

    Args:
        rewards: float32 [T, N].
        values: float32 [T, N], the values of the rollout's observations.
        cont: bool [T, N], see the module doc.
        boot: bool [T, N], truncation with the agent alive.
        final_values: float32 [T, N], values of the final observations (read where `boot`).
        next_values: float32 [N], values of the observations after step T - 1.
        gamma: discount factor.
        lam: GAE lambda.

    Returns:
        (advantages, returns), float32 [T, N].
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [T, N], got {tuple(rewards.shape)}")
    shape = rewards.shape
    for name, x in (
        ("values", values),
        ("cont", cont),
        ("boot", boot),
        ("final_values", final_values),
    ):
        if x.shape != shape:
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")
    if next_values.shape != shape[1:]:
        raise ValueError(
            f"next_values must have shape {tuple(shape[1:])}, got {tuple(next_values.shape)}"
        )
    c = cont.to(values.dtype)
    bootstrap = torch.where(boot, final_values, 0.0)
    following = torch.cat([values[1:], next_values.unsqueeze(0)])
    deltas = rewards + gamma * (c * following + bootstrap) - values
    advantages = torch.empty_like(values)
    running = torch.zeros_like(next_values)
    for t in range(shape[0] - 1, -1, -1):
        running = deltas[t] + (gamma * lam) * c[t] * running
        advantages[t] = running
    return advantages, advantages + values


def _empty_obs(spec, t: int, n: int, device):
    parts = []
    if "rgb" in spec.obs_type:
        parts.append(torch.zeros((t, n, *spec.image_shape), dtype=torch.uint8, device=device))
    if "vector" in spec.obs_type:
        parts.append(torch.zeros((t, n, spec.vector_size), dtype=torch.float32, device=device))
    return parts[0] if len(parts) == 1 else tuple(parts)


class RolloutBuffer:
    """Preallocated [T, N] storage of one learner's rollout (see the module doc).

    Observations are stored as the policy saw them (vector parts normalised).
    """

    def __init__(self, spec, t: int, n: int, device, h0: torch.Tensor, critic_size: int = 0):
        def zeros(*shape: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        self.t, self.n = t, n
        self.obs = _empty_obs(spec, t, n, device)
        self.first = zeros(t, n, dtype=torch.bool)
        self.alive = zeros(t, n, dtype=torch.bool)
        self.cont = zeros(t, n, dtype=torch.bool)
        self.boot = zeros(t, n, dtype=torch.bool)
        if spec.discrete:
            self.actions = zeros(t, n, dtype=torch.int64)
        else:
            self.actions = zeros(t, n, 3, dtype=torch.float32)
        self.logp = zeros(t, n, dtype=torch.float32)
        self.values = zeros(t, n, dtype=torch.float32)
        self.rewards = zeros(t, n, dtype=torch.float32)
        self.final_values = zeros(t, n, dtype=torch.float32)
        self.next_values = zeros(n, dtype=torch.float32)
        self.critic_in = zeros(t, n, critic_size, dtype=torch.float32) if critic_size else None
        self.h0 = h0  # the recurrent state before step 0 (replaced by every rollout)

    def store_obs(self, t: int, obs) -> None:
        if isinstance(self.obs, tuple):
            for dst, src in zip(self.obs, obs, strict=True):
                dst[t].copy_(src)
        else:
            self.obs[t].copy_(obs)

    def obs_rows(self, index: torch.Tensor):
        """Observations [T, len(index), ...] of some agents (a copy)."""
        if isinstance(self.obs, tuple):
            return tuple(o.index_select(1, index) for o in self.obs)
        return self.obs.index_select(1, index)

    def advantages(self, gamma: float, lam: float):
        """`compute_gae` over this rollout."""
        return compute_gae(
            self.rewards,
            self.values,
            self.cont,
            self.boot,
            self.final_values,
            self.next_values,
            gamma,
            lam,
        )
