"""A learner: one trained policy of a run, with its optimiser, observation and reward
statistics, its rows of the batch, its recurrent state and its rollout buffer.

`baselines.collect` fills the buffer, `baselines.learn` updates the policy from it and
`baselines.train.Trainer` owns the learners (one, or two with --train-both) and saves them.
"""

from __future__ import annotations

import torch

from .buffer import RolloutBuffer
from .config import PPOConfig
from .matchmaking import Rows
from .normalize import ObsNormalizer, RewardScaler
from .policies import ActorCritic, PolicySpec

__all__ = ["Learner", "one_hot"]


def one_hot(index: torch.Tensor, size: int) -> torch.Tensor:
    """[..., size] float32 one-hot of the integer tensor `index`."""
    return torch.nn.functional.one_hot(index, size).float()


class Learner:
    """A trained policy with its optimiser, normalisers, rows, state and buffer."""

    def __init__(
        self, name: str, team: int, spec: PolicySpec, rows: Rows, config: PPOConfig, device
    ):
        self.name, self.team, self.spec, self.rows = name, team, spec, rows
        n = len(rows)
        self.net = ActorCritic(spec).to(device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.lr, eps=1e-5)
        self.obs_norm = ObsNormalizer(spec.obs_norm_size, device, config.norm_obs)
        self.state_norm = ObsNormalizer(spec.state_size, device, config.norm_obs)
        self.rewards = RewardScaler(n, config.gamma, device, config.scale_rewards)
        self.types = one_hot(rows.type_id, spec.n_types)
        self.slots = one_hot(rows.slot, spec.n_slots)
        self.h = self.net.initial_state(n, device)
        critic = spec.state_size + spec.n_slots + spec.n_types if spec.central_critic else 0
        self.buffer = RolloutBuffer(spec, config.rollout_steps, n, device, self.h, critic)

    def normalize(self, raw):
        if isinstance(raw, tuple):
            return (raw[0], self.obs_norm(raw[1]))
        return raw if "rgb" in self.spec.obs_type else self.obs_norm(raw)

    def critic_input(self, state_vectors, rows_index=None):
        """[N, S + slots + K] central-critic input from state vectors [B, 2, S]."""
        rows = self.rows
        game, team = rows.game, rows.team
        slots, types = self.slots, self.types
        if rows_index is not None:
            game, team = game[rows_index], team[rows_index]
            slots, types = slots[rows_index], types[rows_index]
        return torch.cat([self.state_norm(state_vectors[game, team]), slots, types], dim=-1)

    def state_dict(self) -> dict:
        """What every process shares: model, optimiser, statistics."""
        return {
            "name": self.name,
            "team": self.team,
            "model": self.net.state_dict(),
            "optimizer": self.opt.state_dict(),
            "obs_norm": self.obs_norm.state_dict(),
            "state_norm": self.state_norm.state_dict(),
            "rewards": self.rewards.state_dict(),
        }

    def local_state(self) -> dict:
        """What this process holds for its own rows: recurrent state, running returns."""
        return {"h": self.h, "returns": self.rewards.returns}

    def load_state_dict(self, state: dict, local: dict) -> None:
        self.net.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.obs_norm.load_state_dict(state["obs_norm"])
        self.state_norm.load_state_dict(state["state_norm"])
        self.rewards.load_state_dict(state["rewards"])
        self.h = local["h"].to(self.h.device)
        self.rewards.returns = local["returns"].to(self.h.device, torch.float64).clone()

    def commit(self, reduce) -> None:
        """Merge the rollout's statistics (summed over processes by `reduce`)."""
        self.obs_norm.commit(reduce)
        self.state_norm.commit(reduce)
        self.rewards.commit(reduce)
