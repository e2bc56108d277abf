"""PPO checkpoints as players for `gigastep.eval.matches` (and for scripts of your own).

`gigastep` finds this loader through the entry point `ppo` of the group `gigastep.players`
(declared in pyproject.toml: `gigastep._util.repository.load_ppo_player`, which imports this
module as `gigastep_baselines.players` where the wheel is installed and `baselines.players` in
a checkout); a checkpoint names it in its "gigastep_player" entry. The library never imports
this package: it only looks it up by name.

    player = load(torch.load(path, weights_only=True), "cpu")     # what gigastep does
    player.check(config, team=1)                                   # raises if it cannot play
    actor = player.actor(config, team=1, num_envs=64, device="cpu", seed=0)
    actions = actor(obs_team1, first)                              # (B, m) or (B, m, 3)

A `PPOPlayer` is also `gigastep.eval.splits.FineTunable`: `finetune(config, opponents,
agent_steps, seed)` trains it further in this process (`baselines.train.Trainer` with
`--init-from` and `--agent-steps`) and returns the fine-tuned player.
"""

from __future__ import annotations

import dataclasses
import tempfile

from .actor import PolicyActor, PolicyPlayer
from .checkpoint import load_policy, policy_from_checkpoint
from .envs import game_spec_from_config, vec_env_factory

__all__ = ["PPOPlayer", "PolicyActor", "PolicyPlayer", "load"]


class PPOPlayer(PolicyPlayer):
    """A PPO checkpoint as a `gigastep.eval.matches` TorchPlayer that can be fine-tuned
    (`gigastep.eval.splits.FineTunable`)."""

    def finetune(self, config, opponents, agent_steps: int, seed: int, **overrides) -> PPOPlayer:
        """This policy trained further for `agent_steps` agent-steps (the trainer's count:
        every agent of every game, at every step; whole updates, so at least that many) on
        the game `config` (an `EnvConfig`) against `opponents` (scripted names or checkpoint
        paths, equal shares), from training seed `seed`: the few-shot protocol of
        `gigastep.eval.splits`.

        The run takes the checkpoint's own settings (architecture, PPO hyperparameters,
        batch), starts from its weights and observation statistics with a fresh optimiser
        (`--init-from`), trains the team the checkpoint trained, and is written to a
        temporary folder that is removed afterwards; `overrides` replace settings of the run
        (e.g. num_envs=16 for a small machine). Nothing depends on the working directory.

        Raises:
            ValueError: the policy does not fit the game (`baselines.train.check_init`: an
                entity policy fits every team size), or a bad budget or opponent.
        """
        from gigastep import GigastepEnv

        from .config import from_dict
        from .train import Trainer

        if isinstance(agent_steps, bool) or not isinstance(agent_steps, int) or agent_steps < 1:
            raise ValueError(f"agent_steps must be a positive integer, got {agent_steps!r}")
        names = [opponents] if isinstance(opponents, str) else list(opponents)
        if not names:
            raise ValueError("finetune needs at least one opponent (scripted name or checkpoint)")
        env = GigastepEnv(config)
        game = game_spec_from_config(config, f"{self.scenario} fine-tuned")

        factory = vec_env_factory(env)
        saved = from_dict(dict(self.policy.config))
        device = str(next(iter(self.policy.nets.values())).heads.weight.device)
        with tempfile.TemporaryDirectory(prefix="gigastep-finetune-") as out:
            run = dataclasses.replace(
                saved,
                **{
                    "scenario": self.scenario,
                    "env": "",
                    "shooter_credit": 0.0,
                    "opponent": ",".join(f"{name}:1" for name in names),
                    "train_both": False,
                    "team": self.policy.teams[0],
                    "agent_steps": agent_steps,
                    "init_from": self.policy.path,
                    "warm_start": "",
                    "seed": seed,
                    "seeds": 1,
                    "framework": "torch",
                    "device": device,
                    "out": out,
                    "resume": False,
                    "time_budget_s": 0.0,
                    "eval_every": 0,
                    "checkpoint_every": 10**9,
                    "keep_checkpoints": 1,
                    "tensorboard": False,
                    "plots": False,
                    "progress": False,
                    **overrides,
                },
            )
            Trainer(run, game, factory, device=device, init=self.policy).run()
            tuned = load_policy(f"{out}/checkpoint.pt", device)
        tuned.path = ""
        where = f"{self.policy.path}@" if self.policy.path else ""
        player = PPOPlayer(tuned, self.deterministic)
        player.name = f"ppo:{where}{self.policy.update}+finetune{agent_steps}"
        player.scenario = self.scenario
        return player


def load(checkpoint: dict, device="cpu") -> PPOPlayer:
    """The `gigastep.players` entry point: a checkpoint dict (already loaded without
    unpickling code) -> a `PPOPlayer`."""
    # errors name "the checkpoint" (gigastep.eval.players adds the file's path); the player's
    # name keeps the path only when the checkpoint records one
    path = checkpoint.get("path", "")
    policy = policy_from_checkpoint(checkpoint, device, path or "the checkpoint")
    policy.path = path
    return PPOPlayer(policy)
