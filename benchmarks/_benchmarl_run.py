"""BenchMARL's MAPPO on `gigastep.benchmarl.task` for a wall-clock budget, and its policy as a
player of `gigastep.eval.matches.evaluate` (for `benchmarks.external_learning`).

The experiment is BenchMARL's own, unchanged: `Experiment(task=task(scenario, opponent=...),
algorithm_config=MappoConfig.get_from_yaml(), model_config=MlpConfig.get_from_yaml(),
critic_model_config=MlpConfig.get_from_yaml(), config=ExperimentConfig.get_from_yaml())` with
BenchMARL's default hyperparameters (6000 frames per iteration from 10 games, 45 minibatch
iterations of 400 frames, lr 5e-5, MLP 256 x 256 tanh, MAPPO clip 0.2, lambda 0.9), on the CPU,
without loggers, evaluation or checkpoints. BenchMARL stops at `max_n_iters` or `max_n_frames`,
neither of which is a time; so both are left unbounded and a callback ends the run after the
iteration during which the budget ran out (two iterations at least): it raises `BudgetReached`
once that iteration's training is done, and `Experiment.run` closes the experiment and passes
the exception on (BenchMARL prints "Experiment failed and is closing gracefully" on the way,
which here is the normal end).

Needs BenchMARL (docs/install.md); `benchmarks.external_learning` runs this module in the
environment given by `--benchmarl-python`.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from benchmarks._common import check_vector_player, training_throughput

try:
    from benchmarl.experiment.callback import Callback
except ImportError as error:
    raise ImportError(
        f"benchmarks._benchmarl_run needs BenchMARL, which could not be imported ({error}); "
        'install it: pip install "torch==2.13.0" -e ".[benchmarl]" (docs/install.md)'
    ) from error

__all__ = ["BenchMARLPlayer", "Budget", "BudgetReached", "train"]


class BudgetReached(Exception):
    """Raised by the budget callback to end BenchMARL's collection loop."""


class Budget(Callback):
    """Timestamps of each iteration's end of collection and end of training; stops the
    experiment after the iteration during which `budget_s` (from `t_start`) ran out, the
    second iteration at the earliest. (Module level: BenchMARL pickles its callbacks.)"""

    def __init__(self, t_start: float, budget_s: float) -> None:
        super().__init__()
        self.t_start = t_start
        self.budget_s = budget_s
        self.collected: list[float] = []
        self.trained: list[float] = []
        self.frames: list[int] = []
        self.returns: list[float | None] = []

    def on_batch_collected(self, batch) -> None:
        self.collected.append(time.perf_counter())
        self.frames.append(int(batch.numel()))
        mean = float(self.experiment.mean_return)  # NaN in an iteration where no episode ended
        self.returns.append(None if math.isnan(mean) else mean)

    def on_train_end(self, training_td, group: str) -> None:
        if group != list(self.experiment.train_group_map)[-1]:
            return
        self.trained.append(time.perf_counter())
        if len(self.trained) >= 2 and self.trained[-1] - self.t_start >= self.budget_s:
            raise BudgetReached


