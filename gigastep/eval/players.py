"""Players: who can play a match, and checkpoints turned into players.

A *player* is one of:

- a scripted policy name, `"random"`, `"circle"`, `"pursuit"` or `"evade"`
  (`gigastep.opponents`);
- a pure JAX callable `policy(config, state, key) -> actions` of all agents of one game (a
  scripted player: the evaluator keeps the rows of the team it plays);
- a `TorchPlayer` (below), such as a trained policy;
- a path to a checkpoint file that a registered loader turns into a `TorchPlayer`.

Checkpoint files are dicts saved with `torch.save` and loaded with
`torch.load(path, weights_only=True, map_location="cpu")` (no code is ever unpickled). The key
`"gigastep_player"` names the loader: a function `fn(checkpoint: dict, device) -> TorchPlayer`
registered with `register_player_loader(name, fn)` or declared as an entry point of the group
`gigastep.players` (value `module:function`) by an installed package. This library imports no
loader itself; Gigastep's entry point `ppo` finds the PPO baseline's loader by name
(`gigastep._util.repository.load_ppo_player`: `gigastep_baselines` where the wheel is
installed, `baselines` in a checkout).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from gigastep.game.types import EnvConfig, closest
from gigastep.opponents import POLICIES, Policy

if TYPE_CHECKING:
    import torch

    from gigastep.adapters.torch import TorchObservation

Device: TypeAlias = "torch.device | str"
"""A torch device, or its name ("cpu", "cuda", "cuda:1")."""

__all__ = [
    "CHECKPOINT_KEY",
    "ENTRY_POINT_GROUP",
    "Player",
    "PlayerLike",
    "PlayerLoader",
    "ScriptedPlayer",
    "TorchActor",
    "TorchPlayer",
    "load_player",
    "player_loaders",
    "register_player_loader",
    "resolve_player",
]

CHECKPOINT_KEY = "gigastep_player"
ENTRY_POINT_GROUP = "gigastep.players"


@runtime_checkable
class TorchActor(Protocol):
    """One team of `num_envs` games, played by a (possibly recurrent) torch policy.

    The actor is stateful: it keeps its own recurrent state for each game and restarts it
    where `first` is True.
    """

    def __call__(self, obs: TorchObservation, first: torch.Tensor) -> torch.Tensor:
        """Actions of the team for one step.

        Args:
            obs: the team's observations as `TorchVecEnv` returns them, the rows of that team
                only: float32 (B, m, L) (vector), uint8 (B, m, res_x, res_y, 3) (rgb), or the
                tuple (rgb, vector).
            first: bool (B,), True where this observation is the first of an episode (after
                a reset, and after a step whose `ep_dones` was True, since games restart
                automatically).

        Returns:
            int (B, m) action indices (discrete) or float32 (B, m, 3) (continuous), on the
            same device as `obs`.
        """
        ...


@runtime_checkable
class TorchPlayer(Protocol):
    """A player backed by PyTorch (a trained policy, or anything that acts on observations).

    Attributes:
        name: a short label for tables and plots.

    Optionally a `scenario` attribute (a scenario name) says which game it was trained on;
    the command line plays that game when none is named.
    """

    name: str

    def check(self, config: EnvConfig, team: int) -> None:
        """Raise ValueError with a clear message if this player cannot play team `team` of
        the game `config` (observation type or shape, action type, team size, agent types)."""
        ...

    def actor(
        self, config: EnvConfig, team: int, num_envs: int, device: Device, seed: int
    ) -> TorchActor:
        """A fresh actor for team `team` of `num_envs` games of `config` on torch `device`."""
        ...


@dataclass(frozen=True)
class ScriptedPlayer:
    """A pure JAX policy `policy(config, state, key) -> actions` of all n agents of a game."""

    name: str
    policy: Policy

    def check(self, config: EnvConfig, team: int) -> None:
        """Scripted policies read the state, so they play either team of any game."""


Player = ScriptedPlayer | TorchPlayer

PlayerLike: TypeAlias = "Player | Policy | str | os.PathLike[str]"
"""Any player form `resolve_player` takes: a player, a policy callable, a scripted policy's
name, or a checkpoint path."""

PlayerLoader: TypeAlias = Callable[[dict[str, Any], Device], TorchPlayer]
"""`fn(checkpoint: dict, device) -> TorchPlayer`, a checkpoint loader."""

_LOADERS: dict[str, PlayerLoader] = {}


def register_player_loader(name: str, fn: PlayerLoader, *, replace: bool = False) -> None:
    """Make checkpoints whose `"gigastep_player"` entry is `name` load with
    `fn(checkpoint: dict, device) -> TorchPlayer`.

    Raises:
        ValueError: `name` is already registered (pass `replace=True` to override it).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a loader name is a non-empty string, got {name!r}")
    if not callable(fn):
        raise TypeError(f"a loader is a callable fn(checkpoint, device); got {type(fn).__name__}")
    if name in _LOADERS and _LOADERS[name] is not fn and not replace:
        raise ValueError(
            f"a player loader named {name!r} is already registered; pass replace=True to "
            "override it"
        )
    _LOADERS[name] = fn


