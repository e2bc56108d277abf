"""The PPO update over a learner's filled buffer (steps 2 and 3 of `baselines.train`'s update).

GAE on the buffer (`RolloutBuffer.advantages`; with --value-norm its statistics take in the
returns first), then `epochs` passes; each pass cuts the learner's agents into `minibatches`
random groups and replays their whole sequences from the state at the rollout's start
(`ActorCritic.evaluate`, the S5 parallel scan), then takes one clipped-PPO step. Agents dead
before a step are masked out of every term (with `--signal team`, out of the policy's terms
only: their rows keep their team's reward and their value). `target_kl` stops the epochs
once an epoch's mean KL exceeds it.

Under torchrun every process holds its own rows of each minibatch: the loss is normalised by
the whole minibatch's counts and DistributedDataParallel sums the gradients, so a step is
the same whatever the number of processes.
"""

from __future__ import annotations

import math

import torch

from .buffer import RolloutBuffer
from .config import PPOConfig
from .distributed import Dist
from .learner import Learner
from .loss import ppo_loss
from .policies import ActorCritic
from .valuenorm import normalized_value_terms, update_value_norm

__all__ = [
    "LEARN_COLUMNS",
    "UPDATE_STATS",
    "PPOUpdate",
    "TrainingDiverged",
    "distributed_evaluate",
]


class TrainingDiverged(RuntimeError):
    """A loss, gradient or parameter became NaN or infinite."""


LEARN_COLUMNS = (
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_frac",
    "explained_variance",
    "grad_norm",
    "epochs",
)
"""The metric columns of one learner's update (`PPOUpdate.learn`'s keys)."""
UPDATE_STATS = tuple(c for c in LEARN_COLUMNS if c not in ("explained_variance", "epochs"))
"""The statistics of every minibatch step (`PPOUpdate.minibatch_step`), averaged over the
update's steps into the columns of the same names."""


def distributed_evaluate(net: ActorCritic, dist: Dist, device: torch.device):
    """The callable that replays a minibatch's sequences: `net.evaluate`, behind
    DistributedDataParallel when several processes train."""
    if not dist.enabled:
        return net.evaluate
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(_Evaluate(net), device_ids=ids)


class _Evaluate(torch.nn.Module):
    """`ActorCritic.evaluate` as a module's forward, for DistributedDataParallel."""

    def __init__(self, net: ActorCritic):
        super().__init__()
        self.net = net

    def forward(self, *batch):
        return self.net.evaluate(*batch)


