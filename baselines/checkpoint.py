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

Integrity: every checkpoint carries `digest`, "sha256:<hex>" over its whole content (every
tensor's dtype, shape and bytes, every plain value, the config included), checked by every
loader: a file whose content does not match, whose learners' weights are not finite, or that
lacks an entry a policy needs is refused with one line naming the file and what is wrong
(`ValueError`). A checkpoint written before digests existed loads with a warning
(`UnverifiedCheckpointWarning`), unchecked.

Loading a trained policy for play or evaluation:

    policy = baselines.checkpoint.load_policy("runs/ppo/checkpoint.pt")
    actor = policy.actor(team=0, num_envs=64)      # stateful, for TorchVecEnv rows
    actions = actor(obs, first)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import warnings
from pathlib import Path

import torch

from gigastep._util import files as _files

from .actor import LoadedPolicy

__all__ = [
    "DIGEST",
    "FORMAT",
    "LoadedPolicy",
    "UnverifiedCheckpointWarning",
    "atomic_save",
    "check_checkpoint",
    "content_digest",
    "holds_checkpoint",
    "load_checkpoint",
    "load_policy",
    "numbered_checkpoints",
    "policy_from_checkpoint",
    "save_checkpoint",
    "sealed",
    "verify_digest",
]

FORMAT = "gigastep-ppo/1"
"""Version of the checkpoint layout; loading another version fails with a clear message."""

DIGEST = "digest"
"""The checkpoint entry holding `content_digest` of the rest ("sha256:<hex>")."""

POLICY_KEYS = ("format", "config", "game", "policy_spec", "update", "learners")
"""The entries every checkpoint (and policy file) holds."""

_NUMBERED = re.compile(r"checkpoint_(\d{6})\.pt$")


class UnverifiedCheckpointWarning(UserWarning):
    """A checkpoint without a content digest (written before digests existed) was loaded
    without an integrity check."""


def content_digest(payload: dict) -> str:
    """The "sha256:<hex>" digest of everything in `payload` but its `digest` entry: each tensor's
    dtype, shape and bytes, each plain value's repr, dict entries in key order. The same for
    a payload and its `torch.save`/`torch.load` round trip (on any device)."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in payload.items() if k != DIGEST})
    return "sha256:" + h.hexdigest()


def _feed(h, value) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)};".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        h.update(f"D{len(value)};".encode())
        for key in sorted(value, key=repr):
            h.update(f"{key!r}:".encode())
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)};".encode())
        for item in value:
            _feed(h, item)
    else:
        h.update(f"S{value!r};".encode())


def sealed(payload: dict) -> dict:
    """`payload` with its `digest` entry (see `content_digest`)."""
    return {**payload, DIGEST: content_digest(payload)}


def verify_digest(ckpt: dict, path) -> None:
    """Check `ckpt`'s digest against its content; warn when it has none.

    Raises:
        ValueError: the content does not match its digest (naming the file).
    """
    stored = ckpt.get(DIGEST)
    if stored is None:
        warnings.warn(
            f"{path} has no content digest (written before checkpoints carried one): "
            "loaded without an integrity check",
            UnverifiedCheckpointWarning,
            stacklevel=3,
        )
        return
    actual = content_digest(ckpt)
    if actual != stored:
        raise ValueError(
            f"{path} is corrupt: its content does not match its digest (stored "
            f"{str(stored)[:20]}..., computed {actual[:20]}...); use another checkpoint "
            "(the numbered copies beside it)"
        )


def check_checkpoint(ckpt: dict, path) -> None:
    """Check that `ckpt` holds a policy: its entries, at least one learner with weights, and
    finite weights.

    Raises:
        ValueError: one line naming the file and what is wrong.
    """
    missing = [k for k in POLICY_KEYS if k not in ckpt]
    if missing:
        raise ValueError(f"{path} is not a complete checkpoint: it lacks {missing}")
    learners = ckpt["learners"]
    if not isinstance(learners, (list, tuple)) or not learners:
        raise ValueError(f"{path} holds no learners (expected at least one trained policy)")
    for i, learner in enumerate(learners):
        need = [k for k in ("name", "team", "model", "obs_norm") if k not in learner]
        if not isinstance(learner, dict) or need:
            raise ValueError(f"{path}: learner {i} lacks {need or 'everything'}")
        model = learner["model"]
        if not isinstance(model, dict) or not model:
            raise ValueError(f"{path}: learner {learner['name']!r} has no weights")
        bad = [
            k
            for k, t in model.items()
            if isinstance(t, torch.Tensor)
            and (t.is_floating_point() or t.is_complex())
            and not bool(torch.isfinite(t).all())
        ]
        if bad:
            raise ValueError(
                f"{path}: learner {learner['name']!r} has non-finite weights (NaN or inf in "
                f"{bad[:4]}{' ...' if len(bad) > 4 else ''}); refusing to load it"
            )


def atomic_save(obj, path: str | os.PathLike) -> None:
    """`torch.save(obj, path)` through a temporary file in the same folder and `os.replace`,
    so a reader (or a run killed mid-write) never sees a partial file, and a failed write
    (a full disk) leaves the previous file and no temporary.

    Raises:
        OSError: the write's own error (errno ENOSPC on a full disk), also where torch would
            report it as a RuntimeError ("unexpected pos").
    """
    with _files.atomic_path(path) as tmp, open(tmp, "wb") as f:
        writer = _Writer(f)
        try:
            torch.save(obj, writer)  # type: ignore[arg-type]
        except RuntimeError as err:
            error = writer.error
            if error is not None:
                raise OSError(error.errno, error.strerror, os.fspath(path)) from err
            raise
        f.flush()
        os.fsync(f.fileno())


class _Writer:
    """A file's `write` that keeps the OSError it raised (torch.save reports it otherwise as
    a RuntimeError without its errno)."""

    def __init__(self, f) -> None:
        self.f = f
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        try:
            self.f.flush()
        except OSError as err:
            self.error = err
            raise


def save_checkpoint(run_dir: str | os.PathLike, update: int, payload: dict, keep: int) -> Path:
    """Write `run_dir/checkpoint.pt` atomically, add `checkpoint_<update>.pt`, prune old ones.

    Returns the path of the numbered checkpoint.
    """
    run_dir = Path(run_dir)
    latest = run_dir / "checkpoint.pt"
    atomic_save(sealed(payload), latest)
    numbered = run_dir / f"checkpoint_{update:06d}.pt"
    tmp = run_dir / f"{_files.TEMP_PREFIX}{numbered.name}.link"
    try:
        if tmp.exists():
            tmp.unlink()
        os.link(latest, tmp)
    except OSError:
        shutil.copyfile(latest, tmp)
    os.replace(tmp, numbered)
    if keep > 0:
        for _, p in numbered_checkpoints(run_dir)[:-keep]:
            p.unlink()
    return numbered


def numbered_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(update, path) of the run folder's numbered checkpoints, oldest first."""
    found = ((_NUMBERED.match(p.name), p) for p in Path(run_dir).iterdir())
    return sorted((int(m.group(1)), p) for m, p in found if m)


