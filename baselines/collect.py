"""Rollout collection: this process's games played for `rollout_steps` steps into the
learners' buffers (step 1 of `baselines.train`'s update).

Every network player (the learners and the frozen opponents) acts on its rows of the batch
with its recurrent state, restarted where an episode starts; scripted opponents act inside
the environment's step. The learners' rows go into their `RolloutBuffer`s with the rewards of
the training signal (`baselines.buffer.signal_rewards`) and the trajectory flags; truncated
episodes get the value of their final observation (`FinalSlot`), the rollout's last
observation its bootstrap value; win/draw/loss counts per opponent kind accumulate on the
device (`OutcomeCounts`) and are reduced once per rollout.
"""

from __future__ import annotations

from typing import Any

import torch

from . import noise
from .buffer import signal_rewards, trajectory_flags
from .config import PPOConfig
from .envs import GameSpec
from .learner import Learner, one_hot
from .matchmaking import FrozenPlayer, MatchPlan, PoolPlayer
from .policies import ActorCritic, PolicySpec

__all__ = ["OUTCOME_COLUMNS", "Collector", "FinalSlot", "OutcomeCounts", "outcome_row"]


def outcome_row(counts, episode, labels) -> dict:
    """The outcome columns of a rollout from its sums: `counts` [7, kinds] (wins, draws,
    losses, games, lengths, learner-team returns and unshaped learner-team returns of the
    games that ended, per opponent kind of `labels`, in `OUTCOME_COLUMNS` order) and
    `episode` [4] (games, lengths, team 0's and team 1's returns)."""
    n, length, r0, r1 = (float(x) for x in episode)
    out: dict = {
        "episodes": n,
        "episode_length": length / n if n else None,
        "return_team0": r0 / n if n else None,
        "return_team1": r1 / n if n else None,
    }
    for i, label in enumerate(labels):
        games = float(counts[3, i])
        for j, what in enumerate(OUTCOME_COLUMNS):
            out[f"{what}/{label}"] = float(counts[j, i]) / games if games else None
        out[f"games/{label}"] = games  # the count itself
    return out


OUTCOME_COLUMNS = (
    "win_rate",
    "draw_rate",
    "loss_rate",
    "games",
    "episode_length",
    "return",
    "return_unshaped",
)
"""Columns per opponent kind, `{column}/{kind}`: rates and games of the episodes that ended in
the rollout, their mean length and the learner team's mean return, with the shaping terms
of the training game (`return`) and under the scenario's own reward weights
(`return_unshaped`; equal where `--env` changes no reward weight)."""


class OutcomeCounts:
    """Win/draw/loss counts, episode lengths and returns (as trained and unshaped) per opponent
    kind, and episode statistics over all games: each step's outcome tensors are copied into
    [T, B] buffers on the device, and `close()` reduces the rollout's in float64 at once.

    The unshaped return is the episode's return under the scenario's own reward weights: the
    step's `info["score"]` summed over the episode in float32, in the order the game sums its
    own (so without shaping it equals the episode return bit for bit). Without `score` the game
    has no shaping and the episode return is taken."""

    def __init__(self, plan, game: GameSpec, device, games, steps: int):
        k = len(plan.labels)
        lo, hi = games
        b, n = hi - lo, game.n_agents
        self.label = torch.as_tensor(plan.game_label[lo:hi], device=device)
        self.team = torch.as_tensor(plan.game_team[lo:hi], device=device)
        teams = torch.as_tensor(game.teams, device=device)
        sizes = torch.as_tensor([max(s, 1) for s in game.team_sizes], device=device)
        # [n, 2]: a team's mean over its agents
        self.team_mean = (one_hot(teams, 2) / sizes).to(torch.float64)
        self.ended = torch.zeros(steps, b, dtype=torch.bool, device=device)
        self.winner = torch.zeros(steps, b, dtype=torch.int64, device=device)
        self.length = torch.zeros(steps, b, dtype=torch.float32, device=device)
        self.returns = torch.zeros(steps, b, n, dtype=torch.float32, device=device)
        self.unshaped = torch.zeros(steps, b, n, dtype=torch.float32, device=device)
        # the running unshaped return of every game's episode (kept across rollouts)
        self.running = torch.zeros(b, n, dtype=torch.float32, device=device)
        # per kind: wins, draws, losses, games, summed lengths, summed learner-team returns
        # (as trained and unshaped)
        self.counts = torch.zeros(len(OUTCOME_COLUMNS), k, dtype=torch.float64, device=device)
        self.episode = torch.zeros(4, dtype=torch.float64, device=device)  # n, len, r0, r1

    def zero(self) -> None:
        for t in (self.ended, self.counts, self.episode):
            t.zero_()

    def add(self, t: int, ended, info) -> None:
        """Step t's games that ended, their winners, lengths and returns (copies only)."""
        self.ended[t] = ended
        self.winner[t] = info["winner"]
        self.length[t] = info["episode_length"]
        self.returns[t] = info["episode_return"]
        score = info.get("score")
        if score is None:
            self.unshaped[t] = info["episode_return"]
        else:
            self.running += score
            self.unshaped[t] = self.running
            self.running.masked_fill_(ended[:, None], 0.0)

    def close(self) -> None:
        """Reduce the rollout's steps into the counts (float64)."""
        e = self.ended.to(torch.float64)  # [T, B]
        team = self.team.expand_as(self.winner)
        length = self.length.to(torch.float64) * e
        returns = (self.returns.to(torch.float64) @ self.team_mean) * e[..., None]  # [T, B, 2]
        unshaped = (self.unshaped.to(torch.float64) @ self.team_mean) * e[..., None]
        index = team.unsqueeze(-1)
        mine = returns.gather(-1, index).squeeze(-1)  # the learner team's
        mine_unshaped = unshaped.gather(-1, index).squeeze(-1)
        w = self.winner
        per_game = torch.stack(
            [(w == team) * e, (w == -1) * e, (w == 1 - team) * e, e, length, mine, mine_unshaped]
        ).sum(1)  # [7, B]
        self.counts.index_add_(1, self.label, per_game)
        self.episode += torch.cat([e.sum()[None], length.sum()[None], returns.sum((0, 1))])

    def summary(self, labels, reduce) -> dict:
        """Rates and means over every process's games (`reduce` sums over processes)."""
        counts = reduce(self.counts.clone()).cpu().numpy()
        return outcome_row(counts, reduce(self.episode.clone()).cpu().tolist(), labels)


