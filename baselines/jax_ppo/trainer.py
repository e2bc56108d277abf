"""The JAX run loop: `--updates` calls of the compiled update, metrics, checkpoints, resume.

`JaxTrainer(config).run()` trains `config.seeds` runs (seeds `seed`, `seed + 1`, ...) in
one program: the update is `jax.vmap`-ed over a leading run axis of the `TrainState`, so K
runs cost one compile and one call per update. With one seed, the run folder is
`config.out` (the PyTorch trainer's layout); with K, each run has its own folder
`out/seed_<s>` holding a complete single-seed run (config.json with `seeds=1`, metrics,
checkpoints), resumable on its own, and `out/config.json` records the K-run config.

The learning rate follows the PyTorch trainer's schedule (`baselines.schedule.LRSchedule`:
over `--updates` and `--time-budget-s`, checkpointed, continued across a resume with another
horizon). `--eval-every` evaluates each run as the PyTorch trainer does
(`baselines.evaluator.Evaluator`: eval.csv/jsonl with Wilson intervals, best.pt): the run's
policy, in the checkpoint format both frameworks read, plays as a PyTorch player in
`gigastep.eval.matches`.

Pool and checkpoint-file opponents play inside the update (`baselines.jax_ppo.frozen`);
with `--train-both` the state holds a second learner (`TrainState.learner`). Options the
JAX side does not support fail at start, naming the option (`unsupported`): image
observations, several processes, --compile, --init-from and --agent-steps. `--threads` is
PyTorch's and is ignored.
Metrics columns are the PyTorch trainer's; since the rollout and the learning are one
program, `rollout_s` and `rollout_agent_steps_per_s` are empty and `update_s` is the whole
update.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from gigastep._util import files as _files

from .. import runfolder
from ..checkpoint import FORMAT, holds_checkpoint, load_checkpoint, save_checkpoint
from ..config import PPOConfig, dumps, validate
from ..distributed import env_int
from ..evaluator import Evaluator
from ..metrics import current_rss_mb, peak_rss_mb
from ..schedule import LRSchedule
from . import convert, frozen, policy
from .state import TrainState
from .update import Setup, initial_state, make_optimizer, make_update

__all__ = ["RUNS", "JaxTrainer", "make_setup", "unsupported"]

RUNS = "runs"
"""The name of the vmap axis over the runs of `--seeds`."""


def unsupported(config: PPOConfig) -> str | None:
    """Why `--framework jax` cannot run `config` (None: it can)."""
    if env_int(os.environ, "WORLD_SIZE", "1", 1) > 1:
        return "several processes (torchrun) are not supported by --framework jax"
    if config.encoder in ("cnn", "both"):
        return (
            f"--encoder {config.encoder} is not supported by --framework jax (vector and "
            "entity observations only; train it with --framework torch)"
        )
    if config.init_from or config.agent_steps:
        flag = "--init-from" if config.init_from else "--agent-steps"
        return (
            f"{flag} is an option of --framework torch (the fine-tuning of the few-shot protocol)"
        )
    if config.compile:
        return (
            "--compile compiles the PyTorch trainer's acting step; --framework jax compiles "
            "its whole update already (drop --compile)"
        )
    return None


def make_setup(config: PPOConfig) -> Setup:
    """The static `Setup` of a config (scenario built, options checked, before compute).

    Raises:
        ValueError: a bad config, or an option the JAX side does not support (named).
    """
    from ..envs import game_spec_from_config, training_env, unshaped_config
    from ..matchmaking import Rows, make_plan
    from ..train import policy_spec

    validate(config)
    reason = unsupported(config)
    if reason:
        raise ValueError(reason)
    env = training_env(config.scenario, config.env, config.shooter_credit)
    game = game_spec_from_config(env.config, env.spec.name if env.spec else config.scenario)
    spec = policy_spec(config, game)
    policy.check_spec(spec)
    plan = make_plan(config, game)
    rows = Rows.of(plan.blocks("learner0"), game, game.type_vocab, "cpu")
    seats = frozen.seat_count(env.config.max_episode_length, config.rollout_steps)
    players = tuple(
        _frozen_player(
            name, opponent, spec, Rows.of(plan.blocks(name), game, game.type_vocab, "cpu"), seats
        )
        for name, opponent in plan.frozen
    )
    second = None
    if config.train_both:
        other = Rows.of(plan.blocks("learner1"), game, game.type_vocab, "cpu")
        second = tuple(
            x.numpy() for x in (other.index, other.game, other.team, other.slot, other.type_id)
        )
    return Setup(
        config=config,
        game=game,
        env_config=env.config,
        score=unshaped_config(config.scenario, env.config),
        spec=spec,
        scripted=plan.scripted(),
        rows=rows.index.numpy(),
        row_game=rows.game.numpy(),
        row_team=rows.team.numpy(),
        row_slot=rows.slot.numpy(),
        row_type=rows.type_id.numpy(),
        game_label=plan.game_label,
        game_team=plan.game_team,
        labels=tuple(plan.labels),
        frozen=players,
        second=second,
    )


def _frozen_player(name: str, opponent, spec, rows, seats: int) -> frozen.Frozen:
    """The `Frozen` player `name` of the plan: a pool part, or a checkpoint file's policy
    (loaded and checked against the run's policy, as the PyTorch trainer checks it)."""
    from ..matchmaking import check_file_opponent

    where = dict(rows=rows.index.numpy(), row_game=rows.game.numpy(), row_type=rows.type_id.numpy())
    if opponent.kind == "pool":
        return frozen.Frozen(name, "pool", spec, seats=seats, **where)
    loaded = convert.load_jax_policy(opponent.path)
    check_file_opponent(opponent.path, loaded.spec, spec)
    team = next(iter(loaded.params))
    return frozen.Frozen(
        name,
        "file",
        loaded.spec,
        source=str(opponent.path),
        params={k: np.asarray(v) for k, v in loaded.params[team].items()},
        obs_norm={k: np.asarray(v) for k, v in loaded.obs_norm[team].items()},
        **where,
    )


def _jax_device(name: str):
    if name == "cpu":
        return jax.devices("cpu")[0]
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        raise ValueError(f"--device {name}: JAX has no GPU backend (install jax[cuda12])") from None
    index = int(name.split(":")[1]) if ":" in name else 0
    if index >= len(gpus):
        raise ValueError(f"--device {name}: JAX sees {len(gpus)} GPU(s)")
    return gpus[index]


class JaxTrainer:
    """`config.seeds` PPO runs in JAX (see the module doc)."""

    def __init__(self, config: PPOConfig):
        self.config = config
        self.setup = make_setup(config)
        self.device = _jax_device(config.device)
        self.seeds = [config.seed + i for i in range(config.seeds)]
        self.update = 0
        self.agent_steps = 0
        self.wall_s = 0.0
        self.schedule = LRSchedule(
            config.lr, config.anneal_lr, config.updates, config.time_budget_s
        )
        """The learning-rate schedule of every run (they share the config and the clock)."""
        symmetric = self.setup.game.symmetric
        self.evaluators = [Evaluator(self.run_config(i), symmetric) for i in range(config.seeds)]
        """Each run's evaluations (`--eval-every`; idle when 0)."""
        if len(self.seeds) > 1:
            fn = jax.vmap(make_update(self.setup, RUNS), in_axes=(0, None), axis_name=RUNS)
        else:
            fn = make_update(self.setup)
        self._update = jax.jit(fn, donate_argnums=0)
        self.state: TrainState
        """Every run's `TrainState` (stacked on a leading run axis with several seeds); set
        by `run` (fresh or resumed)."""
        self._compiled: Any = None
        self.compile_s = 0.0
        """Seconds spent compiling the update (not counted in wall_s)."""

    # --- folders and state ------------------------------------------------------------------
    def run_dirs(self) -> list[Path]:
        """The folder of each run."""
        out = Path(self.config.out)
        if len(self.seeds) == 1:
            return [out]
        return [out / f"seed_{s}" for s in self.seeds]

    def run_config(self, i: int) -> PPOConfig:
        """The single-seed config of run i (what its folder records)."""
        if len(self.seeds) == 1:
            return self.config
        return dataclasses.replace(
            self.config, seed=self.seeds[i], seeds=1, out=str(self.run_dirs()[i])
        )

    def _fresh(self) -> TrainState:
        self.warm_started: list[list[dict]] = []
        states = []
        for s in self.seeds:
            if self.config.warm_start:
                states.append(self._warm_state(s))
            else:
                with jax.default_device(self.device):
                    states.append(initial_state(self.setup, s))
        return self._stack(states)

    def _warm_state(self, seed: int) -> TrainState:
        """`--warm-start`: run `seed`'s fresh state with every learner cloned from the scripted
        player by the PyTorch trainer's `baselines.warmstart.warm_start` (on a `TorchVecEnv`
        of the run's batch and opponents, from the same initial networks as `initial_state`);
        the results go to `warm_started`."""
        import torch

        from ..envs import gigastep_game
        from ..normalize import ObsNormalizer
        from ..policies import ActorCritic
        from ..warmstart import warm_start

        cfg, setup, spec = self.config, self.setup, self.setup.spec
        _, factory = gigastep_game(cfg.scenario, cfg.env, cfg.shooter_credit)
        venv = factory(cfg.num_envs, seed, "cpu", setup.scripted, False)
        learners = []
        with torch.random.fork_rng():
            torch.manual_seed(seed)  # the networks `policy.init_params` draws
            for i, view in enumerate(setup.learners):
                rows = SimpleNamespace(
                    index=torch.as_tensor(view.rows), game=torch.as_tensor(view.row_game)
                )
                types = torch.nn.functional.one_hot(
                    torch.as_tensor(view.row_type), spec.n_types
                ).float()
                net, norm = (
                    ActorCritic(spec),
                    ObsNormalizer(spec.obs_norm_size, "cpu", cfg.norm_obs),
                )
                learners.append((f"learner{i}", net, norm, rows, types))
            self.warm_started.append(
                warm_start(venv, learners, cfg.warm_start, seed, cfg.warm_start_updates)
            )
        with jax.default_device(self.device):
            state = initial_state(setup, seed)
            for i, (_, net, norm, _, _) in enumerate(learners):
                params = policy.params_from_torch(net.state_dict())
                part = state.learner(i)._replace(
                    params=params,
                    opt=make_optimizer(cfg).init(params),
                    obs_norm=convert.moments_from_torch(norm.state_dict()),
                )
                state = state.with_learner(i, part)
        return state

    def _stack(self, states: list[TrainState]) -> TrainState:
        if len(states) == 1:
            return jax.device_put(states[0], self.device)
        return jax.device_put(jax.tree_util.tree_map(lambda *x: jnp.stack(x), *states), self.device)

    def run_state(self, i: int) -> TrainState:
        """Run i's `TrainState` (a slice of the stacked state with several seeds)."""
        if len(self.seeds) == 1:
            return self.state
        return jax.tree_util.tree_map(lambda x: x[i], self.state)

    # --- checkpoints ------------------------------------------------------------------------
    def policy_payload(self, i: int, state: TrainState | None = None) -> dict:
        """Run i's policy as a policy file (as `Trainer.policy_payload`: `load_policy` and
        the `ppo` player read it); `state`: run i's host `TrainState` when already fetched."""
        cfg, setup = self.run_config(i), self.setup
        if state is None:
            state = jax.device_get(self.run_state(i))
        learners = []
        for k in range(len(setup.learners)):
            part = state.learner(k)
            model = policy.params_to_torch(part.params)
            if part.value_norm is not None:  # with --value-norm
                model.update(convert.value_norm_to_torch(part.value_norm))
            adam = convert.adam_to_torch(setup.spec, part.params, part.opt, cfg.lr)
            learners.append(
                {
                    "name": f"learner{k}",
                    "team": k if cfg.train_both else cfg.team,
                    "model": model,
                    "optimizer": adam,
                    "obs_norm": convert.moments_to_torch(part.obs_norm),
                    "state_norm": convert.moments_to_torch(part.state_norm),
                    "rewards": convert.moments_to_torch(part.rew_norm),
                }
            )
        return {
            "format": FORMAT,
            "gigastep_player": "ppo",
            "framework": "jax",
            "config": dataclasses.asdict(cfg),
            "game": dataclasses.asdict(setup.game),
            "policy_spec": setup.spec.to_dict(),
            "update": self.update,
            "learners": learners,
        }

    def payload(self, i: int) -> dict:
        """Run i's checkpoint (the PyTorch trainer's layout, plus `jax_state`)."""
        cfg = self.run_config(i)
        state = jax.device_get(self.run_state(i))
        return {
            **self.policy_payload(i, state),
            "agent_steps": self.agent_steps,
            "wall_s": self.wall_s,
            "lr_schedule": self.schedule.state_dict(),
            "evaluation": self.evaluators[i].state_dict(),
            "world_size": 1,
            "frozen": [],
            "pool": {"capacity": cfg.pool_size, "snapshots": []},
            "jax_state": convert.leaves_to_torch(state),
        }

    def save(self) -> None:
        for i, folder in enumerate(self.run_dirs()):
            save_checkpoint(folder, self.update, self.payload(i), self.config.keep_checkpoints)

    def load(self) -> None:
        """Continue every run from its folder's latest checkpoint."""
        with jax.default_device(self.device):
            template = initial_state(self.setup, self.seeds[0])
        states, counters, schedules = [], set(), []
        game, spec = self.setup.game, self.setup.spec.to_dict()
        for i, (folder, evaluator) in enumerate(zip(self.run_dirs(), self.evaluators, strict=True)):
            path = folder / "checkpoint.pt"
            ckpt = load_checkpoint(path)
            if ckpt.get("framework") != "jax" or "jax_state" not in ckpt:
                raise ValueError(
                    f"{folder / 'checkpoint.pt'} was written by the PyTorch trainer; resume "
                    "it with --framework torch"
                )
            config = dataclasses.asdict(self.run_config(i))
            runfolder.check_resumable(config, game.scenario_hash, spec, ckpt, path)
            try:
                states.append(convert.leaves_from_torch(template, ckpt["jax_state"]))
            except (KeyError, IndexError, TypeError, ValueError) as err:
                what = " ".join(str(err).split())[:300]
                raise ValueError(f"{path}: its JAX state does not fit this run ({what})") from None
            counters.add((int(ckpt["update"]), int(ckpt["agent_steps"]), float(ckpt["wall_s"])))
            if "lr_schedule" in ckpt:
                schedules.append(LRSchedule.from_state_dict(ckpt["lr_schedule"]))
            else:  # written before the schedule was saved: anchored at 0
                old = ckpt["config"]
                schedules.append(
                    LRSchedule(old["lr"], old["anneal_lr"], old["updates"], old["time_budget_s"])
                )
            if "evaluation" in ckpt:
                evaluator.load_state_dict(ckpt["evaluation"])
        if len(counters) != 1:
            raise ValueError(f"the runs' checkpoints are at different updates: {sorted(counters)}")
        self.update, self.agent_steps, self.wall_s = counters.pop()
        self.state = self._stack(states)
        cfg = self.config
        self.schedule = schedules[0].resumed(
            cfg.updates, cfg.time_budget_s, self.update, self.wall_s
        )

    # --- metrics ----------------------------------------------------------------------------
    def columns(self) -> list[str]:
        """The PyTorch trainer's metrics columns for this run."""
        from ..train import Trainer

        plan = SimpleNamespace(labels=list(self.setup.labels))
        learners = [None] * len(self.setup.learners)
        return Trainer.columns(cast(Trainer, SimpleNamespace(plan=plan, learners=learners)))

    def rows(self, stats: dict, seconds: float, lr: float) -> list[dict]:
        """One metrics row per run from the update's stats (host numpy)."""
        from ..collect import outcome_row
        from ..learn import LEARN_COLUMNS

        cfg, labels = self.config, self.setup.labels
        steps = cfg.rollout_steps * cfg.num_envs * self.setup.game.n_agents
        suffixes = ["", "_team1"][: len(self.setup.learners)]
        out = []
        for i in range(len(self.seeds)):
            s = jax.tree_util.tree_map(lambda x, i=i: x[i] if len(self.seeds) > 1 else x, stats)
            row = {
                "update": self.update,
                "agent_steps": self.agent_steps,
                "env_steps": self.agent_steps // self.setup.game.n_agents,
                "wall_s": self.wall_s,
                "rollout_s": None,
                "update_s": seconds,
                "rollout_agent_steps_per_s": None,
                "update_agent_steps_per_s": steps * len(self.seeds) / seconds,
                "lr": lr,
                **outcome_row(np.asarray(s["counts"], np.float64), s["episode"], labels),
                "rss_mb": current_rss_mb(),
                "peak_rss_mb": peak_rss_mb(),
            }
            for suffix in suffixes:
                for name in LEARN_COLUMNS:
                    value = s[name + suffix]
                    if name == "epochs":
                        row[name + suffix] = int(value)
                    elif name == "explained_variance":
                        ev = float(value)
                        row[name + suffix] = ev if np.isfinite(ev) else None
                    else:
                        row[name + suffix] = float(value)
            out.append(row)
        return out

    # --- the run ----------------------------------------------------------------------------
    def step(self) -> dict:
        """One update of every run; returns the stats (host numpy arrays)."""
        from ..train import TrainingDiverged

        cfg = self.config
        self.update += 1
        lr = self.schedule.rate(self.update - 1, self.wall_s)
        t0 = time.perf_counter()
        update = self._compiled if self._compiled is not None else self._update
        self.state, stats = update(self.state, jnp.float32(lr))
        stats = jax.device_get(stats)
        seconds = time.perf_counter() - t0
        finite = np.atleast_1d(stats["finite"])
        if "finite_team1" in stats:
            finite = finite & np.atleast_1d(stats["finite_team1"])
        if not finite.all():
            bad = [s for s, ok in zip(self.seeds, finite, strict=True) if not ok]
            raise TrainingDiverged(
                f"non-finite gradient or parameter at update {self.update} (seeds {bad})"
            )
        self.agent_steps += cfg.rollout_steps * cfg.num_envs * self.setup.game.n_agents
        self.wall_s += seconds
        return {"stats": stats, "seconds": seconds, "lr": lr}

    def run(self) -> Path:
        """Train `config.updates` updates (resuming with `config.resume`); returns `out`.
        Holds `out` and every run's folder locked (`baselines.runfolder.hold`)."""
        cfg, dirs = self.config, self.run_dirs()
        with contextlib.ExitStack() as stack:
            for folder in dict.fromkeys([Path(cfg.out), *dirs]):
                stack.enter_context(runfolder.hold(folder))
                runfolder.remove_stale_temporaries(folder)
            return self._run(dirs)

    def _run(self, dirs: list[Path]) -> Path:
        from ..metrics import MainProcessLog, progress_bar, progress_postfix

        cfg = self.config
        out = Path(cfg.out)
        resuming = cfg.resume and any((folder / "checkpoint.pt").exists() for folder in dirs)
        if resuming:
            self.load()
        else:
            if cfg.resume:
                print(
                    f"ppo: {out} holds no checkpoint (the run stopped before its first); "
                    "starting it again from update 0 with its config",
                    file=sys.stderr,
                )
            for folder in dirs:
                if not cfg.resume and holds_checkpoint(folder):
                    raise ValueError(
                        f"{folder} already holds a run; pass --resume to continue it or "
                        "choose another --out"
                    )
            self.state = self._fresh()
        extra = {"scenario_name": self.setup.game.name, "world_size": 1}
        extra["scenario_hash"] = self.setup.game.scenario_hash
        out.mkdir(parents=True, exist_ok=True)
        _files.write_text(out / "config.json", dumps(cfg, **extra))
        logs = []
        for i, folder in enumerate(dirs):
            folder.mkdir(parents=True, exist_ok=True)
            if len(dirs) > 1:
                _files.write_text(folder / "config.json", dumps(self.run_config(i), **extra))
            if getattr(self, "warm_started", None):
                text = json.dumps(self.warm_started[i], indent=2)
                _files.write_text(folder / "warm_start.json", text)
                print(f"ppo: warm start from {cfg.warm_start}: {text}", file=sys.stderr)
            resumed = (self.update, self.agent_steps) if resuming else (None, None)
            logs.append(MainProcessLog(folder, self.columns(), resumed, cfg, True))
            self.evaluators[i].open(folder, resumed)
        t0 = time.perf_counter()
        self._compiled = self._update.lower(self.state, jnp.float32(cfg.lr)).compile()
        self.compile_s = time.perf_counter() - t0
        bar = progress_bar(cfg, self.update)
        try:
            while self.update < cfg.updates and not (
                cfg.time_budget_s > 0 and self.wall_s >= cfg.time_budget_s
            ):
                result = self.step()
                rows = self.rows(result["stats"], result["seconds"], result["lr"])
                for log, row in zip(logs, rows, strict=True):
                    log.log(row)
                bar.update(1)
                bar.set_postfix_str(progress_postfix(rows[0], self.setup.labels), refresh=False)
                last = self.update == cfg.updates or (
                    cfg.time_budget_s > 0 and self.wall_s >= cfg.time_budget_s
                )
                for i, (evaluator, folder) in enumerate(zip(self.evaluators, dirs, strict=True)):
                    if evaluator.due(self.update, last):
                        evaluator.evaluate(_EvalView(self, i), folder)
                if self.update % cfg.checkpoint_every == 0 or last:
                    self.save()
                    for log in logs:
                        log.plot()
        finally:
            bar.close()
            for log in logs:
                log.close()
            for evaluator in self.evaluators:
                evaluator.close()
        return out


class _EvalView:
    """Run i of a `JaxTrainer` as `baselines.evaluator.Evaluator.evaluate` reads a trainer:
    its policy file, counters and game, and the torch device its evaluation plays on
    (`--device` when torch can use it, else the CPU)."""

    def __init__(self, trainer: JaxTrainer, i: int):
        import torch

        self.trainer, self.i = trainer, i
        self.update, self.agent_steps = trainer.update, trainer.agent_steps
        self.wall_s, self.game = trainer.wall_s, trainer.setup.game
        name = trainer.config.device
        usable = name == "cpu" or (name.startswith("cuda") and torch.cuda.is_available())
        self.device = torch.device(name if usable else "cpu")

    def policy_payload(self) -> dict:
        return self.trainer.policy_payload(self.i)
