"""The PPO training loop: `Trainer` owns a run's state and reads as its table of contents.

`Trainer.run()` starts (or resumes from the folder's checkpoint), then each update:
    1. collect: `rollout_steps` steps of every game of the batch into the learners' buffers
       (`baselines.collect.Collector`; the pool opponents draw their snapshots first).
    2. learn: GAE and `epochs` passes of clipped-PPO minibatch steps on each learner's buffer
       (`baselines.learn.PPOUpdate`).
    3. log: one metrics row (`baselines.metrics`), and the pool's snapshot.
    4. evaluate when due (`baselines.evaluator`), checkpoint when due, and stop at
       `--updates` or `--time-budget-s`.

What the run holds lives here or in the collaborators it owns: the learners
(`baselines.learner.Learner`: policy, optimiser, statistics, buffer), the frozen opponents and
the pool (`baselines.matchmaking`), the games in play (`Collector`), the seeded generators,
the learning-rate schedule and the evaluator; `state_dict`, `local_state` and
`load_state_dict` are the checkpoint's layout.

Determinism: torch, numpy and JAX randomness come from seeded generators whose states are in
every checkpoint, with the environment's key and game states, so a run resumed from a
checkpoint continues exactly as the uninterrupted run would have (bit for bit on CPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from gigastep._util import files as _files

from . import runfolder
from .actor import LoadedPolicy
from .checkpoint import (
    FORMAT,
    holds_checkpoint,
    load_checkpoint,
    load_policy,
    save_checkpoint,
)
from .collect import OUTCOME_COLUMNS, Collector, outcome_row
from .config import PPOConfig, budget_updates, dumps, validate
from .distributed import Dist
from .envs import GameSpec, gigastep_game
from .evaluator import Evaluator
from .learn import (
    LEARN_COLUMNS,
    UPDATE_STATS,
    PPOUpdate,
    TrainingDiverged,
    distributed_evaluate,
)
from .learner import Learner, one_hot
from .matchmaking import (
    FrozenPlayer,
    OpponentPool,
    PoolPlayer,
    Rows,
    check_file_opponent,
    make_plan,
)
from .metrics import (
    MainProcessLog,
    current_rss_mb,
    peak_rss_mb,
    progress_bar,
    progress_postfix,
)
from .policies import PolicySpec
from .schedule import LRSchedule

__all__ = [
    "LEARN_COLUMNS",
    "OUTCOME_COLUMNS",
    "UPDATE_STATS",
    "Learner",
    "Trainer",
    "TrainingDiverged",
    "check_init",
    "hold_run_folder",
    "keep_freed_memory",
    "outcome_row",
    "policy_spec",
]


def policy_spec(config: PPOConfig, game: GameSpec) -> PolicySpec:
    """The architecture a config gives on a game (checked against the observations)."""
    encoder = config.encoder
    needs = {"mlp": "vector", "cnn": "rgb", "both": "rgb_vector", "entity": "entity"}
    suffix = {"vector": "_vec", "rgb": "_rgb", "rgb_vector": "_rgb_vec", "entity": "_ent"}
    if encoder != "auto" and needs[encoder] != game.obs_type:
        raise ValueError(
            f"--encoder {encoder} needs {needs[encoder]} observations, but {game.name} has "
            f"{game.obs_type} observations (use --encoder auto, or a scenario with the "
            f"{suffix[needs[encoder]]} suffix)"
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


def check_init(
    policy: LoadedPolicy, spec: PolicySpec, game: GameSpec, teams: tuple[int, ...]
) -> None:
    """Raise unless a run of policy `spec` on `game` can start from `policy` (`--init-from`):
    the same architecture and observation layout, except what an entity policy reads at
    any size (the observation's length, the team size of the agent-slot one-hot without a
    central critic); every agent that a policy of the run plays (`teams`) must have one of
    the checkpoint's agent types (its one-hot positions, which the run keeps: `game.vocab`).

    Raises:
        ValueError: naming each differing field, with the checkpoint's and the run's values.
    """
    mine, theirs = spec.to_dict(), policy.spec.to_dict()
    ignored = set()
    if spec.obs_type == "entity" and policy.spec.obs_type == "entity":
        ignored.add("vector_size")
    if not (spec.central_critic or policy.spec.central_critic):
        ignored.add("n_slots")
    diff = {
        k: (theirs.get(k), v) for k, v in mine.items() if k not in ignored and theirs.get(k) != v
    }
    where = policy.path or "the checkpoint"
    if diff:
        raise ValueError(
            f"--init-from {where} (trained on {policy.game.name}) does not fit {game.name}: "
            f"its policy differs in {diff} (checkpoint vs run; pass the checkpoint's "
            "architecture flags, and for another team size train an entity policy, "
            "scenarios with the _ent suffix)"
        )
    vocab = policy.game.type_vocab
    played = sorted({game.type_keys[a] for t in teams for a in game.team_agents(t)})
    unknown = [k for k in played if k not in vocab]
    if unknown:
        raise ValueError(
            f"--init-from {where} (trained on {policy.game.name}) does not fit {game.name}: "
            f"the run's policies play agents of types {unknown}, which the checkpoint's "
            f"policy never saw (it knows {list(vocab)})"
        )


def _policy_teams(config: PPOConfig, game: GameSpec) -> tuple[int, ...]:
    """The teams a policy of the run plays: the learners', and the other team where a
    network opponent (self, pool, checkpoint) plays it."""
    from .config import parse_opponents

    if config.train_both:
        return (0, 1)
    kinds = {o.kind for o in parse_opponents(config.opponent, game.symmetric)}
    return (0, 1) if kinds & {"self", "pool", "file"} else (config.team,)


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
        init: LoadedPolicy | None = None,
    ):
        validate(config)
        self.config = config
        self._init = init  # the policy to start from (else --init-from's file, if any)
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
        if config.agent_steps:  # the budget in agent-steps, as a number of updates
            config = dataclasses.replace(config, updates=budget_updates(config, game.n_agents))
            self.config = config
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
        if init is None and config.init_from:  # checked before any game is built
            init = load_policy(config.init_from, self.device)
        if init is not None:
            # the run keeps the checkpoint's type one-hot (its positions and its length)
            game = self.game = dataclasses.replace(game, vocab=init.game.type_vocab)
        self.spec = policy_spec(config, game)
        if init is not None:
            check_init(init, self.spec, game, _policy_teams(config, game))
        self._init = init
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
        self.learners: list[Learner] = []
        for i, name in enumerate(names):
            rows = Rows.of(self.plan.blocks(name), game, vocab, self.device, self.games)
            team = i if config.train_both else config.team
            self.learners.append(Learner(name, team, self.spec, rows, config, self.device))
        # each learner's sequence replay (behind DistributedDataParallel under torchrun)
        self._evaluate = [
            distributed_evaluate(x.net, self.dist, self.device) for x in self.learners
        ]
        self.frozen = [self._frozen_player(name, spec, vocab) for name, spec in self.plan.frozen]
        self.pool = OpponentPool(config.pool_size)
        self.generator = torch.Generator(self.device).manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        self.collector = Collector(
            config,
            game,
            self.spec,
            self.venv,
            self.games,
            self.plan,
            self.learners,
            self.frozen,
            self.dist.sum_,
            self.device,
        )
        self.ppo = PPOUpdate(config, self.dist, self.generator, self.device)
        self.evaluator = Evaluator(config, game.symmetric)
        self.update = 0
        self.agent_steps = 0
        self.wall_s = 0.0
        self.schedule = LRSchedule(
            config.lr, config.anneal_lr, config.updates, config.time_budget_s
        )

    # --- set-up -------------------------------------------------------------------------------
    def _frozen_player(self, name, opponent, vocab) -> FrozenPlayer | PoolPlayer:
        rows = Rows.of(self.plan.blocks(name), self.game, vocab, self.device, self.games)
        types = one_hot(rows.type_id, self.spec.n_types)
        if opponent.kind != "file":
            args = (name, self.spec, rows, types, self.device, self.config.norm_obs)
            return PoolPlayer(*args) if opponent.kind == "pool" else FrozenPlayer(*args)
        policy = load_policy(opponent.path, self.device)
        check_file_opponent(opponent.path, policy.spec, self.spec)
        # The file's own architecture: a pool of checkpoints may mix cores and widths.
        player = FrozenPlayer(name, policy.spec, rows, types, self.device, self.config.norm_obs)
        team = next(iter(policy.teams))
        model, norm = policy.nets[team].state_dict(), policy.normalizers[team].state_dict()
        player.load(model, norm, opponent.path)
        return player

    def start(self) -> None:
        """Fresh games and, when the pool is used, the initial policy as its first member
        (with `--warm-start`, the cloned policy: `warm_up` runs first)."""
        if self._init is not None:
            self.init_from(self._init)
        if self.config.warm_start:
            self.warm_up()
        self.collector.reset()
        if self._uses_pool:
            self.pool.add(0, self.learners[0].net, self.learners[0].obs_norm)

    def init_from(self, policy: LoadedPolicy) -> None:
        """`--init-from`: every learner takes the weights and observation statistics of the
        policy's net for its team (else its first), keeping its fresh optimiser."""
        for learner in self.learners:
            team = learner.team if learner.team in policy.nets else policy.teams[0]
            learner.net.load_state_dict(policy.nets[team].state_dict())
            learner.obs_norm.load_state_dict(policy.normalizers[team].state_dict())

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

    # --- one update ---------------------------------------------------------------------------
    def step(self) -> dict:
        """One update (collect, then learn); returns its metrics row."""
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
        return self._row(lr, (t0, t1, t2), learned)

    @torch.no_grad()
    def collect(self) -> None:
        """Rollout `update` into the learners' buffers: the pool players draw their
        snapshots, then the games are played (`Collector.collect`)."""
        self._swap_pool_players()
        self.collector.collect(self.update)

    def _swap_pool_players(self) -> None:
        """Draw each pool player's snapshot for the episodes that start in this rollout."""
        pool = [p for p in self.frozen if isinstance(p, PoolPlayer)]
        for p, snap in zip(pool, self.pool.sample(self.rng, len(pool)), strict=True):
            p.begin_rollout(snap, self.collector.first[p.rows.game])

    def learn(self, index: int) -> dict:
        """The PPO update of learner `index` on its filled buffer (`PPOUpdate.learn`); returns
        its `LEARN_COLUMNS`."""
        return self.ppo.learn(self.learners[index], self._evaluate[index], self.update)

    def _row(self, lr: float, times: tuple[float, float, float], learned: list[dict]) -> dict:
        """The update's metrics row from its learning rate, the clock's readings before
        collecting, before learning and after (`time.perf_counter`), and the learners'
        `LEARN_COLUMNS`; the step and clock counters advance (every process keeps the main
        process's clock, so that all stop together)."""
        t0, t1, t2 = times
        rollout_steps = self.config.rollout_steps * self.config.num_envs * self.game.n_agents
        self.agent_steps += rollout_steps
        # the tensor lives on the trainer's device because NCCL reduces CUDA tensors only
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
            **self.collector.outcomes.summary(self.plan.labels, self.dist.sum_),
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
        """What this process holds for its games: environment, recurrent states, returns
        (the games' part is `Collector.load_local_state`'s)."""
        return {
            "games": list(self.games),
            "env": self.collector.venv.snapshot(),
            "first": self.collector.first,
            "dead": self.collector.dead,
            "state_vectors": self.collector.state_vectors,
            "learners": [learner.local_state() for learner in self.learners],
            "frozen_local": [p.local_state() for p in self.frozen],
            "unshaped_running": self.collector.outcomes.running,
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
        self.collector.load_local_state(local)
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
        resumed = self._start_or_resume(out)
        self.dist.barrier()  # every process has checked the folder before it is written
        if main:
            self._write_run_files(out)
        log = MainProcessLog(out, self.columns(), resumed, cfg, main)
        if main:
            self.evaluator.open(out, resumed)
        bar = progress_bar(cfg, self.update, main)
        try:
            while not self._finished():
                row = self.step()  # collect, learn
                log.log(row)
                bar.update(1)
                bar.set_postfix_str(progress_postfix(row, self.plan.labels), refresh=False)
                last = self._finished()
                if main and self.evaluator.due(self.update, last):
                    self.evaluator.evaluate(self, out)  # before the checkpoint, which keeps it
                if self.update % cfg.checkpoint_every == 0 or last:
                    self.save(out)
                    log.plot()
        finally:
            bar.close()
            log.close()
            self.evaluator.close()
        return out

    def _start_or_resume(self, out: Path) -> tuple[int | None, int | None]:
        """Continue from `out`'s checkpoint with --resume, else start afresh; returns the
        (update, agent_steps) resumed from, or (None, None)."""
        cfg = self.config
        path = out / "checkpoint.pt"
        if cfg.resume and path.exists():
            ckpt = load_checkpoint(path, self.device)
            runfolder.check_resumable(
                asdict(cfg), self.game.scenario_hash, self.spec.to_dict(), ckpt, path
            )
            try:
                self.load_state_dict(ckpt)
            except (KeyError, IndexError, TypeError, RuntimeError) as err:
                what = " ".join(str(err).split())[:300]
                raise ValueError(f"{path}: cannot continue from it ({what!r})") from None
            return self.update, self.agent_steps
        if cfg.resume and self.dist.is_main:
            print(
                f"ppo: {out} holds no checkpoint (the run stopped before its first); "
                "starting it again from update 0 with its config",
                file=sys.stderr,
            )
        elif not cfg.resume and holds_checkpoint(out):
            raise ValueError(
                f"{out} already holds a run; pass --resume to continue it or choose another --out"
            )
        self.start()
        return None, None

    def _write_run_files(self, out: Path) -> None:
        """config.json (the resolved config) and, after --warm-start, warm_start.json."""
        cfg = self.config
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

    def _finished(self) -> bool:
        """`--updates` reached, or `--time-budget-s` spent."""
        budget = self.config.time_budget_s
        return self.update >= self.config.updates or (budget > 0 and self.wall_s >= budget)


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
