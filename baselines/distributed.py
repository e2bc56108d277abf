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
from dataclasses import dataclass

import torch

__all__ = ["Dist", "init_from_env"]


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

    Reads WORLD_SIZE, RANK and LOCAL_RANK; initialises the default process group (NCCL for a
    CUDA device, else gloo) once. Returns (Dist, this rank's device: cuda:LOCAL_RANK when
    `device` is cuda).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(), device
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.startswith("cuda")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    if cuda:
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    return Dist(rank, world, local), device