class PPOUpdate:
    """Clipped-PPO updates of a run's learners.

    Args:
        config: the run's config (epochs, minibatches, loss coefficients, target_kl, ...).
        dist: this process's place among the run's processes.
        generator: the run's torch generator (the minibatches' permutations).
        device: where the learners' tensors live.
    """

    def __init__(
        self, config: PPOConfig, dist: Dist, generator: torch.Generator, device: torch.device
    ):
        self.config, self.dist, self.generator, self.device = config, dist, generator, device

    def learn(self, learner: Learner, evaluate, update: int) -> dict:
        """Epochs of clipped-PPO minibatch steps on `learner`'s filled buffer, replaying
        sequences with `evaluate` (`distributed_evaluate`); returns the `LEARN_COLUMNS`.

        Minibatches are cut from one permutation of the learner's rows of the whole batch
        (the same in every process); each process evaluates the rows it holds, and the loss
        is normalised by the whole minibatch's counts, so the summed gradients are the
        minibatch's gradient whatever the number of processes.
        """
        cfg, buf, net = self.config, learner.buffer, learner.net
        with torch.no_grad():
            advantages, returns = buf.advantages(cfg.gamma, cfg.gae_lambda)
            update_value_norm(net, returns, buf.valued, self.dist.sum_)
        total = learner.rows.total
        local = torch.full((total,), -1, dtype=torch.int64, device=self.device)
        local[learner.rows.pos] = torch.arange(buf.n, device=self.device)
        size = math.ceil(total / cfg.minibatches)
        sums = torch.zeros(len(UPDATE_STATS), dtype=torch.float64, device=self.device)
        kl_at = UPDATE_STATS.index("approx_kl")
        steps, epochs_done = 0, 0
        for epoch in range(cfg.epochs):
            perm = torch.randperm(total, generator=self.generator, device=self.device)
            kl = torch.zeros((), dtype=torch.float64, device=self.device)
            epoch_steps = 0
            for k in range(0, total, size):
                mine = local[perm[k : k + size]]
                idx = mine[mine >= 0]
                at = (update, epoch, k // size)
                stats = self.minibatch_step(learner, evaluate, idx, advantages, returns, at)
                sums += stats
                kl += stats[kl_at]
                epoch_steps += 1
            steps += epoch_steps
            epochs_done += 1
            # this epoch's mean KL, the same decision in every process (summed KL)
            if (
                cfg.target_kl is not None
                and float(self.dist.sum_(kl)) / epoch_steps > cfg.target_kl
            ):
                break
        self.dist.sum_(sums)
        means = {k: float(v) / steps for k, v in zip(UPDATE_STATS, sums, strict=True)}
        means["grad_norm"] /= self.dist.world  # every process holds the same norm
        out: dict[str, float | None] = {
            **means,
            "explained_variance": self.explained_variance(returns, buf),
            "epochs": epochs_done,
        }
        for p in net.parameters():
            if not torch.isfinite(p).all():
                raise TrainingDiverged(
                    f"a parameter of {learner.name} is not finite after update {update}"
                )
        return out

    def explained_variance(self, returns: torch.Tensor, buf: RolloutBuffer) -> float | None:
        """1 - Var(R - V) / Var(R) over the masked entries of every process."""
        m = buf.valued.to(torch.float64)
        r, d = returns.to(torch.float64), (returns - buf.values).to(torch.float64)
        sums = torch.stack(
            [m.sum(), (m * r).sum(), (m * r * r).sum(), (m * d).sum(), (m * d * d).sum()]
        )
        n, s_r, s_rr, s_d, s_dd = self.dist.sum_(sums).tolist()
        if n < 2:
            return None
        var_r = s_rr / n - (s_r / n) ** 2
        var_d = s_dd / n - (s_d / n) ** 2
        return 1.0 - var_d / var_r if var_r > 0 else None

    def minibatch_step(
        self,
        learner: Learner,
        evaluate,
        idx: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        at: tuple[int, int, int],
    ) -> torch.Tensor:
        """One optimiser step on this process's rows `idx` [M] of a minibatch (columns of the
        [T, N] `advantages` and `returns`); `at` is (update, epoch, minibatch), counted from
        1, 0 and 0, for the error message. Returns its float64 statistics
        [len(UPDATE_STATS)], in the order of `UPDATE_STATS`."""
        cfg, buf, net = self.config, learner.buffer, learner.net
        update, epoch, k = at

        def cols(x):  # the minibatch's columns of a [T, N, ...] tensor
            return x.index_select(1, idx)

        mask, valued = cols(buf.alive), cols(buf.valued)
        adv = cols(advantages)
        with torch.no_grad():
            a = torch.where(mask, adv, 0.0).to(torch.float64)
            counts = [mask.sum().to(torch.float64), a.sum(), (a * a).sum()]
            moments = self.dist.sum_(torch.stack([*counts, valued.sum().to(torch.float64)]))
            count, mean = moments[0].clamp(min=1), moments[1] / moments[0].clamp(min=1)
            std = torch.sqrt((moments[2] / count - mean * mean).clamp(min=0))
            value_count = moments[3].clamp(min=1)
        batch = (
            buf.obs_rows(idx),
            learner.types[idx],
            cols(buf.first),
            net.core.rows(buf.h0, idx),
            cols(buf.actions),
            None if buf.critic_in is None else cols(buf.critic_in),
        )
        logp, entropy, value = evaluate(*batch)
        value, old, target = normalized_value_terms(net, value, cols(buf.values), cols(returns))
        out = ppo_loss(
            logp,
            cols(buf.logp),
            adv,
            value,
            old,
            target,
            entropy,
            mask,
            clip=cfg.clip,
            vf_coef=cfg.vf_coef,
            ent_coef=cfg.ent_coef,
            clip_value=cfg.clip_value,
            norm_adv=cfg.norm_adv,
            count=count.float(),
            adv_moments=(mean.float(), std.float()),
            value_mask=valued,
            value_count=value_count.float(),
        )
        learner.opt.zero_grad(set_to_none=True)
        # DistributedDataParallel averages gradients over processes; the parts are sums over
        # the whole minibatch's count, so their sum is wanted: scale by the world size.
        (out.loss * self.dist.world).backward()
        params = [p for p in net.parameters() if p.grad is not None]
        if cfg.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        else:
            norm = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in params if p.grad is not None])
            )
        parts = {
            "policy_loss": out.policy,
            "value_loss": out.value,
            "entropy": out.entropy,
            "approx_kl": out.approx_kl,
            "clip_frac": out.clip_frac,
            "grad_norm": norm.detach(),
        }
        stats = torch.stack([parts[k] for k in UPDATE_STATS]).to(torch.float64)
        if not torch.isfinite(norm):  # the same norm in every process: all stop together
            total = self.dist.sum_(stats.clone())
            raise TrainingDiverged(
                f"non-finite loss or gradient at update {update} (epoch {epoch + 1}, "
                f"minibatch {k + 1}) of {learner.name}: policy {float(total[0]):.4g}, value "
                f"{float(total[1]):.4g}, entropy {float(total[2]):.4g}"
            )
        learner.opt.step()
        return stats
