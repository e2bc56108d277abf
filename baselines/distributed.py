"""Several processes training one policy: `torch.distributed` under `torchrun`.

Every rank holds `num_envs / world_size` of the games (a contiguous slice of the batch that
one process would hold, drawing the same random numbers: `TorchVecEnv(window=...)`) and its
own device; gradients are averaged with `DistributedDataParallel` (gloo on CPU, NCCL on
GPU); statistics that decide the update (observation and return normalisers, minibatch
sizes, advantage moments, KL) are summed over ranks, so every rank takes the same step. Rank
0 writes metrics, checkpoints and the progress bar.

    torchrun --standalone --nproc-per-node 2 -m baselines.ppo --preset smoke --out runs/ddp

With one process (no `torchrun`) every collective is the identity.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

__all__ = ["Dist", "env_int", "init_from_env", "read_env"]


def env_int(environ: Mapping[str, str], name: str, default: str | None, lo: int) -> int:
    """The integer value of the variable `name` in `environ` (`default` when unset; None:
    it must be set), at least `lo`: a ValueError naming the variable and its value."""
    raw = environ.get(name, default)
    if raw is None:
        raise ValueError(
            f"{name} is not set, and WORLD_SIZE={environ.get('WORLD_SIZE')!r} says this is one "
            f"process of several: launch with torchrun, which sets RANK, LOCAL_RANK, "
            f"MASTER_ADDR and MASTER_PORT"
        )
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"the environment variable {name}={raw!r} is not an integer") from None
    if value < lo:
        raise ValueError(f"the environment variable {name}={raw!r} must be >= {lo}")
    return value


def read_env(environ: Mapping[str, str]) -> tuple[int, int, int] | None:
    """(RANK, WORLD_SIZE, LOCAL_RANK) of a `torchrun` job from `environ`, None for one
    process (WORLD_SIZE unset or 1). Checked before anything starts: each an integer,
    WORLD_SIZE >= 1, 0 <= RANK < WORLD_SIZE, LOCAL_RANK >= 0, and MASTER_ADDR set and
    MASTER_PORT a port 1..65535 when there are several processes.

    Raises:
        ValueError: naming the variable, its value and what is expected.
    """
    world = env_int(environ, "WORLD_SIZE", "1", 1)
    if world == 1:
        return None
    rank = env_int(environ, "RANK", None, 0)
    if rank >= world:
        raise ValueError(f"RANK={rank} but WORLD_SIZE={world}: ranks are 0..{world - 1}")
    local = env_int(environ, "LOCAL_RANK", "0", 0)
    if not environ.get("MASTER_ADDR"):
        env_int(environ, "MASTER_ADDR", None, 0)  # the "not set" error
    port = env_int(environ, "MASTER_PORT", None, 1)
    if port > 65535:
        raise ValueError(f"the environment variable MASTER_PORT={port} must be a port 1..65535")
    return rank, world, local


@dataclass
class Dist:
    """This process's place in the job (rank 0 of 1 without torch.distributed)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def games(self, num_envs: int) -> tuple[int, int]:
        """[start, stop) of this rank's games in a batch of `num_envs`."""
        if num_envs % self.world:
            raise ValueError(
                f"--num-envs {num_envs} does not split over {self.world} processes "
                f"(use a multiple of {self.world})"
            )
        per = num_envs // self.world
        return self.rank * per, (self.rank + 1) * per

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """`t` summed over ranks, in place (returned)."""
        if self.enabled:
            import torch.distributed as dist

            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def gather(self, obj) -> list | None:
        """Every rank's `obj` (tensors and plain values) on rank 0 (None on the others).

        Each rank serialises its object with `torch.save`; rank 0 reads them back with
        `torch.load(weights_only=True)`, as it would read a checkpoint.
        """
        if not self.enabled:
            return [obj]
        import io

        import torch.distributed as dist

        buffer = io.BytesIO()
        torch.save(obj, buffer)
        # rank 0's list of every rank's bytes, filled in place by gather_object
        received: list[bytes] | None = [b""] * self.world if self.is_main else None
        dist.gather_object(buffer.getvalue(), received, dst=0)
        if received is None:
            return None
        return [torch.load(io.BytesIO(b), weights_only=True) for b in received]

    def barrier(self) -> None:
        if self.enabled:
            import torch.distributed as dist

            dist.barrier()


def init_from_env(device: str) -> tuple[Dist, str]:
    """Join the job `torchrun` (or SLURM with the same variables) describes, if any.

    Reads WORLD_SIZE, RANK and LOCAL_RANK (`read_env`: refused with a clear ValueError before
    anything starts when malformed); initialises the default process group (NCCL for a
    CUDA device, else gloo) once. Returns (Dist, this rank's device: cuda:LOCAL_RANK when
    `device` is cuda).
    """
    place = read_env(os.environ)
    if place is None:
        return Dist(), device
    import torch.distributed as dist

    rank, world, local = place
    cuda = device.startswith("cuda")
    if cuda and local >= torch.cuda.device_count():
        raise ValueError(
            f"LOCAL_RANK={local} but this machine has {torch.cuda.device_count()} CUDA devices "
            f"(LOCAL_RANK must be 0..{torch.cuda.device_count() - 1}: one process per GPU)"
        )
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    return Dist(rank, world, local), device