def holds_checkpoint(folder: str | os.PathLike) -> bool:
    """`folder` holds a checkpoint of a run (`checkpoint.pt` or a numbered one)."""
    folder = Path(folder)
    return folder.is_dir() and any(
        p.name == "checkpoint.pt" or _NUMBERED.match(p.name) for p in folder.iterdir()
    )


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    """Read a checkpoint written by `save_checkpoint` (no code is unpickled) and check it
    (`verify_digest`, `check_checkpoint`).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a Gigastep PPO checkpoint, of another format version,
            corrupt, incomplete or with non-finite weights (naming the file).
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
    verify_digest(ckpt, path)
    check_checkpoint(ckpt, path)
    return ckpt


def load_policy(path: str | os.PathLike, device="cpu") -> LoadedPolicy:
    """The trained policy (or policies, with --train-both) of a checkpoint, on `device`.

    Example:
        >>> policy = load_policy("runs/ppo/checkpoint.pt")
        >>> actor = policy.actor(team=0, num_envs=16)
        >>> actions = actor(obs_of_team0, first)      # torch tensors, as TorchVecEnv gives
    """
    ckpt = load_checkpoint(path, map_location=device)  # digest and weights checked
    return policy_from_checkpoint(ckpt, device, str(path), verify=False)


def policy_from_checkpoint(
    ckpt: dict, device="cpu", path: str = "checkpoint", verify: bool = True
) -> LoadedPolicy:
    """`load_policy` of a checkpoint dict that is already loaded; `verify=False` skips the
    digest and weight checks (a payload made in this process, or one `load_checkpoint` read).

    Raises:
        ValueError: one line naming `path` and what is wrong (see the module doc).
    """
    from .envs import GameSpec
    from .normalize import ObsNormalizer
    from .policies import ActorCritic, PolicySpec

    if ckpt.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT!r} checkpoint (format {ckpt.get('format')!r})")
    if verify:
        verify_digest(ckpt, path)
        check_checkpoint(ckpt, path)
    try:
        spec = PolicySpec.from_dict(ckpt["policy_spec"])
        game = GameSpec(**ckpt["game"])
        norm_obs = ckpt["config"]["norm_obs"]
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: unreadable policy or game description ({err!r})") from None
    nets, normalizers = {}, {}
    for learner in ckpt["learners"]:
        net = ActorCritic(spec).to(device)
        try:
            net.load_state_dict(learner["model"])
        except RuntimeError as err:
            first = " ".join(str(err).split())[:300]
            raise ValueError(
                f"{path}: learner {learner.get('name')!r}'s weights do not fit its "
                f"architecture {ckpt['policy_spec']} ({first})"
            ) from None
        net.eval().requires_grad_(False)
        norm = ObsNormalizer(spec.obs_norm_size, device, norm_obs)
        try:
            norm.load_state_dict(learner["obs_norm"])
        except (KeyError, RuntimeError, TypeError) as err:
            raise ValueError(
                f"{path}: learner {learner.get('name')!r}'s observation statistics do not "
                f"fit its observations ({' '.join(str(err).split())[:200]})"
            ) from None
        nets[int(learner["team"])] = net
        normalizers[int(learner["team"])] = norm
    return LoadedPolicy(path, game, spec, nets, normalizers, int(ckpt["update"]), ckpt["config"])
