"""The PPO training loop: rollout -> GAE -> epochs of minibatch updates -> log -> checkpoint.

Each update:
    1. rollout: `rollout_steps` steps of every game of the batch (`TorchVecEnv`, auto-reset
       inside the compiled step). Every network player (the learners and the frozen
       opponents) acts on its rows of the batch with its recurrent state, restarted where an
       episode starts; scripted opponents act inside the step. The learners' rows go into
       their `RolloutBuffer`; truncated episodes get the value of their final observation;
       win/draw/loss counts per opponent kind accumulate on the device.
    2. GAE on the buffer (`baselines.buffer.compute_gae`).
    3. `epochs` passes; each pass cuts the learner's agents into `minibatches` random groups
       and replays their whole sequences from the state at the rollout's start
       (`ActorCritic.evaluate`, the S5 parallel scan), then takes one clipped-PPO step.
       Agents dead before a step are masked out of every term (with `--signal team`, out of
       the policy's terms only: their rows keep their team's reward and their value).
    4. metrics row, pool snapshot, checkpoint.

Determinism: torch, numpy and JAX randomness come from seeded generators whose states are in
every checkpoint, with the environment's key and game states, so a run resumed from a
checkpoint continues exactly as the uninterrupted run would have (bit for bit on CPU).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gigastep._util import files as _files

from . import noise, runfolder
from .buffer import RolloutBuffer, signal_rewards, trajectory_flags
from .checkpoint import (
    FORMAT,
    holds_checkpoint,
    load_checkpoint,
    load_policy,
    save_checkpoint,
)
from .config import PPOConfig, dumps, validate
from .distributed import Dist
from .envs import GameSpec, gigastep_game
from .evaluator import Evaluator
from .loss import ppo_loss
from .matchmaking import (
    FrozenPlayer,
    OpponentPool,
    PoolPlayer,
    Rows,
    check_file_opponent,
    make_plan,
)
from .metrics import MetricsLogger, current_rss_mb, peak_rss_mb
from .normalize import ObsNormalizer, RewardScaler
from .policies import ActorCritic, PolicySpec
from .schedule import LRSchedule
from .valuenorm import normalized_value_terms, update_value_norm

__all__ = ["Learner", "Trainer", "TrainingDiverged", "policy_spec"]


class TrainingDiverged(RuntimeError):
    """A loss, gradient or parameter became NaN or infinite."""


def policy_spec(config: PPOConfig, game: GameSpec) -> PolicySpec:
    """The architecture a config gives on a game (checked against the observations)."""
    encoder = config.encoder
    needs = {"mlp": "vector", "cnn": "rgb", "both": "rgb_vector"}
    if encoder != "auto" and needs[encoder] != game.obs_type:
        raise ValueError(
            f"--encoder {encoder} needs {needs[encoder]} observations, but {game.name} has "
            f"{game.obs_type} observations (use --encoder auto, or a scenario with the "
            f"{'_vec' if needs[encoder] == 'vector' else '_rgb'} suffix)"
        )
    if config.action_head == "factored" and not game.discrete:
        raise ValueError(
            f"--action-head factored splits the 27 discrete actions into turn, dive and "
            f"throttle; {game.name} has continuous actions (use --action-head joint, or a "
            f"scenario with the _disc suffix)"
        )
    central = config.algo == "mappo"
    if central and game.state_size < 1:
        raise ValueError(f"--algo mappo needs a global state vector; {game.name} has none")
    return PolicySpec(
        obs_type=game.obs_type,
        vector_size=game.vector_size,
        image_shape=game.image_shape,
        n_types=len(game.type_vocab),
        discrete=game.discrete,
        core=config.policy,
        hidden=config.hidden,
        s5_state_dim=config.s5_state_dim,
        s5_layers=config.s5_layers,
        central_critic=central,
        state_size=game.state_size if central else 0,
        n_slots=max(game.team_sizes),
        critic_hidden=config.critic_hidden,
        separate_critic=config.separate_critic,
        value_norm=config.value_norm,
        action_head=config.action_head,
    )


def _one_hot(index: torch.Tensor, size: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(index, size).float()


def _vector_part(obs):
    return obs[1] if isinstance(obs, tuple) else obs


def _flat(obs, rows: int):
    if isinstance(obs, tuple):
        return tuple(o.reshape(rows, *o.shape[2:]) for o in obs)
    return obs.reshape(rows, *obs.shape[2:])


class Learner:
    """A trained policy with its optimiser, normalisers, rows, state and buffer."""

    def __init__(
        self, name: str, team: int, spec: PolicySpec, rows: Rows, config: PPOConfig, device
    ):
        self.name, self.team, self.spec, self.rows = name, team, spec, rows
        n = len(rows)
        self.net = ActorCritic(spec).to(device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=config.lr, eps=1e-5)
        self.obs_norm = ObsNormalizer(spec.vector_size, device, config.norm_obs)
        self.state_norm = ObsNormalizer(spec.state_size, device, config.norm_obs)
        self.rewards = RewardScaler(n, config.gamma, device, config.scale_rewards)
        self.types = _one_hot(rows.type_id, spec.n_types)
        self.slots = _one_hot(rows.slot, spec.n_slots)
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


class _OutcomeCounts:
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
        self.team_mean = (_one_hot(teams, 2) / sizes).to(torch.float64)
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
"""The metric columns of one learner's update (`Trainer.learn`'s keys)."""
UPDATE_STATS = tuple(c for c in LEARN_COLUMNS if c not in ("explained_variance", "epochs"))
"""The statistics of every minibatch step (`Trainer._minibatch_step`), averaged over the
update's steps into the columns of the same names."""


