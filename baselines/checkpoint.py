"""Checkpoints: written atomically, loaded without unpickling code, policies in one call.

A checkpoint is a dict of tensors and plain Python values (str, int, float, bool, None,
lists, tuples, dicts) saved with `torch.save`, so `torch.load(path, weights_only=True)` reads
it and no code in the file can run. It holds the format version, the resolved config, the
game spec, the policy spec, every learner's model, optimiser and normalisers, the opponent
pool and frozen players, the step counters, the RNG states of torch and numpy, and the
environment's JAX key and game states: everything a resumed run needs to continue exactly.

Files in a run folder: `checkpoint.pt` (the latest) and numbered copies
`checkpoint_000010.pt` (hard links when the file system allows, else copies), the oldest
pruned beyond `keep`.

Loading a trained policy for play or evaluation:

    policy = baselines.checkpoint.load_policy("runs/ppo/checkpoint.pt")
    actor = policy.actor(team=0, num_envs=64)      # stateful, for TorchVecEnv rows
    actions = actor(obs, first)
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import torch

from baselines.actor import LoadedPolicy
from gigastep._util import files as _files

__all__ = [
    "FORMAT",
    "LoadedPolicy",
    "atomic_save",
    "load_checkpoint",
    "load_policy",
    "policy_from_checkpoint",
    "save_checkpoint",
]

FORMAT = "gigastep-ppo/1"
"""Version of the checkpoint layout; loading another version fails with a clear message."""

_NUMBERED = re.compile(r"checkpoint_(\d{6})\.pt$")


def atomic_save(obj, path: str | os.PathLike) -> None:
    """`torch.save(obj, path)` through a temporary file in the same folder and `os.replace`,
    so a reader (or a run killed mid-write) never sees a partial file."""
    with _files.atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(run_dir: str | os.PathLike, update: int, payload: dict, keep: int) -> Path:
    """Write `run_dir/checkpoint.pt` atomically, add `checkpoint_<update>.pt`, prune old ones.

    Returns the path of the numbered checkpoint.
    """
    run_dir = Path(run_dir)
    latest = run_dir / "checkpoint.pt"
    atomic_save(payload, latest)
    numbered = run_dir / f"checkpoint_{update:06d}.pt"
    tmp = run_dir / f".{numbered.name}.link"
    try:
        if tmp.exists():
            tmp.unlink()
        os.link(latest, tmp)
    except OSError:
        shutil.copyfile(latest, tmp)
    os.replace(tmp, numbered)
    if keep > 0:
        old = sorted(p for p in run_dir.iterdir() if _NUMBERED.match(p.name))
        for p in old[:-keep]:
            p.unlink()
    return numbered


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    """Read a checkpoint written by `save_checkpoint` (no code is unpickled).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a Gigastep PPO checkpoint, or of another format version.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.pt"
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file gets the same message
        raise ValueError(
            f"{path} is not a readable checkpoint (torch.load with "
            f"weights_only=True failed: {str(err).splitlines()[0]})"
        ) from None
    if not isinstance(ckpt, dict) or "format" not in ckpt:
        raise ValueError(f"{path} is not a Gigastep PPO checkpoint (no 'format' entry)")
    if ckpt["format"] != FORMAT:
        raise ValueError(
            f"{path} has checkpoint format {ckpt['format']!r}; this version reads {FORMAT!r}"
        )
    return ckpt


def load_policy(path: str | os.PathLike, device="cpu") -> LoadedPolicy:
    """The trained policy (or policies, with --train-both) of a checkpoint, on `device`.

    Example:
        >>> policy = load_policy("runs/ppo/checkpoint.pt")
        >>> actor = policy.actor(team=0, num_envs=16)
        >>> actions = actor(obs_of_team0, first)      # torch tensors, as TorchVecEnv gives
    """
    return policy_from_checkpoint(load_checkpoint(path, map_location=device), device, str(path))


def policy_from_checkpoint(ckpt: dict, device="cpu", path: str = "checkpoint") -> LoadedPolicy:
    """`load_policy` of a checkpoint dict that is already loaded."""
    from baselines.envs import GameSpec
    from baselines.normalize import ObsNormalizer
    from baselines.policies import ActorCritic, PolicySpec

    if ckpt.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT!r} checkpoint (format {ckpt.get('format')!r})")
    spec = PolicySpec.from_dict(ckpt["policy_spec"])
    game = GameSpec(**ckpt["game"])
    nets, normalizers = {}, {}
    for learner in ckpt["learners"]:
        net = ActorCritic(spec).to(device)
        net.load_state_dict(learner["model"])
        net.eval().requires_grad_(False)
        norm = ObsNormalizer(spec.vector_size, device, ckpt["config"]["norm_obs"])
        norm.load_state_dict(learner["obs_norm"])
        nets[int(learner["team"])] = net
        normalizers[int(learner["team"])] = norm
    return LoadedPolicy(path, game, spec, nets, normalizers, int(ckpt["update"]), ckpt["config"])