class FinalSlot:
    """A learner's rows' final observation, state and critic input, kept (`torch.where`)
    at the step their episode was truncated, for one value call without a host read."""

    def __init__(self, learner: Learner, cache):
        self.learner, self.cache = learner, cache
        self.obs: Any = None  # [N, ...] final observations (or a pair), once set
        self.h: Any = None  # the rows' recurrent state, once set
        self.critic_in: torch.Tensor | None = None

    def keep(self, boot: torch.Tensor, final, h: torch.Tensor, critic_in) -> None:
        """Keep rows `boot` [N] of the final observations, the states and critic inputs."""
        if self.obs is None:
            self.obs = _map(torch.zeros_like, final)
            self.h = torch.zeros_like(h)
            self.critic_in = None if critic_in is None else torch.zeros_like(critic_in)
        self.obs = _map(lambda new, old: _where_rows(boot, new, old), final, self.obs)
        self.h = self.learner.net.core.where(boot, h, self.h)
        if critic_in is not None and self.critic_in is not None:
            self.critic_in = _where_rows(boot, critic_in, self.critic_in)

    def value(self) -> torch.Tensor:
        """[N] values of the kept final observations (read where the rows were truncated)."""
        learner = self.learner
        first = torch.zeros(len(learner.rows), dtype=torch.bool, device=self.h.device)
        obs = learner.normalize(self.obs)
        return learner.net.value(obs, learner.types, first, self.h, self.critic_in, self.cache)


def _where_rows(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.view(-1, *([1] * (new.dim() - 1))), new, old)


def _map(fn, *obs):
    """fn over an observation or, part by part, a pair of them."""
    if isinstance(obs[0], tuple):
        return tuple(fn(*parts) for parts in zip(*obs, strict=True))
    return fn(*obs)


def _vector_part(obs):
    return obs[1] if isinstance(obs, tuple) else obs


def _flat(obs, rows: int):
    if isinstance(obs, tuple):
        return tuple(o.reshape(rows, *o.shape[2:]) for o in obs)
    return obs.reshape(rows, *obs.shape[2:])


def _normalize_frozen(player: FrozenPlayer, raw):
    if isinstance(raw, tuple):
        return (raw[0], player.normalizer(raw[1]))
    return raw if raw.dtype == torch.uint8 else player.normalizer(raw)


