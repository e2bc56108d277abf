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
"""

from __future__ import annotations

from .actor import PolicyActor, pick_team
from .checkpoint import LoadedPolicy, policy_from_checkpoint
from .envs import game_spec_from_config

__all__ = ["PPOPlayer", "PolicyActor", "load"]


class PPOPlayer:
    """A PPO checkpoint as a `gigastep.eval.matches` TorchPlayer."""

    def __init__(self, policy: LoadedPolicy, deterministic: bool = False):
        self.policy = policy
        self.deterministic = deterministic
        where = f"{policy.path}@" if policy.path else ""
        self.name = f"ppo:{where}{policy.update}"
        self.scenario = policy.game.name
        """The scenario it was trained on (the evaluation's default game)."""

    def check(self, config, team: int) -> None:
        pick_team(self.policy, game_spec_from_config(config, "this game"), team)

    def actor(self, config, team: int, num_envs: int, device=None, seed: int = 0) -> PolicyActor:
        game = game_spec_from_config(config, "this game")
        return PolicyActor(self.policy, team, num_envs, device, self.deterministic, seed, game)


def load(checkpoint: dict, device="cpu") -> PPOPlayer:
    """The `gigastep.players` entry point: a checkpoint dict (already loaded without
    unpickling code) -> a `PPOPlayer`."""
    # errors name "the checkpoint" (gigastep.eval.players adds the file's path); the player's
    # name keeps the path only when the checkpoint records one
    path = checkpoint.get("path", "")
    policy = policy_from_checkpoint(checkpoint, device, path or "the checkpoint")
    policy.path = path
    return PPOPlayer(policy)