def _entry_points() -> dict[str, EntryPoint]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def player_loaders() -> list[str]:
    """Names of the known checkpoint loaders (registered and installed entry points)."""
    return sorted({*_LOADERS, *_entry_points()})


def _loader(name: str) -> PlayerLoader:
    if name in _LOADERS:
        return _LOADERS[name]
    eps = _entry_points()
    if name not in eps:
        known = player_loaders()
        hint = f"closest: {closest(name, known)}" if known else "no loader is installed"
        raise ValueError(
            f"no player loader named {name!r} ({hint}). Install the package that provides "
            f"it (an entry point in the group {ENTRY_POINT_GROUP!r}; for the repository's "
            "PPO baseline: pip install -e . in the checkout) or call "
            "gigastep.eval.matches.register_player_loader"
        )
    try:
        return eps[name].load()
    except Exception as err:  # an entry point's import can fail in any way
        raise ValueError(
            f"the player loader {name!r} ({eps[name].value}) failed to import: {err}"
        ) from None


def _read_checkpoint(path: str) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"loading the checkpoint {path!r} needs PyTorch: pip install 'gigastep[torch]'"
        ) from None
    import pickle

    try:
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(
            f"refusing to load {path!r}: it holds pickled Python objects beyond tensors and "
            f"plain containers, and checkpoints are loaded without running code ({first})"
        ) from None
    except Exception as err:  # torch.load fails in many ways on files it does not know
        raise ValueError(
            f"{path!r} is not a Gigastep checkpoint (torch.load failed: {err})"
        ) from None
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint:
        keys = sorted(map(str, checkpoint))[:8] if isinstance(checkpoint, dict) else None
        what = f"a dict with keys {keys}" if keys is not None else type(checkpoint).__name__
        raise ValueError(
            f"{path!r} is not a Gigastep player checkpoint: expected a dict with a "
            f"{CHECKPOINT_KEY!r} entry naming its loader, got {what}"
        )
    return checkpoint


def load_player(path: str | os.PathLike[str], device: Device = "cpu") -> TorchPlayer:
    """The `TorchPlayer` stored in a checkpoint file (see the module docstring)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint file {path!r}")
    checkpoint = _read_checkpoint(path)
    name = checkpoint[CHECKPOINT_KEY]
    if not isinstance(name, str):
        raise ValueError(f"{path!r}: {CHECKPOINT_KEY!r} must name a loader, got {name!r}")
    try:
        player = _loader(name)(checkpoint, device)
    except ValueError as err:  # a loader's refusal names the file, as every error here does
        if path in str(err):
            raise
        raise ValueError(f"{path!r}: {err}") from None
    if not isinstance(player, TorchPlayer):
        raise TypeError(
            f"the loader {name!r} returned {type(player).__name__}, which is not a TorchPlayer "
            "(it needs a `name`, `check(config, team)` and `actor(config, team, num_envs, "
            "device, seed)`)"
        )
    return player


def resolve_player(player: PlayerLike, device: Device = "cpu") -> Player:
    """A `ScriptedPlayer` or `TorchPlayer` from any player form (see the module docstring).

    Raises:
        ValueError / FileNotFoundError: an unknown name (with the closest policy names) or a
            checkpoint that cannot be loaded.
    """
    if isinstance(player, (ScriptedPlayer, TorchPlayer)):
        return player
    if isinstance(player, os.PathLike):
        return load_player(player, device)
    if isinstance(player, str):
        if player in POLICIES:
            return ScriptedPlayer(player, POLICIES[player])
        if os.path.exists(player):
            return load_player(player, device)
        raise ValueError(
            f"unknown player {player!r}: not a scripted policy (closest: "
            f"{closest(player, POLICIES)}; all: {sorted(POLICIES)}) and no such checkpoint file"
        )
    if callable(player):
        return ScriptedPlayer(getattr(player, "__name__", repr(player)), player)
    raise TypeError(
        "a player is a scripted policy name, a policy(config, state, key) callable, a "
        f"TorchPlayer or a checkpoint path; got {type(player).__name__}"
    )