class Collector:
    """This process's games in play, and the rollouts that fill the learners' buffers.

    It holds what the games carry from one rollout to the next: the vectorised environment
    (`venv`), the current observations (`obs`, [B, n, ...] or a pair), the games whose
    episode starts at the next step (`first`, [B] bool), the dead agents (`dead`, [B, n]
    bool), the games' state vectors for a central critic (`state_vectors`, [B, 2, S]; None
    without one) and the outcome counts (`outcomes`). The players keep their own recurrent
    states; `learners` and `frozen` are the trainer's, shared.

    Args:
        config: the run's config.
        game: the game the run trains on.
        spec: the learners' policy architecture.
        venv: this process's games (`baselines.envs` step interface).
        games: (lo, hi), this process's slice of the batch of `config.num_envs` games.
        plan: the run's match plan (the opponent kind of every game).
        learners: the trained policies, in the trainer's order.
        frozen: the frozen network opponents, in the trainer's order.
        reduce: sums a tensor over processes (`baselines.distributed.Dist.sum_`).
        device: where the games' tensors live.
    """

    def __init__(
        self,
        config: PPOConfig,
        game: GameSpec,
        spec: PolicySpec,
        venv,
        games: tuple[int, int],
        plan: MatchPlan,
        learners: list[Learner],
        frozen: list[FrozenPlayer | PoolPlayer],
        reduce,
        device: torch.device,
    ):
        self.config, self.game, self.spec, self.venv = config, game, spec, venv
        self.games, self.learners, self.frozen, self._reduce = games, learners, frozen, reduce
        self.outcomes = OutcomeCounts(plan, game, device, games, config.rollout_steps)
        self._acts: dict[int, Any] = {}  # id(net) -> its (compiled) acting step
        self._finals: list[FinalSlot] = []
        b, n = games[1] - games[0], game.n_agents
        self._teams = torch.as_tensor(game.teams, dtype=torch.int64, device=device)
        shape = (b * n,) if game.discrete else (b * n, 3)
        dtype = torch.int32 if game.discrete else torch.float32
        self.actions = torch.zeros(shape, dtype=dtype, device=device)
        self.obs: Any = None  # the games' current observation [B, n, ...], set by `reset`
        self.first = torch.ones(b, dtype=torch.bool, device=device)
        self.dead = torch.zeros(b, n, dtype=torch.bool, device=device)
        self.state_vectors: torch.Tensor | None = None

    def reset(self) -> None:
        """Fresh games (a run's start)."""
        self.obs = self.venv.reset()
        if self.spec.central_critic:
            self.state_vectors = self.venv.state_vector()

    def load_local_state(self, local: dict) -> None:
        """Continue the games of a checkpoint's process state (`Trainer.local_state`)."""
        device = self.first.device
        self.venv.restore(local["env"])
        self.obs = self.venv.last_obs
        self.first = local["first"].to(device)
        self.dead = local["dead"].to(device)
        if "unshaped_running" in local:  # else a checkpoint from before it was logged
            self.outcomes.running.copy_(local["unshaped_running"])
        sv = local["state_vectors"]
        self.state_vectors = None if sv is None else sv.to(device)

    def players(self) -> list:
        """The network players: the learners, then the frozen opponents."""
        return [*self.learners, *self.frozen]

    @torch.no_grad()
    def collect(self, update: int) -> None:
        """Rollout `update` (counted from 1) into the learners' buffers (see the module doc).

        Nothing here reads a tensor on the host: the sampling noise of the rollout is made in
        one call per player, the policies' step weights once, and the values of truncated
        episodes' final observations in one call after the rollout.
        """
        for learner in self.learners:
            learner.buffer.h0 = learner.h
        players = self.players()
        uniforms = [self._noise(update, i, p) for i, p in enumerate(players)]
        caches = [p.net.step_cache() for p in players]
        learners = zip(self.learners, caches[: len(self.learners)], strict=True)
        self._finals = [FinalSlot(learner, cache) for learner, cache in learners]
        self.outcomes.zero()
        for t in range(self.config.rollout_steps):
            self._act_all(t, players, uniforms, caches)
            self._step(t)
        self.outcomes.close()
        self._final_values()
        self._bootstrap_values(caches)
        for learner in self.learners:
            learner.commit(self._reduce)

    def _act_all(self, t: int, players: list, uniforms: list, caches: list) -> None:
        """Step t's actions of every player into `actions`; the learners' rows go into
        their buffers."""
        game = self.game
        b, n = self.games[1] - self.games[0], game.n_agents
        flat = _flat(self.obs, b * n)
        dead = self.dead.reshape(-1)
        for i, p in enumerate(players):
            rows = p.rows
            raw = rows.take(flat)
            first = self.first[rows.game]
            alive = first | ~rows.take(dead)
            learning = isinstance(p, Learner)
            obs = p.normalize(raw) if learning else _normalize_frozen(p, raw)
            critic_in = None
            if learning and self.spec.central_critic:
                states = self._central_states()
                critic_in = p.critic_input(states)
                p.state_norm.add(states[rows.game, rows.team], alive)
            actions, logp, value, p.h = self._act(p.net)(
                obs, p.types, first, p.h, critic_in, uniforms[i][t], cache=caches[i]
            )
            if learning:
                buf = p.buffer
                buf.store_obs(t, obs)
                buf.first[t], buf.alive[t], buf.actions[t] = first, alive, actions
                buf.logp[t], buf.values[t] = logp, value
                if critic_in is not None:
                    buf.critic_in[t] = critic_in
                if "vector" in game.obs_type:
                    p.obs_norm.add(_vector_part(raw), alive)
            rows.put(self.actions, actions.to(self.actions.dtype))

    def _step(self, t: int) -> None:
        """Step t of the games with the players' actions; its results are recorded."""
        game = self.game
        b, n = self.games[1] - self.games[0], game.n_agents
        act_shape = () if game.discrete else (3,)
        obs, rewards, dones, ended, info = self.venv.step(self.actions.view(b, n, *act_shape))
        self._record_step(t, rewards, dones, ended, info)
        self.obs, self.first, self.dead = obs, ended, dones
        if self.spec.central_critic:
            self.state_vectors = info["state_vector"]

    def _act(self, net: ActorCritic):
        """`net.act`, compiled once per network with --compile (the weights are read at each
        call, so pool snapshots and optimiser steps need no recompilation)."""
        fn = self._acts.get(id(net))
        if fn is None:
            fn = torch.compile(net.act, dynamic=False) if self.config.compile else net.act
            self._acts[id(net)] = fn
        return fn

    def _noise(self, update: int, index: int, p) -> torch.Tensor:
        """Player `index`'s sampling uniforms of rollout `update`, [T, N, width]: step t
        of update u draws counter (u - 1) * T + t (see `baselines.noise`)."""
        t = self.config.rollout_steps
        first = (update - 1) * t
        return noise.rollout_uniforms(
            self.config.seed, index, first, t, p.rows.uid, p.net.noise_width
        )

    @property
    def _one_truncation_per_rollout(self) -> bool:
        """No row can be truncated twice in a rollout (the time limit is at least the
        rollout's length, or there is none), so one slot per row holds its final
        observation until the rollout ends."""
        config = getattr(self.venv, "config", None)
        if config is None or not hasattr(config, "max_episode_length"):
            return False
        limit = config.max_episode_length
        return limit is None or limit >= self.config.rollout_steps

    def _central_states(self) -> torch.Tensor:
        """`state_vectors`, which `reset` (or a resumed checkpoint) sets for a central critic."""
        if self.state_vectors is None:
            raise RuntimeError("the central critic's state vectors are read before start()")
        return self.state_vectors

    def _record_step(self, t, rewards, dones, ended, info) -> None:
        flat_rewards, flat_dones = rewards.reshape(-1), dones.reshape(-1)
        truncated = info["truncated"]
        b, n = self.games[1] - self.games[0], self.game.n_agents
        final = _flat(info["final_obs"], b * n)
        signal = self.config.signal
        if signal != "individual":  # every agent's reward of the signal (`baselines.buffer`)
            score = info.get("score")
            flat_rewards = signal_rewards(signal, rewards, score, self._teams).reshape(-1)
        for learner, slot in zip(self.learners, self._finals, strict=True):
            rows, buf = learner.rows, learner.buffer
            alive = buf.alive[t]
            alive_after = ~rows.take(flat_dones)
            cont, boot = trajectory_flags(
                signal, alive_after, ended[rows.game], truncated[rows.game]
            )
            buf.cont[t], buf.boot[t] = cont, boot
            valued = alive if signal == "individual" else torch.ones_like(alive)
            buf.valued[t] = valued
            r = torch.where(valued, rows.take(flat_rewards), 0.0)
            buf.rewards[t] = learner.rewards(r, valued, cont)
            critic_in = None
            if self.spec.central_critic:
                critic_in = learner.critic_input(info["final_state_vector"])
            slot.keep(boot, rows.take(final), learner.h, critic_in)
            if not self._one_truncation_per_rollout:  # a row may be truncated again
                buf.final_values[t] = torch.where(boot, slot.value(), 0.0)
        self.outcomes.add(t, ended, info)

    def _final_values(self) -> None:
        """Values of the final observations of truncated episodes (bootstrap targets): one
        call per learner on the rows' kept final observations and states."""
        if not self._one_truncation_per_rollout:
            return  # made step by step in `_record_step`
        for learner, slot in zip(self.learners, self._finals, strict=True):
            buf = learner.buffer
            buf.final_values = torch.where(buf.boot, slot.value().unsqueeze(0), 0.0)

    def _bootstrap_values(self, caches) -> None:
        b, n = self.games[1] - self.games[0], self.game.n_agents
        flat = _flat(self.obs, b * n)
        for i, learner in enumerate(self.learners):
            rows = learner.rows
            obs = learner.normalize(rows.take(flat))
            central = self.spec.central_critic
            critic_in = learner.critic_input(self.state_vectors) if central else None
            learner.buffer.next_values = learner.net.value(
                obs, learner.types, self.first[rows.game], learner.h, critic_in, caches[i]
            )
