"""A trained policy playing one team: `PolicyActor` (what `LoadedPolicy.actor` and the
`gigastep.eval.matches` players built by `baselines.players` act with).

`LoadedPolicy` (the trained policies of a checkpoint) is defined here beside the actor it
makes; `baselines.checkpoint` builds one from a file, and imports this module, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .envs import GameSpec

if TYPE_CHECKING:
    from .policies import PolicySpec

__all__ = ["LoadedPolicy", "PolicyActor", "pick_team"]


@dataclass
class LoadedPolicy:
    """Trained policies of a checkpoint, ready to act (see `load_policy`)."""

    path: str
    game: GameSpec
    """The `baselines.envs.GameSpec` it was trained on."""
    spec: PolicySpec
    """The `baselines.policies.PolicySpec`."""
    nets: dict
    """team -> `ActorCritic` (eval mode, no gradients)."""
    normalizers: dict
    """team -> `ObsNormalizer` with the training statistics."""
    update: int
    config: dict

    @property
    def teams(self) -> tuple[int, ...]:
        """The teams it was trained to play."""
        return tuple(sorted(self.nets))

    def actor(
        self,
        team: int | None = None,
        num_envs: int = 1,
        device=None,
        deterministic: bool = False,
        seed: int = 0,
        game=None,
    ):
        """A stateful actor for `team` of `num_envs` games (`baselines.actor.PolicyActor`).

        Args:
            team: the team to play (default: the one it was trained for; a policy trained on
                team 0 of a symmetric scenario plays either team).
            game: the `GameSpec` of the game to play (default: the training game).
        """
        return PolicyActor(self, team, num_envs, device, deterministic, seed, game)


def _team_types(game: GameSpec, team: int) -> tuple[str, ...]:
    return tuple(game.type_keys[i] for i in game.team_agents(team))


def pick_team(policy: LoadedPolicy, target: GameSpec, team: int) -> int:
    """The trained team whose agents have the types of `team` in `target` (same team first).

    Raises:
        ValueError: the observations or actions differ, or no trained team has these types.
    """
    trained, spec = policy.game, policy.spec
    mismatches = []
    if target.obs_type != spec.obs_type:
        mismatches.append(f"observations {target.obs_type} (trained on {spec.obs_type})")
    elif target.vector_size != spec.vector_size or target.image_shape != spec.image_shape:
        mismatches.append(
            f"observation shape vector {target.vector_size}/image "
            f"{target.image_shape} (trained on {spec.vector_size}/"
            f"{spec.image_shape})"
        )
    if target.discrete != spec.discrete:
        kind = {True: "discrete", False: "continuous"}
        mismatches.append(f"{kind[target.discrete]} actions (trained on {kind[spec.discrete]})")
    where = f" {policy.path}" if policy.path else ""
    who = f"the PPO policy{where} (trained on {trained.name}, update {policy.update})"
    if mismatches:
        raise ValueError(f"{who} cannot play {target.name}: " + "; ".join(mismatches))
    want = _team_types(target, team)
    roles = policy.teams
    if policy.config.get("opponent") == "self" or trained.symmetric:
        roles = (0, 1)  # a symmetric game's learner plays either side
    candidates = [
        t for t in sorted(roles, key=lambda t: t != team) if _team_types(trained, t) == want
    ]
    if not candidates:
        have = {t: _team_types(trained, t) for t in roles}
        raise ValueError(
            f"{who} cannot play team {team} of {target.name}: its agents are "
            f"{list(want)}, the policy was trained for {have}"
        )
    return candidates[0] if candidates[0] in policy.nets else next(iter(policy.nets))


class PolicyActor:
    """Plays one team of `num_envs` games with a trained policy, keeping its recurrent state.

    Call it with that team's observations (B, m, ...) as `TorchVecEnv` gives them and `first`
    (B,) bool (True where the observation starts an episode); returns actions (B, m) int64
    or (B, m, 3) float32 on the same device.
    """

    def __init__(
        self,
        policy: LoadedPolicy,
        team: int | None,
        num_envs: int,
        device=None,
        deterministic: bool = False,
        seed: int = 0,
        game: GameSpec | None = None,
    ):
        target = game or policy.game
        if team is None:
            team = policy.teams[0]
        trained_team = pick_team(policy, target, team)
        self.net = policy.nets[trained_team]
        self.device = (
            torch.device(device) if device is not None else next(self.net.parameters()).device
        )
        self.net = self.net.to(self.device)
        self.normalizer = policy.normalizers[trained_team]
        vocab = policy.game.type_vocab
        agents = target.team_agents(team)
        ids = torch.tensor([vocab.index(target.type_keys[a]) for a in agents])
        types = torch.nn.functional.one_hot(ids, policy.spec.n_types).float()
        self.m, self.num_envs = len(agents), num_envs
        self.types = types.repeat(num_envs, 1).to(self.device)
        self.h = self.net.initial_state(num_envs * self.m, self.device)
        self.deterministic = deterministic
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.obs_type = policy.spec.obs_type

    def _normalize(self, obs):
        if isinstance(obs, tuple):
            return (obs[0], self.normalizer(obs[1]))
        return obs if self.obs_type == "rgb" else self.normalizer(obs)

    @torch.no_grad()
    def __call__(self, obs, first: torch.Tensor) -> torch.Tensor:
        b = first.shape[0]
        if b != self.num_envs:
            raise ValueError(f"this actor plays {self.num_envs} games, got observations of {b}")
        rows = b * self.m
        flat = (
            tuple(o.reshape(rows, *o.shape[2:]) for o in obs)
            if isinstance(obs, tuple)
            else obs.reshape(rows, *obs.shape[2:])
        )
        first_rows = first.to(torch.bool).repeat_interleave(self.m)
        u = torch.rand((rows, self.net.noise_width), generator=self.generator, device=self.device)
        actions, _, _, self.h = self.net.act(
            self._normalize(flat), self.types, first_rows, self.h, None, u, self.deterministic
        )
        return actions.reshape(b, self.m, *actions.shape[1:])