class _FinalSlot:
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


class Trainer:
    """One PPO run (see the module doc). `run()` trains; `Trainer(config, game, factory)`
    trains any game with the `baselines.envs` step interface (e.g. the memory probe).

    With `dist` (`baselines.distributed.Dist`, one per process under torchrun) this process
    plays its slice of the batch on `device`; see `baselines.distributed`.
    """

    def __init__(
        self,
        config: PPOConfig,
        game: GameSpec | None = None,
        factory=None,
        dist: Dist | None = None,
        device=None,
    ):
        validate(config)
        self.config = config
        self.dist = dist or Dist()
        if config.warm_start and self.dist.enabled:
            raise ValueError(
                "--warm-start clones on one process's games and is not supported under "
                "torchrun (several processes would clone different policies); run it in one "
                "process"
            )
        if game is None:
            game, factory = gigastep_game(config.scenario, config.env, config.shooter_credit)
        elif config.eval_every:
            raise ValueError(
                f"--eval-every {config.eval_every} plays Gigastep scenarios; this run trains "
                f"{game.name}, a game of its own (use --eval-every 0)"
            )
        self.game = game
        self.device = torch.device(device or config.device)
        if config.threads:
            torch.set_num_threads(config.threads)
        if self.device.type == "cpu":  # exact resumption is promised on the CPU
            torch.use_deterministic_algorithms(True)
            # Deterministic mode also fills every new tensor with NaN, which slows each
            # empty_like, clone, cast and gather; every buffer here is written before it is
            # read, so exact resumption does not need the fill.
            torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
        torch.manual_seed(config.seed)
        self.spec = policy_spec(config, game)
        self.plan = make_plan(config, game)
        self.games = self.dist.games(config.num_envs)
        lo, hi = self.games
        window = (lo, config.num_envs) if self.dist.enabled else None
        self.venv = factory(
            hi - lo,
            config.seed,
            self.device,
            self.plan.scripted(self.games),
            self.spec.central_critic,
            window=window,
        )
        vocab = game.type_vocab
        names = ["learner0", "learner1"] if config.train_both else ["learner0"]
        self._acts: dict[int, Any] = {}  # id(net) -> its (compiled) acting step
        self.learners = []
        for i, name in enumerate(names):
            rows = Rows.of(self.plan.blocks(name), game, vocab, self.device, self.games)
            team = i if config.train_both else config.team
            self.learners.append(Learner(name, team, self.spec, rows, config, self.device))
        self._ddp = [self._wrap(learner.net) for learner in self.learners]
        self.frozen = [self._frozen_player(name, spec, vocab) for name, spec in self.plan.frozen]
        self.pool = OpponentPool(config.pool_size)
        self.generator = torch.Generator(self.device).manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        self.outcomes = _OutcomeCounts(
            self.plan, game, self.device, self.games, config.rollout_steps
        )
        self.evaluator = Evaluator(config, game.symmetric)
        self.update = 0
        self.agent_steps = 0
        self.wall_s = 0.0
        self.schedule = LRSchedule(
            config.lr, config.anneal_lr, config.updates, config.time_budget_s
        )
        b, n = hi - lo, game.n_agents
        self._teams = torch.as_tensor(game.teams, dtype=torch.int64, device=self.device)
        shape = (b * n,) if game.discrete else (b * n, 3)
        dtype = torch.int32 if game.discrete else torch.float32
        self.actions = torch.zeros(shape, dtype=dtype, device=self.device)
        self.obs = None  # this process's games' current observation [B, n, ...]
        self.first = torch.ones(b, dtype=torch.bool, device=self.device)
        self.dead = torch.zeros(b, n, dtype=torch.bool, device=self.device)
        # the games' state vectors [B, 2, S] (a central critic's input; None without one)
        self.state_vectors: torch.Tensor | None = None

    # --- set-up -------------------------------------------------------------------------------
    def _wrap(self, net):
        """`net.evaluate` behind DistributedDataParallel when several processes train."""
        if not self.dist.enabled:
            return None
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(_Evaluate(net), device_ids=ids)

    def _frozen_player(self, name, opponent, vocab) -> FrozenPlayer | PoolPlayer:
        rows = Rows.of(self.plan.blocks(name), self.game, vocab, self.device, self.games)
        types = _one_hot(rows.type_id, self.spec.n_types)
        args = (name, self.spec, rows, types, self.device, self.config.norm_obs)
        if opponent.kind == "pool":
            return PoolPlayer(*args)
        player = FrozenPlayer(*args)
        if opponent.kind == "file":
            policy = load_policy(opponent.path, self.device)
            check_file_opponent(opponent.path, policy.spec, self.spec)
            team = next(iter(policy.teams))
            model, norm = policy.nets[team].state_dict(), policy.normalizers[team].state_dict()
            player.load(model, norm, opponent.path)
        return player

    def start(self) -> None:
        """Fresh games and, when the pool is used, the initial policy as its first member
        (with `--warm-start`, the cloned policy: `warm_up` runs first)."""
        if self.config.warm_start:
            self.warm_up()
        self.obs = self.venv.reset()
        if self.spec.central_critic:
            self.state_vectors = self.venv.state_vector()
        if self._uses_pool:
            self.pool.add(0, self.learners[0].net, self.learners[0].obs_norm)

    def warm_up(self) -> None:
        """`--warm-start`: every learner clones the scripted player on its rows of the run's
        games (`baselines.warmstart`); the results are kept in `warm_started` (written to
        warm_start.json and logged on stderr by `run`)."""
        from .warmstart import warm_start

        cfg = self.config
        learners = [(x.name, x.net, x.obs_norm, x.rows, x.types) for x in self.learners]
        self.warm_started = warm_start(
            self.venv, learners, cfg.warm_start, cfg.seed, cfg.warm_start_updates
        )

    @property
    def _uses_pool(self) -> bool:
        return any(s.kind == "pool" for _, s in self.plan.frozen)

    def players(self):
        return [*self.learners, *self.frozen]

    def _act(self, net: ActorCritic):
        """`net.act`, compiled once per network with --compile (the weights are read at each
        call, so pool snapshots and optimiser steps need no recompilation)."""
        fn = self._acts.get(id(net))
        if fn is None:
            fn = torch.compile(net.act, dynamic=False) if self.config.compile else net.act
            self._acts[id(net)] = fn
        return fn

    # --- rollout ------------------------------------------------------------------------------
    def _swap_pool_players(self) -> None:
        """Draw each pool player's snapshot for the episodes that start in this rollout."""
        pool = [p for p in self.frozen if isinstance(p, PoolPlayer)]
        for p, snap in zip(pool, self.pool.sample(self.rng, len(pool)), strict=True):
            p.begin_rollout(snap, self.first[p.rows.game])

    def _noise(self, index: int, p) -> torch.Tensor:
        """Player `index`'s sampling uniforms of the whole rollout, [T, N, width]: step t
        of update u draws counter (u - 1) * T + t (see `baselines.noise`)."""
        t = self.config.rollout_steps
        first = (self.update - 1) * t
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

    @torch.no_grad()
    def collect(self) -> None:
        """One rollout into the learners' buffers (see the module doc).

        Nothing here reads a tensor on the host: the sampling noise of the rollout is made in
        one call per player, the policies' step weights once, and the values of truncated
        episodes' final observations in one call after the rollout.
        """
        cfg, game = self.config, self.game
        b, n = self.games[1] - self.games[0], game.n_agents
        for learner in self.learners:
            learner.buffer.h0 = learner.h
        self._swap_pool_players()
        players = self.players()
        uniforms = [self._noise(i, p) for i, p in enumerate(players)]
        caches = [p.net.step_cache() for p in players]
        learners = zip(self.learners, caches[: len(self.learners)], strict=True)
        self._finals = [_FinalSlot(learner, cache) for learner, cache in learners]
        self.outcomes.zero()
        act_shape = () if game.discrete else (3,)
        for t in range(cfg.rollout_steps):
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
            obs, rewards, dones, ended, info = self.venv.step(self.actions.view(b, n, *act_shape))
            self._record_step(t, rewards, dones, ended, info)
            self.obs, self.first, self.dead = obs, ended, dones
            if self.spec.central_critic:
                self.state_vectors = info["state_vector"]
        self.outcomes.close()
        self._final_values()
        self._bootstrap_values(caches)
        for learner in self.learners:
            learner.commit(self.dist.sum_)

    def _central_states(self) -> torch.Tensor:
        """`state_vectors`, which `start` (or a resumed checkpoint) sets for a central critic."""
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

    # --- update ------------------------------------------------------------------------------
    def learn(self, index: int) -> dict:
        """Epochs of clipped-PPO minibatch steps on learner `index`'s buffer.

        Minibatches are cut from one permutation of the learner's rows of the whole batch
        (the same in every process); each process evaluates the rows it holds, and the loss
        is normalised by the whole minibatch's counts, so the summed gradients are the
        minibatch's gradient whatever the number of processes.
        """
        learner = self.learners[index]
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
                stats = self._minibatch_step(index, idx, advantages, returns, epoch, k // size)
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
            "explained_variance": self._explained_variance(returns, buf),
            "epochs": epochs_done,
        }
        for p in net.parameters():
            if not torch.isfinite(p).all():
                raise TrainingDiverged(
                    f"a parameter of {learner.name} is not finite after update {self.update}"
                )
        return out

    def _explained_variance(self, returns, buf) -> float | None:
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

    def _minibatch_step(self, index, idx, advantages, returns, epoch, k) -> torch.Tensor:
        """One optimiser step on this process's rows `idx` of a minibatch; returns its
        float64 statistics [len(UPDATE_STATS)], in the order of `UPDATE_STATS`."""
        cfg, learner = self.config, self.learners[index]
        buf, net = learner.buffer, learner.net

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
        evaluate = self._ddp[index] if self._ddp[index] is not None else net.evaluate
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
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
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
                f"non-finite loss or gradient at update {self.update} (epoch {epoch + 1}, "
                f"minibatch {k + 1}) of {learner.name}: policy {float(total[0]):.4g}, value "
                f"{float(total[1]):.4g}, entropy {float(total[2]):.4g}"
            )
        learner.opt.step()
        return stats

    # --- one update ---------------------------------------------------------------------------
    def step(self) -> dict:
        """One update (rollout + learning); returns its metrics row."""
        cfg = self.config
        self.update += 1
        lr = self.schedule.rate(self.update - 1, self.wall_s)
        for learner in self.learners:
            for group in learner.opt.param_groups:
                group["lr"] = lr
        t0 = time.perf_counter()
        self.collect()
        t1 = time.perf_counter()
        learned = [self.learn(i) for i in range(len(self.learners))]
        t2 = time.perf_counter()
        if self._uses_pool and self.update % cfg.pool_every == 0:
            self.pool.add(self.update, self.learners[0].net, self.learners[0].obs_norm)
        rollout_steps = cfg.rollout_steps * cfg.num_envs * self.game.n_agents
        self.agent_steps += rollout_steps
        # every process keeps the main process's clock, so that all stop together; the tensor
        # lives on the trainer's device because NCCL reduces CUDA tensors only
        clock = [(t2 - t0) if self.dist.is_main else 0.0]
        self.wall_s += float(
            self.dist.sum_(torch.tensor(clock, dtype=torch.float64, device=self.device))
        )
        row = {
            "update": self.update,
            "agent_steps": self.agent_steps,
            "env_steps": self.agent_steps // self.game.n_agents,
            "wall_s": self.wall_s,
            "rollout_s": t1 - t0,
            "update_s": t2 - t1,
            "rollout_agent_steps_per_s": rollout_steps / (t1 - t0),
            "update_agent_steps_per_s": rollout_steps / (t2 - t1),
            "lr": lr,
            **self.outcomes.summary(self.plan.labels, self.dist.sum_),
            "rss_mb": current_rss_mb(),
            "peak_rss_mb": peak_rss_mb(),
        }
        for i, stats in enumerate(learned):
            suffix = "" if i == 0 else "_team1"
            row.update({f"{k}{suffix}": v for k, v in stats.items()})
        return row

    def columns(self) -> list[str]:
        """The metrics columns of this run (fixed at start)."""
        cols = [
            "update",
            "agent_steps",
            "env_steps",
            "wall_s",
            "rollout_s",
            "update_s",
            "rollout_agent_steps_per_s",
            "update_agent_steps_per_s",
            "episodes",
            "episode_length",
            "return_team0",
            "return_team1",
        ]
        for label in self.plan.labels:
            cols += [f"{w}/{label}" for w in OUTCOME_COLUMNS]
        learned = ["lr", *LEARN_COLUMNS]
        cols += learned
        if len(self.learners) > 1:
            cols += [f"{k}_team1" for k in learned if k != "lr"]
        return cols + ["rss_mb", "peak_rss_mb"]

    # --- checkpoints --------------------------------------------------------------------------
    def local_state(self) -> dict:
        """What this process holds for its games: environment, recurrent states, returns."""
        return {
            "games": list(self.games),
            "env": self.venv.snapshot(),
            "first": self.first,
            "dead": self.dead,
            "state_vectors": self.state_vectors,
            "learners": [learner.local_state() for learner in self.learners],
            "frozen_local": [p.local_state() for p in self.frozen],
            "unshaped_running": self.outcomes.running,
        }

    def state_dict(self, ranks: list[dict]) -> dict:
        """The checkpoint: the shared state and every process's `local_state` (`ranks`)."""
        return {
            **self.policy_payload(),
            "agent_steps": self.agent_steps,
            "wall_s": self.wall_s,
            "lr_schedule": self.schedule.state_dict(),
            "evaluation": self.evaluator.state_dict(),
            "world_size": self.dist.world,
            "frozen": [p.state_dict() for p in self.frozen],
            "pool": self.pool.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "generator": self.generator.get_state(),
                "numpy": self.rng.bit_generator.state,
            },
            "ranks": ranks,
        }

    def policy_payload(self) -> dict:
        """The learners' policies as a policy file (`baselines.checkpoint.load_policy`)."""
        return {
            "format": FORMAT,
            "gigastep_player": "ppo",
            "config": asdict(self.config),
            "game": asdict(self.game),
            "policy_spec": self.spec.to_dict(),
            "update": self.update,
            "learners": [learner.state_dict() for learner in self.learners],
        }

    def load_state_dict(self, ckpt: dict) -> None:
        """Continue from a checkpoint of a run with this config (see `state_dict`)."""
        if [s["name"] for s in ckpt["learners"]] != [x.name for x in self.learners]:
            raise ValueError("the checkpoint's learners differ from this run's")
        if int(ckpt["world_size"]) != self.dist.world:
            raise ValueError(
                f"the checkpoint was written by {ckpt['world_size']} process(es); resume it "
                f"with as many (this run has {self.dist.world})"
            )
        local = ckpt["ranks"][self.dist.rank]
        for learner, state, mine in zip(
            self.learners, ckpt["learners"], local["learners"], strict=True
        ):
            learner.load_state_dict(state, mine)
        if "frozen_h" in local:  # written before players kept local states of their own
            local["frozen_local"] = [{"h": h} for h in local["frozen_h"]]
        for player, state, mine in zip(
            self.frozen, ckpt["frozen"], local["frozen_local"], strict=True
        ):
            player.load_state_dict(state)
            player.load_local_state(mine)
        self.pool.load_state_dict(ckpt["pool"])
        torch.set_rng_state(ckpt["rng"]["torch"])
        self.generator.set_state(ckpt["rng"]["generator"].cpu())
        self.rng.bit_generator.state = ckpt["rng"]["numpy"]
        self.venv.restore(local["env"])
        self.obs = self.venv.last_obs
        self.first = local["first"].to(self.device)
        self.dead = local["dead"].to(self.device)
        if "unshaped_running" in local:  # else a checkpoint from before it was logged
            self.outcomes.running.copy_(local["unshaped_running"])
        sv = local["state_vectors"]
        self.state_vectors = None if sv is None else sv.to(self.device)
        self.update, self.agent_steps = int(ckpt["update"]), int(ckpt["agent_steps"])
        self.wall_s = float(ckpt["wall_s"])
        if "lr_schedule" in ckpt:
            saved = LRSchedule.from_state_dict(ckpt["lr_schedule"])
        else:  # a checkpoint from before the schedule was saved: anchored at 0
            old = ckpt["config"]
            saved = LRSchedule(old["lr"], old["anneal_lr"], old["updates"], old["time_budget_s"])
        if "evaluation" in ckpt:
            self.evaluator.load_state_dict(ckpt["evaluation"])
        cfg = self.config
        self.schedule = saved.resumed(cfg.updates, cfg.time_budget_s, self.update, self.wall_s)

    def _out_of_time(self) -> bool:
        budget = self.config.time_budget_s
        return budget > 0 and self.wall_s >= budget

    def save(self, out: Path) -> Path | None:
        """Write a checkpoint (the main process writes; every process sends its games)."""
        ranks = self.dist.gather(self.local_state())
        path = None
        if ranks is not None:  # the main process: `gather` returns None on the others
            payload = self.state_dict(ranks)
            path = save_checkpoint(out, self.update, payload, self.config.keep_checkpoints)
        self.dist.barrier()
        return path

    # --- the run ------------------------------------------------------------------------------
    def run(self) -> Path:
        """Train `config.updates` updates into `config.out` (resuming with `config.resume`);
        returns the run folder, which this run holds locked (`baselines.runfolder.hold`)."""
        out = Path(self.config.out)
        with hold_run_folder(out, self.dist, self.device):
            return self._run(out)

    def _run(self, out: Path) -> Path:
        cfg, main = self.config, self.dist.is_main
        resuming = cfg.resume and (out / "checkpoint.pt").exists()
        if resuming:
            path = out / "checkpoint.pt"
            ckpt = load_checkpoint(path, self.device)
            runfolder.check_resumable(
                asdict(cfg), self.game.scenario_hash, self.spec.to_dict(), ckpt, path
            )
            try:
                self.load_state_dict(ckpt)
            except (KeyError, IndexError, TypeError, RuntimeError) as err:
                what = " ".join(str(err).split())[:300]
                raise ValueError(f"{path}: cannot continue from it ({what!r})") from None
        else:
            if cfg.resume and main:
                print(
                    f"ppo: {out} holds no checkpoint (the run stopped before its first); "
                    "starting it again from update 0 with its config",
                    file=sys.stderr,
                )
            elif not cfg.resume and holds_checkpoint(out):
                raise ValueError(
                    f"{out} already holds a run; pass --resume to continue it or "
                    "choose another --out"
                )
            self.start()
        self.dist.barrier()  # every process has checked the folder before it is written
        if main:
            out.mkdir(parents=True, exist_ok=True)
            info = dumps(
                cfg,
                scenario_name=self.game.name,
                world_size=self.dist.world,
                scenario_hash=self.game.scenario_hash,
            )
            _files.write_text(out / "config.json", info)
            if getattr(self, "warm_started", None):
                import json

                text = json.dumps(self.warm_started, indent=2)
                _files.write_text(out / "warm_start.json", text)
                print(f"ppo: warm start from {cfg.warm_start}: {text}", file=sys.stderr)
        resumed = (self.update, self.agent_steps) if resuming else (None, None)
        log = _Log(out, self.columns(), resumed, cfg, main)
        if main:
            self.evaluator.open(out, resumed)
        bar = _progress(cfg, self.update, main)
        try:
            while self.update < cfg.updates and not self._out_of_time():
                row = self.step()
                log.log(row)
                bar.update(1)
                bar.set_postfix_str(_postfix(row, self.plan.labels), refresh=False)
                last = self.update == cfg.updates or self._out_of_time()
                if main and self.evaluator.due(self.update, last):
                    self.evaluator.evaluate(self, out)
                if self.update % cfg.checkpoint_every == 0 or last:
                    self.save(out)
                    log.plot()
        finally:
            bar.close()
            log.close()
            self.evaluator.close()
        return out