def train(
    scenario: str,
    opponent: str,
    budget_s: float,
    seed: int,
    folder: Path,
    num_envs: int = 0,
    num_steps: int = 0,
    hidden: int = 0,
    minibatch_iters: int = 0,
) -> dict[str, Any]:
    """Train team 0 against `opponent` for `budget_s` seconds (from before the experiment is
    built); the row fields of `benchmarks.external_learning` plus `player`.

    `num_envs`, `num_steps` (frames per iteration = num_envs x num_steps), `hidden` (one width
    for both MLP layers) and `minibatch_iters` override BenchMARL's defaults where not 0.
    """
    from benchmarl.algorithms import MappoConfig
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models import MlpConfig

    import gigastep
    from gigastep.benchmarl import task

    folder.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    config = ExperimentConfig.get_from_yaml()
    config.sampling_device = config.train_device = config.buffer_device = "cpu"
    config.max_n_frames = None
    config.max_n_iters = 10**9  # the budget callback ends the run
    if num_envs:
        config.on_policy_n_envs_per_worker = num_envs
    if num_steps:
        config.on_policy_collected_frames_per_batch = config.on_policy_n_envs_per_worker * num_steps
    if minibatch_iters:
        config.on_policy_n_minibatch_iters = minibatch_iters
    config.on_policy_minibatch_size = min(
        config.on_policy_minibatch_size, config.on_policy_collected_frames_per_batch
    )
    config.evaluation = config.render = config.create_json = False
    config.loggers = []
    config.checkpoint_interval = 0
    config.checkpoint_at_end = False
    config.save_folder = str(folder)
    model = MlpConfig.get_from_yaml()
    critic = MlpConfig.get_from_yaml()
    if hidden:
        model.num_cells = critic.num_cells = [hidden, hidden]
    algorithm = MappoConfig.get_from_yaml()
    budget = Budget(t_start, budget_s)
    experiment = Experiment(
        task=task(scenario, opponent=opponent),
        algorithm_config=algorithm,
        model_config=model,
        critic_model_config=critic,
        seed=seed,
        config=config,
        callbacks=[budget],
    )
    try:
        experiment.run()
    except BudgetReached:
        pass
    wall_s = time.perf_counter() - t_start
    iters = len(budget.trained)
    if iters == 0:
        raise RuntimeError("BenchMARL ended before its first iteration was trained")
    # collection of iteration i: from the end of iteration i-1's training to its batch
    starts = budget.trained[:-1]
    rollout_s = sum(c - s for c, s in zip(budget.collected[1:iters], starts, strict=True))
    training_s = budget.trained[iters - 1] - budget.trained[0]
    frames = budget.frames[:iters]
    timed = sum(frames[1:])
    game = gigastep.make(scenario)
    n = game.n_agents
    games = config.on_policy_n_envs_per_worker
    group = "team0"
    policy = experiment.group_policies[group]
    policy_file = folder / "policy.pt"
    _save_state_dict(policy.state_dict(), policy_file)
    curve = [
        {
            "update": i + 1,
            "wall_s": t - t_start,
            "env_steps": sum(frames[: i + 1]),
            "mean_return": r,
        }
        for i, (t, r) in enumerate(zip(budget.trained, budget.returns, strict=False))
    ]

    return {
        "updates": iters,
        "env_steps": sum(frames),
        "agent_steps": sum(frames) * n,
        "trained_s": wall_s,
        "compile_s": None,
        "warmup_s": budget.trained[0] - t_start,
        "training_opponents": [[opponent, 1.0]],
        "training_games": [[opponent, games]],
        "hyperparameters": {
            "experiment": _plain(config),
            "algorithm": _plain(algorithm),
            "model": _plain(model),
            "critic_model": _plain(critic),
        },
        "throughput": training_throughput(timed, training_s, rollout_s, n, games),
        "curve": curve,
        "files": {"policy": str(policy_file), "experiment": str(experiment.folder_name)},
        "player": BenchMARLPlayer(policy, group, game.config.vector_size),
    }


def _plain(config: Any) -> dict[str, Any]:
    import dataclasses

    out = {}
    for f in dataclasses.fields(config):
        v = getattr(config, f.name)
        out[f.name] = v if isinstance(v, (int, float, str, bool, list, type(None))) else repr(v)
    return out


def _save_state_dict(state: dict[str, Any], path: Path) -> None:
    """torch.save of the state dict's tensors (loadable with weights_only=True; its other
    entries, such as shapes, are left out), atomically (temporary file, then rename)."""
    import torch

    from gigastep._util.files import atomic_path

    tensors = {k: v.detach().cpu() for k, v in state.items() if isinstance(v, torch.Tensor)}
    with atomic_path(path) as tmp:
        torch.save(tensors, tmp)


class BenchMARLPlayer:
    """A BenchMARL group policy as a `gigastep.eval.players.TorchPlayer`: the policy reads the
    team's observations as `(group, "observation")` (B, m, L) and samples
    `(group, "action")` (B, m) (TorchRL's `ExplorationType.RANDOM`, as in BenchMARL's
    collection; the other trainers' players sample too)."""

    def __init__(self, policy, group: str, obs_size: int) -> None:
        self.policy = policy
        self.group = group
        self.obs_size = obs_size
        self.name = "benchmarl-mappo"

    def check(self, config, team: int) -> None:
        check_vector_player(self.name, self.obs_size, config)

    def actor(self, config, team: int, num_envs: int, device=None, seed: int = 0):
        import torch

        torch.manual_seed(seed)  # TorchRL samples from torch's global generator
        return _Actor(self)


class _Actor:
    def __init__(self, player: BenchMARLPlayer) -> None:
        self.player = player

    def __call__(self, obs, first):
        import torch
        from tensordict import TensorDict
        from torchrl.envs.utils import ExplorationType, set_exploration_type

        group = self.player.group
        td = TensorDict({group: {"observation": obs.float()}}, batch_size=[obs.shape[0]])
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            out = self.player.policy(td)
        return out[group, "action"].to(torch.int64)
