r"""The rollout buffer of one learner and generalised advantage estimation.

Shapes: T steps, N agents (the learner's rows of the batch, flattened over games and
agents). The buffer is allocated once and reused by every rollout, so an update keeps no
tensors of the previous one alive.

Masks (all [T, N] bool):
    `first[t]`  the agent's episode started at step t (its recurrent state restarts);
    `alive[t]`  the agent was alive before step t, i.e. it acted; the policy's loss terms
                (surrogate, entropy, KL) are restricted to these entries;
    `valued[t]` the entry's value is trained and its reward counted in the return statistics:
                `alive` for the individual signal, every entry for the team signal;
    `cont[t]`   its trajectory goes on to step t + 1 in the same episode: individual signal,
                alive after the step and the episode did not end; team signal, the episode
                did not end (a dead agent's trajectory goes on to the episode's end);
    `boot[t]`   the episode was truncated (time limit) at step t (individual signal: with the
                agent alive): the return is bootstrapped from the value of the final
                observation, `final_value[t]`. An episode that terminated (a team eliminated)
                is not bootstrapped, nor (individual signal) an agent that died.

Training signals (`PPOConfig.signal`, `signal_rewards`, `trajectory_flags`): "individual"
trains each agent on its own reward until its death; "team" trains every agent of a team,
dead ones included, on the team's summed reward until the episode ends.
"""

from __future__ import annotations

import torch

__all__ = ["RolloutBuffer", "compute_gae", "signal_rewards", "trajectory_flags"]


def signal_rewards(signal: str, rewards, score, teams):
    r"""Every agent's training reward of one step under `signal`.

    individual: the game's reward `rewards` as it is. team: with `g` the game's own reward
    (`score` where the training game shapes the reward with `--env` or `--shooter-credit`,
    else `rewards`), every agent receives its team's sum of `g`, plus its own shaping
    `rewards - g` (the shaping terms credit one agent and are not shared):

    .. math:: r^{team}_i = \sum_{j:\ team_j = team_i} g_j + (r_i - g_i).

    Args:
        signal: "individual" or "team".
        rewards: float32 [B, n], the training game's rewards (0 for agents dead before the
            step).
        score: float32 [B, n], the same step's rewards under the scenario's own weights, or
            None (the training game is the scenario: no shaping).
        teams: int64 [n], each agent's team (0 or 1).

    Returns:
        float32 [B, n].
    """
    if signal == "individual":
        return rewards
    if signal != "team":
        raise ValueError(f"signal must be individual or team, got {signal!r}")
    game = rewards if score is None else score
    members = torch.nn.functional.one_hot(teams, 2).to(game.dtype)  # [n, 2]
    team_sum = game @ members  # [B, 2]
    shared = team_sum.index_select(1, teams)  # [B, n]
    return shared if score is None else shared + (rewards - score)


def trajectory_flags(signal: str, alive_after, ended, truncated):
    """(cont, boot) of one step's rows (see the module doc), all bool [N]: `alive_after` the
    agent is alive after the step, `ended` its game's episode ended at this step,
    `truncated` by the time limit."""
    if signal == "team":
        return ~ended, truncated
    return alive_after & ~ended, alive_after & truncated


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
        self.valued = zeros(t, n, dtype=torch.bool)
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