@contextlib.contextmanager
def hold_run_folder(out: Path, dist: Dist, device=None) -> Iterator[None]:
    """Hold `out`'s lock (`baselines.runfolder.hold`, on the main process: all processes
    write one folder) and remove the temporaries an interrupted run left there; when the
    main process cannot lock it, every process raises `RunFolderBusy`."""
    with contextlib.ExitStack() as stack:
        failure: ValueError | None = None
        if dist.is_main:
            try:
                stack.enter_context(runfolder.hold(out))
                runfolder.remove_stale_temporaries(out)
            except ValueError as err:
                failure = err
        if dist.enabled:
            flag = torch.tensor([1.0 if failure else 0.0], dtype=torch.float64, device=device)
            if float(dist.sum_(flag)) and failure is None:
                failure = runfolder.RunFolderBusy(f"{out}: the main process could not lock it")
        if failure is not None:
            raise failure
        yield


class _Evaluate(torch.nn.Module):
    """`ActorCritic.evaluate` as a module's forward, for DistributedDataParallel."""

    def __init__(self, net: ActorCritic):
        super().__init__()
        self.net = net

    def forward(self, *batch):
        return self.net.evaluate(*batch)


class _Log:
    """The metrics logger on the main process; nothing elsewhere."""

    def __init__(self, out, columns, resumed, cfg: PPOConfig, main: bool):
        update, step = resumed
        self.logger = None
        if main:
            self.logger = MetricsLogger(
                out, columns, update, cfg.tensorboard, cfg.plots, resume_step=step
            )

    def __getattr__(self, name):
        if self.logger is None:
            return lambda *a, **k: None
        return getattr(self.logger, name)


