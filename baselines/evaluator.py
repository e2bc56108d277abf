"""Evaluation during training (`--eval-every`): the learner against scripted opponents in
fresh games of the training game without its reward shaping, logged, with the best policy kept.

Every `eval_every` updates, and after the last one, the main process plays `eval_games`
complete episodes of the run's game with the scenario's own reward weights
(`baselines.envs.evaluation_config`: `--env` and `--shooter-credit` reward weights are not
evaluated, other `--env` overrides such as a map generator are) against each opponent of
`eval_opponents` with `gigastep.eval.matches.evaluate` (in a symmetric scenario the learner
plays team 0 in half of the games and team 1 in the other half). The games' seed is drawn
from the run's seed and the update, apart from the training games' seeds; the policy samples
its actions, as in training. Torch's global random state is left as it was, so evaluating
does not change what the run trains.

Outputs, next to the training metrics:
    eval.csv, eval.jsonl   one row per evaluation: update, agent_steps, wall_s (the training
                           clock), eval_s (seconds this evaluation took), score (the mean win
                           rate over the opponents), and per opponent win_rate, its Wilson
                           interval (win_rate_lo, win_rate_hi; 95%), draw_rate, loss_rate,
                           games, episode_length
    TensorBoard            the same values under eval/... against agent-steps
    best.pt                the policy of the evaluation with the highest score so far
                           (atomic; a policy file: `gigastep.eval.matches` and
                           `--opponent best.pt` play it)
The best score is in every checkpoint, so a resumed run keeps the same best.pt.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .checkpoint import atomic_save, policy_from_checkpoint, sealed
from .config import SCRIPTED, PPOConfig, parse_opponents
from .metrics import MetricsLogger

if TYPE_CHECKING:
    from gigastep.game.types import EnvConfig

__all__ = ["Evaluator", "eval_opponents"]

_PER_OPPONENT = (
    "win_rate",
    "win_rate_lo",
    "win_rate_hi",
    "draw_rate",
    "loss_rate",
    "games",
    "episode_length",
)


def eval_opponents(config: PPOConfig, symmetric: bool) -> tuple[str, ...]:
    """The scripted opponents an evaluation plays: `config.eval_opponents`, or with "auto" the
    scripted kinds of the training mix (random and pursuit when it has none)."""
    if config.eval_opponents != "auto":
        return tuple(t.strip() for t in config.eval_opponents.split(",") if t.strip())
    if config.train_both:
        return ("random", "pursuit")
    kinds = [s.kind for s in parse_opponents(config.opponent, symmetric) if s.kind in SCRIPTED]
    return tuple(kinds) or ("random", "pursuit")


class Evaluator:
    """Evaluations of one run (see the module doc); `best` is checkpointed."""

    def __init__(self, config: PPOConfig, symmetric: bool):
        self.config = config
        self.opponents = eval_opponents(config, symmetric) if config.eval_every else ()
        self.best: dict = {"score": None, "update": None}
        self.logger: MetricsLogger | None = None
        self._game: EnvConfig | None = None  # what the evaluations play, made at the first one

    @property
    def enabled(self) -> bool:
        return self.config.eval_every > 0

    def columns(self) -> list[str]:
        cols = ["update", "agent_steps", "wall_s", "eval_s", "score"]
        return cols + [f"{k}/{o}" for o in self.opponents for k in _PER_OPPONENT]

    def open(self, out: Path, resumed: tuple[int | None, int | None]) -> None:
        """Start (or, when resuming, cut back) eval.csv/jsonl in the run folder `out`."""
        if self.enabled:
            update, step = resumed
            cfg = self.config
            self.logger = MetricsLogger(
                out,
                self.columns(),
                update,
                cfg.tensorboard,
                plots=False,
                resume_step=step,
                name="eval",
                tb_prefix="eval/",
            )

    def due(self, update: int, last: bool) -> bool:
        return self.enabled and (last or update % self.config.eval_every == 0)

    def evaluate(self, trainer, out: Path) -> dict:
        """Play the evaluation games of `trainer`'s current policy; log; keep best.pt."""
        from gigastep.eval.matches import evaluate

        from .actor import PolicyPlayer
        from .envs import evaluation_config

        cfg = self.config
        if self._game is None:
            self._game = evaluation_config(cfg.scenario, cfg.env, cfg.shooter_credit)
        game = self._game
        payload = trainer.policy_payload()
        player = PolicyPlayer(
            policy_from_checkpoint(payload, trainer.device, "training", verify=False)
        )
        seed = 1_000_003 * (cfg.seed + 1) + trainer.update  # not a training game's seed
        row = {"update": trainer.update, "agent_steps": trainer.agent_steps}
        row["wall_s"] = trainer.wall_s
        t0 = time.perf_counter()
        wins = []
        with torch.random.fork_rng(devices=[]):
            for name in self.opponents:
                r = evaluate(
                    player,
                    name,
                    game,
                    games=cfg.eval_games,
                    seed=seed,
                    a_team=None if trainer.game.symmetric else cfg.team,
                    batch_size=cfg.eval_games,
                    device=trainer.device,
                )
                lo, hi = r.win_rate_ci
                length = r.mean_episode_length
                values = (r.win_rate, lo, hi, r.draw_rate, r.loss_rate, r.games, length)
                row.update({f"{k}/{name}": v for k, v in zip(_PER_OPPONENT, values, strict=True)})
                wins.append(r.win_rate)
        row["eval_s"] = time.perf_counter() - t0
        row["score"] = sum(wins) / len(wins)
        if self.best["score"] is None or row["score"] > self.best["score"]:
            self.best = {"score": row["score"], "update": trainer.update}
            atomic_save(sealed(payload), Path(out) / "best.pt")
        if self.logger is not None:
            self.logger.log(row)
        return row

    def state_dict(self) -> dict:
        return dict(self.best)

    def load_state_dict(self, state: dict) -> None:
        self.best = dict(state)

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()