def _normalize_frozen(player: FrozenPlayer, raw):
    if isinstance(raw, tuple):
        return (raw[0], player.normalizer(raw[1]))
    return raw if raw.dtype == torch.uint8 else player.normalizer(raw)


def _progress(cfg: PPOConfig, start: int, main: bool = True):
    from tqdm import tqdm

    return tqdm(
        total=cfg.updates,
        initial=start,
        disable=not (cfg.progress and main),
        unit="update",
        dynamic_ncols=True,
        desc="ppo",
    )


def _postfix(row: dict, labels) -> str:
    rate = row["agent_steps"] / max(row["wall_s"], 1e-9)
    parts = [f"{rate / 1e3:.0f}k agent-steps/s"]
    for label in labels:
        w = row.get(f"win_rate/{label}")
        if w is not None and label != "self":
            parts.append(f"win {label} {w:.2f}")
    return ", ".join(parts)


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed buffers in the heap instead of returning them to the OS.

    A rollout and an update allocate the same large tensors every time; glibc hands blocks
    above its mmap threshold back to the OS when they are freed, so each step page-faults
    them in again (about a quarter of an update's CPU time here). Raising the mmap and trim
    thresholds (`mallopt`) keeps them. Returns whether it was applied: glibc on Linux only,
    and not when GIGASTEP_MALLOC_TUNING is off (an on/off variable,
    `gigastep._util.environ.flag`: any other value is a ValueError naming it).
    """
    import ctypes
    import sys

    from gigastep._util.environ import flag

    wanted = flag("GIGASTEP_MALLOC_TUNING", True)  # checked on every platform
    if not sys.platform.startswith("linux") or not wanted:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    big = ctypes.c_int(2**31 - 1)
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, big)) and bool(libc.mallopt(m_trim_threshold, big))
