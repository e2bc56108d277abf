"""The preflight: bandwidth and latency of collectives, in one process and across processes.

Run this before training on a new machine or cluster: it measures all-reduce, all-gather,
reduce-scatter and broadcast of float32 messages from 1 KiB to 256 MiB with both frameworks'
own engines, `torch.distributed` (gloo; NCCL when CUDA is present) and JAX (`psum`,
`all_gather`, `psum_scatter` and `pbroadcast` under `shard_map`), over every link it can
reach, and says in plain words which link runs far below the best one.

Links (each row's `scope`):
  * in-process: one JAX process and its devices (`--devices` host devices on CPU via
    `XLA_FLAGS=--xla_force_host_platform_device_count`, or every local GPU);
  * cross-process: `--processes` local worker processes (one device each) joined by
    `torch.distributed` (TCP store on 127.0.0.1) and by `jax.distributed` (a local
    coordinator), both launched by this script;
  * cross-node: the same worker code when this module is started by `torchrun` or `srun`
    on several nodes (it then measures only the links between its processes).

Formulas (as nccl-tests, with n participants and S = `bytes`, the message size):
  * `bytes`: all-reduce and broadcast: each participant's buffer; all-gather: the gathered
    output (each participant contributes S/n); reduce-scatter: each participant's input
    (each receives S/n).
  * `latency_us`: the median over repeats of the time of one operation (mean of a batch of
    back-to-back operations, the slowest participant's time).
  * `algbw_gbps` = S / latency, in GB/s (1 GB = 1e9 bytes).
  * `busbw_gbps` = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather and
    reduce-scatter, x 1 for broadcast: the traffic per link of a ring algorithm, comparable
    across participant counts and with the hardware's link speed.

A link is flagged when its bus bandwidth is more than `--slow-factor` (default 10) times
below the best link at the same operation and size.

Usage:
    python -m benchmarks.collectives --quick --json preflight.json   # ~1 min on 2 CPU cores
    python -m benchmarks.collectives --json pre.json --markdown pre.md --png pre.png
    torchrun --nnodes 2 --nproc-per-node 8 ... -m benchmarks.collectives --json nodes.json
    python -m benchmarks.collectives --from-json pre.json nodes.json --png all.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import (
    Column,
    add_options,
    markdown_table,
    option,
    options_from_args,
    run_info,
    write_json,
)
from gigastep._util import files as _files

__all__ = [
    "OPS",
    "Options",
    "bus_factor",
    "annotate_flags",
    "format_bytes",
    "main",
    "parse_size",
    "pivot_table",
    "plot_rows",
    "save_figure",
    "slow_links",
]

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
OP_NAMES = {
    "all_reduce": "all-reduce",
    "all_gather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "broadcast": "broadcast",
}
FULL_SIZES = tuple(1024 * 4**i for i in range(10))  # 1 KiB, 4 KiB, ..., 256 MiB
QUICK_SIZES = (1024, 64 * 1024, 1024**2, 8 * 1024**2)
FLOAT32 = 4


@dataclass
class Options:
    """Command-line options (each field is one `--flag`; see `--help`)."""

    quick: bool = option(
        False,
        "quick preset: 4 sizes (1 KiB to 8 MiB), 3 repeats, short batches (~1 min on 2 CPU cores)",
    )
    sizes: list = option(
        [],
        "message sizes (e.g. 1KiB 64MiB 4096); default 1 KiB to 256 MiB in steps of 4x",
        type=str,
        nargs="*",
    )
    ops: list = option(list(OPS), "operations to measure", type=str)
    frameworks: list = option(["torch", "jax"], "frameworks to measure", type=str)
    processes: int = option(
        -1,
        "local worker processes of the cross-process links (-1: one "
        "per GPU with 2 or more GPUs, else 2; below 2: skip)",
    )
    devices: int = option(
        -1,
        "devices of the in-process JAX link (-1: every local GPU, or 2 "
        "XLA host devices on CPU; below 2: skip)",
    )
    torch_backends: list = option(
        [], "torch.distributed backends (default: nccl with CUDA, else gloo)", type=str, nargs="*"
    )
    repeats: int = option(5, "timed samples per row (median reported)")
    sample_seconds: float = option(
        0.2, "target seconds per timed sample (a batch of back-to-back operations)"
    )
    row_seconds: float = option(
        30.0, "at most about this long per row: a slower link gets fewer repeats (at least 2)"
    )
    slow_factor: float = option(
        10.0,
        "flag links more than this many times below the best link at the same operation and size",
    )
    timeout: float = option(900.0, "seconds allowed per launched phase")
    json: str = option(None, "write the rows as a JSON list to this path")
    markdown: str = option(None, "write the tables, formulas and flags as Markdown here")
    png: str = option(None, "write a log-log plot of bus bandwidth against size here")
    from_json: list = option(
        [], "report rows from these JSON files instead of measuring", type=str, nargs="*"
    )


# ------------------------------------------------------------------------------------------
# Sizes and formulas
# ------------------------------------------------------------------------------------------

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 10**6,
    "mb": 10**6,
    "mib": 1024**2,
    "g": 10**9,
    "gb": 10**9,
    "gib": 1024**3,
}


def parse_size(text: str | int) -> int:
    """Bytes of a size such as "64MiB", "1KiB", "4096" or "1MB" (KiB = 1024, KB = 1000)."""
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise ValueError(f"cannot read the size {text!r}; expected e.g. 4096, 64KiB or 16MiB")
        value = int(float(m.group(1)) * _UNITS[unit])
    if value < FLOAT32:
        raise ValueError(f"message size must be at least {FLOAT32} bytes, got {text!r}")
    return value


def format_bytes(n: int) -> str:
    """1024 -> "1 KiB", 3 * 1024**2 -> "3 MiB", 1000 -> "1000 B"."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for `op` over n participants (nccl-tests' formulas)."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; expected one of {OPS}")


def elements(op: str, size: int, n: int) -> tuple[int, int]:
    """(float32 elements of each participant's input, bytes actually measured): sizes are
    rounded down so that all-gather / reduce-scatter split evenly into n parts."""
    count = max(1, size // FLOAT32)
    if op == "all_gather":
        part = max(1, count // n)
        return part, part * n * FLOAT32
    if op == "reduce_scatter":
        part = max(1, count // n)
        return part * n, part * n * FLOAT32
    return count, count * FLOAT32


def make_row(op: str, size: int, n: int, seconds: list[float], **fields) -> dict[str, Any]:
    """A result row from the per-operation times of the repeats (seconds each)."""
    median = statistics.median(seconds)
    algbw = size / median / 1e9
    return {
        **fields,
        "op": op,
        "bytes": size,
        "devices": n,
        "latency_us": median * 1e6,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * bus_factor(op, n),
        "repeats": len(seconds),
        "spread": (max(seconds) - min(seconds)) / median if median > 0 else 0.0,
        "times_us": [t * 1e6 for t in seconds],
    }


def _batch_size(estimate: float, target: float) -> int:
    """Operations per timed sample: about `target` seconds' worth, 1 to 1000."""
    return int(min(1000, max(1, round(target / max(estimate, 1e-7)))))


def _sizes(opts: Options) -> list[int]:
    if opts.sizes:
        return [parse_size(s) for s in opts.sizes]
    return list(QUICK_SIZES if opts.quick else FULL_SIZES)


def _check_options(opts: Options) -> None:
    """Clear errors for bad options, before anything is launched."""
    bad = [op for op in opts.ops if op not in OPS]
    if bad:
        raise ValueError(f"unknown --ops {bad}; expected some of {list(OPS)}")
    bad = [f for f in opts.frameworks if f not in ("torch", "jax")]
    if bad:
        raise ValueError(f"unknown --frameworks {bad}; expected torch and/or jax")
    bad = [b for b in opts.torch_backends if b not in ("gloo", "nccl", "mpi")]
    if bad:
        raise ValueError(f"unknown --torch-backends {bad}; expected gloo, nccl or mpi")
    if opts.repeats < 1 or opts.sample_seconds <= 0 or opts.slow_factor <= 1:
        raise ValueError("--repeats must be >= 1, --sample-seconds > 0 and --slow-factor > 1")
    _sizes(opts)  # parses every size


def _quick(opts: Options) -> Options:
    """The quick preset's repeats and sample length (sizes: see `_sizes`)."""
    if not opts.quick:
        return opts
    return dataclasses.replace(
        opts, repeats=min(opts.repeats, 3), sample_seconds=min(opts.sample_seconds, 0.03)
    )


# ------------------------------------------------------------------------------------------
# Timing (shared by both frameworks)
# ------------------------------------------------------------------------------------------


@dataclass
class Sync:
    """How the participants agree (no-ops in one process): `barrier()` lines them up before
    a sample, `agree(ints)` is rank 0's list of ints everywhere, `slowest(times)` the
    per-sample maximum
    over participants, `done()` waits for queued operations. `pipelined`: a sample queues
    its operations back to back and waits once (else it waits for each)."""

    barrier: Any = lambda: None
    agree: Any = lambda ints: ints
    slowest: Any = lambda times: times
    done: Any = lambda out: out
    pipelined: bool = True


def time_operation(
    run, sync: Sync, repeats: int, target: float, row_seconds: float = 30.0
) -> tuple[list[float], int]:
    """(seconds per operation of each sample, operations per sample) of `run()`.

    One untimed warm-up; a timed single call sizes the batches (about `target` seconds
    each); each sample times a batch of back-to-back calls, from a barrier until the last
    one is done. A link so slow that `repeats` batches would take more than `row_seconds`
    gets fewer samples (at least 2).
    """
    sync.done(run())
    sync.barrier()
    t0 = time.perf_counter()
    sync.done(run())
    once = time.perf_counter() - t0
    k = _batch_size(once, target)
    fit = max(2, int(row_seconds / max(once * k, 1e-9)))
    k, repeats = sync.agree([k, min(repeats, fit)])
    times = []
    for _ in range(repeats):
        sync.barrier()
        t0 = time.perf_counter()
        out = None
        for _ in range(k):
            out = run()
            if not sync.pipelined:
                sync.done(out)
        sync.done(out)
        times.append((time.perf_counter() - t0) / k)
    return sync.slowest(times), k


# ------------------------------------------------------------------------------------------
# JAX: shard_map collectives over a 1-D mesh (local devices, or every process's devices)
# ------------------------------------------------------------------------------------------


def _shard_map():
    from jax import shard_map

    return shard_map


def _jax_collective(op: str, mesh):
    """(per-device function, implementation name) of `op` over the mesh axis "i"."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    if op == "all_reduce":
        return (lambda x: jax.lax.psum(x, "i")), "psum"
    if op == "all_gather":
        return (lambda x: jax.lax.all_gather(x, "i", tiled=True)), "all_gather"
    if op == "reduce_scatter":
        return (lambda x: jax.lax.psum_scatter(x, "i", tiled=True)), "psum_scatter"
    if op != "broadcast":
        raise ValueError(f"unknown collective {op!r}")

    def pbroadcast(x):
        return jax.lax.pbroadcast(x, "i", 0)

    try:  # XLA's CollectiveBroadcast, where the backend lowers it
        f = jax.jit(_shard_map()(pbroadcast, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
        f.lower(jax.ShapeDtypeStruct((mesh.size,), jnp.float32)).compile()
        return pbroadcast, "pbroadcast"
    except Exception:  # e.g. CPU: the equivalent psum of the root's buffer
        pass

    def masked(x):
        root = jax.lax.axis_index("i") == 0
        return jax.lax.psum(jnp.where(root, x, np.float32(0)), "i")

    return masked, "psum of the root's buffer (no CollectiveBroadcast on this backend)"


def _jax_sync(multi_process: bool, pipelined: bool) -> Sync:
    import jax
    import numpy as np

    done = jax.block_until_ready
    if not multi_process:
        return Sync(done=done, pipelined=pipelined)
    from jax.experimental import multihost_utils as mh

    counter = iter(range(10**9))
    return Sync(
        barrier=lambda: mh.sync_global_devices(f"collectives-{next(counter)}"),
        agree=lambda ints: [int(i) for i in mh.broadcast_one_to_all(np.asarray(ints, np.int32))],
        slowest=lambda t: np.max(mh.process_allgather(np.asarray(t)), axis=0).tolist(),
        done=done,
        pipelined=pipelined,
    )


def jax_rows(opts: Options, mesh, fields: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of every op and size over the devices of `mesh` (axis "i")."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = mesh.size
    # XLA's CPU devices of one process share one thread pool: queued executions can take
    # every thread while waiting for a peer that has none left (deadlock), so on CPU each
    # operation completes before the next starts (its latency then includes the dispatch).
    cpu_local = mesh.devices.flat[0].platform == "cpu" and len(mesh.local_devices) > 1
    sync = _jax_sync(jax.process_count() > 1, pipelined=not cpu_local)
    sharding = NamedSharding(mesh, P("i"))
    rows = []
    for op in opts.ops:
        fn, impl = _jax_collective(op, mesh)
        f = jax.jit(_shard_map()(fn, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
        for size in _sizes(opts):
            count, nbytes = elements(op, size, n)
            x = jax.make_array_from_callback(
                (n * count,), sharding, lambda idx, c=count: np.zeros(c, np.float32)
            )
            compiled = f.lower(x).compile()
            times, k = time_operation(
                lambda c=compiled, x=x: c(x),
                sync,
                opts.repeats,
                opts.sample_seconds,
                opts.row_seconds,
            )
            rows.append(
                make_row(
                    op,
                    nbytes,
                    n,
                    times,
                    framework="jax",
                    impl=impl,
                    iterations=k,
                    pipelined=sync.pipelined,
                    **fields,
                )
            )
            del x
    return rows


# ------------------------------------------------------------------------------------------
# torch.distributed
# ------------------------------------------------------------------------------------------


def _torch_call(op: str, count: int, n: int, device, group):
    """`run()` of one `op` on float32 zeros (zeros: sums stay finite however often)."""
    import torch
    import torch.distributed as dist

    inp = torch.zeros(count, dtype=torch.float32, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(inp, group=group)
    if op == "broadcast":
        src = dist.get_global_rank(group, 0) if group is not None else 0
        return lambda: dist.broadcast(inp, src=src, group=group)
    if op == "all_gather":
        out = torch.empty(count * n, dtype=torch.float32, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, inp, group=group)
    if op == "reduce_scatter":
        out = torch.empty(count // n, dtype=torch.float32, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, inp, group=group)
    raise ValueError(f"unknown collective {op!r}")


def _torch_sync(device, group) -> Sync:
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    ids = [device.index] if cuda else None

    def agree(ints):
        t = torch.tensor(ints, dtype=torch.int64, device=device)
        dist.broadcast(t, src=dist.get_global_rank(group, 0) if group else 0, group=group)
        return [int(i) for i in t.tolist()]

    def slowest(times):
        t = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return t.cpu().tolist()

    return Sync(
        barrier=lambda: dist.barrier(group=group, device_ids=ids) if cuda else dist.barrier(group),
        agree=agree,
        slowest=slowest,
        done=lambda out: torch.cuda.synchronize(device) if cuda else out,
    )


def torch_rows(opts: Options, backend: str, group, device, fields) -> list[dict[str, Any]]:
    """Rows of every op and size over the processes of `group` with `backend`."""
    import torch.distributed as dist

    n = dist.get_world_size(group)
    sync = _torch_sync(device, group)
    rows = []
    for op in opts.ops:
        for size in _sizes(opts):
            count, nbytes = elements(op, size, n)
            run = _torch_call(op, count, n, device, group)
            times, k = time_operation(
                run, sync, opts.repeats, opts.sample_seconds, opts.row_seconds
            )
            rows.append(
                make_row(
                    op,
                    nbytes,
                    n,
                    times,
                    framework="torch",
                    backend=backend,
                    impl=f"torch.distributed ({backend})",
                    iterations=k,
                    pipelined=True,
                    **fields,
                )
            )
    return rows


# ------------------------------------------------------------------------------------------
# Worker processes: torchrun / srun / this script's own launcher
# ------------------------------------------------------------------------------------------


def distributed_env() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when this process is one of several started by
    torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or srun (SLURM_PROCID, SLURM_NTASKS,
    SLURM_LOCALID), else None. Under srun the torch variables are set from SLURM's."""
    from baselines.distributed import env_int

    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world = env_int(env, "RANK", None, 0), env_int(env, "WORLD_SIZE", None, 1)
        local = env_int(env, "LOCAL_RANK", "0", 0)
    elif "SLURM_PROCID" in env and env_int(env, "SLURM_NTASKS", "1", 1) > 1:
        rank, world = env_int(env, "SLURM_PROCID", None, 0), env_int(env, "SLURM_NTASKS", None, 1)
        local = env_int(env, "SLURM_LOCALID", "0", 0)
        env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local))
    else:
        return None
    if rank >= world:
        raise ValueError(f"RANK={rank} but WORLD_SIZE={world}: ranks are 0..{world - 1}")
    return (rank, world, local) if world > 1 else None


def _check_rendezvous() -> None:
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise RuntimeError(
            f"{' and '.join(missing)} not set: under srun, export MASTER_ADDR=$(scontrol show "
            "hostnames $SLURM_JOB_NODELIST | head -n 1) and MASTER_PORT=29500 (torchrun sets "
            "them itself)"
        )


def _cuda_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _init_jax(rank: int, world: int, local: int) -> None:
    """`jax.distributed.initialize` for this worker: JAX_COORDINATOR_ADDRESS if set (this
    script's launcher sets it), else MASTER_ADDR:MASTER_PORT+1 under torchrun, else JAX's
    own cluster detection (SLURM); one GPU per process (LOCAL_RANK) when several are seen."""
    if not any(
        v in os.environ for v in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION")
    ):
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # share the GPU with torch
    import jax

    kwargs: dict[str, Any] = {}
    if "JAX_COORDINATOR_ADDRESS" not in os.environ and "MASTER_ADDR" in os.environ:
        port = int(os.environ.get("MASTER_PORT", "29500")) + 1
        kwargs["coordinator_address"] = f"{os.environ['MASTER_ADDR']}:{port}"
    if "JAX_COORDINATOR_ADDRESS" in os.environ or kwargs:
        kwargs.update(num_processes=world, process_id=rank)
    if "JAX_LOCAL_DEVICE_IDS" not in os.environ and _cuda_count() > 1:
        kwargs["local_device_ids"] = [local]
    jax.distributed.initialize(**kwargs)


def _hostnames_torch() -> list[str]:
    import torch.distributed as dist

    names: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(names, socket.gethostname())
    return names


def _hostnames_jax() -> list[int]:
    import zlib

    import numpy as np
    from jax.experimental import multihost_utils as mh

    mine = np.uint32(zlib.crc32(socket.gethostname().encode()))
    return mh.process_allgather(mine).tolist()


def _scope(processes: int, nodes: int) -> str:
    if nodes > 1:
        return "cross-node"
    return "cross-process" if processes > 1 else "in-process"


def _torch_backends(opts: Options) -> list[str]:
    return list(opts.torch_backends) or (["nccl"] if _cuda_count() else ["gloo"])


def _torch_part(opts: Options, rank: int, world: int, local: int) -> tuple[list, list | None]:
    """(rows, hostnames) of torch.distributed over every process, one group per backend."""
    import torch
    import torch.distributed as dist

    backends = _torch_backends(opts)
    if "nccl" in backends:  # before the first collective: NCCL binds each rank to its GPU
        torch.cuda.set_device(local)
    dist.init_process_group(backends[0], init_method="env://", rank=rank, world_size=world)
    hosts = _hostnames_torch()
    nodes = len(set(hosts))
    rows = []
    for i, backend in enumerate(backends):
        group = None if i == 0 else dist.new_group(backend=backend)
        cuda = backend == "nccl"
        device = torch.device("cuda", local) if cuda else torch.device("cpu")
        fields = {"processes": world, "nodes": nodes, "scope": _scope(world, nodes)}
        rows += torch_rows(opts, backend, group, device, fields)
    dist.barrier()
    dist.destroy_process_group()
    return rows, hosts


def _jax_part(opts: Options, rank: int, world: int, local: int, hosts) -> list:
    import jax
    import numpy as np
    from jax.sharding import Mesh

    _init_jax(rank, world, local)
    nodes = len(set(hosts if hosts is not None else _hostnames_jax()))
    platform = jax.devices()[0].platform
    backend = f"xla-{platform}"
    if platform == "cpu":
        backend += f"/{jax.config.jax_cpu_collectives_implementation}"
    mesh = Mesh(np.asarray(jax.devices()), ("i",))
    fields = {"processes": world, "nodes": nodes, "scope": _scope(world, nodes), "backend": backend}
    return jax_rows(opts, mesh, fields)


def run_workers(opts: Options, rank: int, world: int, local: int) -> list[dict] | None:
    """This process's part of the cross-process (or cross-node) links; rows on rank 0."""
    if "torch" in opts.frameworks:
        _check_rendezvous()
    rows, hosts = [], None
    if "torch" in opts.frameworks:
        try:
            rows, hosts = _torch_part(opts, rank, world, local)
        except ImportError:
            print("torch is not installed: torch.distributed skipped", file=sys.stderr)
    if "jax" in opts.frameworks:
        rows += _jax_part(opts, rank, world, local, hosts)
    info = run_info()  # after jax.distributed.initialize: it reads the devices
    return [{**r, "machine": info} for r in rows] if rank == 0 else None


def run_in_process(opts: Options) -> list[dict]:
    """The in-process JAX link: a 1-D mesh of this process's first `devices` devices."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = jax.local_devices()
    n = min(opts.devices, len(devices))
    platform = devices[0].platform
    mesh = Mesh(np.asarray(devices[:n]), ("i",))
    fields = {"processes": 1, "nodes": 1, "scope": "in-process", "backend": f"xla-{platform}"}
    info = run_info()
    return [{**r, "machine": info} for r in jax_rows(opts, mesh, fields)]


# ------------------------------------------------------------------------------------------
# The local launcher: one in-process phase, one group of local worker processes
# ------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _host_devices_flag(n: int) -> str:
    flags = os.environ.get("XLA_FLAGS", "")
    kept = [f for f in flags.split() if "xla_force_host_platform_device_count" not in f]
    return " ".join([*kept, f"--xla_force_host_platform_device_count={n}"])


def _phase_env() -> dict[str, str]:
    """This process's environment for a worker: the repository importable, and none of the
    rank variables of an outer launcher."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(name, None)
    return env


def _wait_all(procs, timeout: float) -> None:
    """Wait for every process until `timeout` seconds from now; kill the ones left (a
    worker whose peer died would otherwise wait in a collective forever)."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _run_phase(phase: str, opts: Options, envs: list[dict[str, str]], cwd: str) -> list[dict]:
    """Start one worker per environment (`--worker`), wait, return rank 0's rows."""
    with tempfile.TemporaryDirectory(prefix="collectives-") as tmp:
        out = Path(tmp) / "rows.json"
        payload = json.dumps(
            {"phase": phase, "rows_out": str(out), "options": dataclasses.asdict(opts)}
        )
        cmd = [sys.executable, "-m", "benchmarks.collectives", "--worker", payload]
        logs = [Path(tmp) / f"worker{i}.log" for i in range(len(envs))]
        procs = []
        for env, log in zip(envs, logs, strict=True):
            with open(log, "w") as f:  # the child keeps its own descriptor
                procs.append(
                    subprocess.Popen(cmd, env=env, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
                )
        _wait_all(procs, opts.timeout)
        codes = [p.returncode for p in procs]
        if any(codes) or not out.exists():
            worst = next((i for i, c in enumerate(codes) if c), 0)
            raise RuntimeError(
                f"the {phase} phase failed (exit codes {codes}); worker {worst} "
                f"wrote:\n{logs[worst].read_text()[-3000:]}"
            )
        return json.loads(out.read_text())


def launch_local(opts: Options) -> list[dict]:
    """Measure the links of this machine: in-process JAX, then the cross-process group."""
    gpus = _cuda_count()
    root = str(Path(__file__).resolve().parent.parent)
    rows = []
    devices = opts.devices if opts.devices >= 0 else (gpus or 2)
    if "jax" in opts.frameworks and devices >= 2:
        env = _phase_env()
        if not gpus:
            env["XLA_FLAGS"] = _host_devices_flag(devices)
        print(f"in-process: JAX over {devices} devices ...", file=sys.stderr, flush=True)
        rows += _run_phase("in-process", dataclasses.replace(opts, devices=devices), [env], root)
    procs = opts.processes if opts.processes >= 0 else (gpus if gpus >= 2 else 2)
    if procs >= 2:
        print(
            f"cross-process: {procs} local processes ({', '.join(opts.frameworks)}) ...",
            file=sys.stderr,
            flush=True,
        )
        master, coordinator = _free_port(), _free_port()
        envs = []
        for rank in range(procs):
            env = {
                **_phase_env(),
                "RANK": str(rank),
                "WORLD_SIZE": str(procs),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(procs),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(master),
                "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{coordinator}",
            }
            if gpus:
                env.setdefault("JAX_LOCAL_DEVICE_IDS", str(rank % gpus))
            else:
                env["XLA_FLAGS"] = _host_devices_flag(1)
            envs.append(env)
        rows += _run_phase("cross-process", opts, envs, root)
    return rows


def _worker_main(payload: str) -> None:
    job = json.loads(payload)
    opts = Options(**job["options"])
    if job["phase"] == "in-process":
        rows = run_in_process(opts)
    else:
        rank, world, local = distributed_env()
        rows = run_workers(opts, rank, world, local)
    if rows is not None:
        write_json(job["rows_out"], rows)


# ------------------------------------------------------------------------------------------
# Report: slow links, tables, plot
# ------------------------------------------------------------------------------------------


def link_name(row: dict[str, Any]) -> str:
    """A link in words: "JAX cross-process (2 processes, xla-cpu/gloo)"."""
    framework = {"jax": "JAX", "torch": "torch"}.get(row["framework"], row["framework"])
    if row["scope"] == "in-process":
        where = f"{row['devices']} devices"
    else:
        where = f"{row['processes']} processes"
        if row.get("nodes", 1) > 1:
            where += f" on {row['nodes']} nodes"
        if row["devices"] != row["processes"]:
            where += f", {row['devices']} devices"
    return f"{framework} {row['scope']} ({where}, {row.get('backend', '?')})"


def _best(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """The row with the highest bus bandwidth of every (op, bytes) (rows with an `error`
    or without a bandwidth are left out)."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if "error" not in r and r.get("busbw_gbps", 0) > 0:
            case = (r["op"], r["bytes"])
            if case not in best or r["busbw_gbps"] > best[case]["busbw_gbps"]:
                best[case] = r
    return best


def _below(row: dict[str, Any], best, factor: float) -> tuple[float, dict] | None:
    """(ratio, best row) when `row` is more than `factor` times below the best, else None."""
    top = best.get((row.get("op"), row.get("bytes")))
    if top is None or "error" in row or not row.get("busbw_gbps", 0) > 0:
        return None
    ratio = top["busbw_gbps"] / row["busbw_gbps"]
    return (ratio, top) if ratio > factor else None


def slow_links(rows: list[dict[str, Any]], factor: float = 10.0) -> list[str]:
    """Plain-words warnings for every link whose bus bandwidth is more than `factor` times
    below the best link's at the same operation and message size.

    One line per (link, operation): the ratio at the largest flagged size, against the link
    that was best there, and the range of ratios and sizes when more than one size is
    flagged. Rows with an `error` field are ignored.
    """
    best = _best(rows)
    flagged = defaultdict(list)  # (link, op) -> [(bytes, ratio, best link)]
    for row in rows:
        if (hit := _below(row, best, factor)) is not None:
            flagged[(link_name(row), row["op"])].append((row["bytes"], hit[0], link_name(hit[1])))
    lines = []
    for (link, op), hits in sorted(flagged.items()):
        hits.sort()
        size, ratio, top = hits[-1]
        line = f"{link} {OP_NAMES[op]} at {format_bytes(size)} is {ratio:.0f}× below {top}"
        if len(hits) > 1:
            lo, hi = min(h[1] for h in hits), max(h[1] for h in hits)
            line += (
                f" ({lo:.0f}–{hi:.0f}× at {len(hits)} sizes from "
                f"{format_bytes(hits[0][0])} to {format_bytes(size)})"
            )
        lines.append(line)
    return lines


def annotate_flags(rows: list[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    """The rows, each with `flags`: ["40× below <best link>"] when its bus bandwidth is more
    than `factor` times below the best link's at the same operation and size, else []."""
    best = _best(rows)
    out = []
    for row in rows:
        hit = _below(row, best, factor)
        flags = [] if hit is None else [f"{hit[0]:.0f}× below {link_name(hit[1])}"]
        out.append({**row, "flags": flags, "slow_factor": factor})
    return out


def format_latency(us: float) -> str:
    """Microseconds in µs below 1 ms, else ms or s: "240 µs", "4.95 ms"."""
    if us < 1000:
        return f"{us:.3g} µs"
    return f"{us / 1000:.3g} ms" if us < 1e6 else f"{us / 1e6:.3g} s"


def _cell(row: dict[str, Any]) -> str:
    return f"{row['busbw_gbps']:.3g} ({format_latency(row['latency_us'])})"


def pivot_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per (op, size), one column per link: bus bandwidth in GB/s and
    latency in µs."""
    links = sorted({link_name(r) for r in rows if "error" not in r})
    cells = defaultdict(dict)
    for r in rows:
        if "error" not in r:
            cells[(OPS.index(r["op"]) if r["op"] in OPS else 99, r["op"], r["bytes"])][
                link_name(r)
            ] = _cell(r)
    header = "| op | size | " + " | ".join(links) + " |"
    rule = "| --- | --- | " + " | ".join("---" for _ in links) + " |"
    body = [
        f"| {OP_NAMES.get(op, op)} | {format_bytes(size)} | "
        + " | ".join(cells[(i, op, size)].get(link, "–") for link in links)
        + " |"
        for (i, op, size) in sorted(cells)
    ]
    return "\n".join([header, rule, *body])


TABLE_COLUMNS = (
    Column("framework", "framework"),
    Column("backend", "backend"),
    Column("scope", "scope"),
    Column("processes", "processes", str),
    Column("devices", "devices", str),
    Column("op", "op", lambda op: OP_NAMES.get(op, op)),
    Column("bytes", "size", format_bytes),
    Column("latency_us", "latency", format_latency),
    Column("algbw_gbps", "algbw [GB/s]", lambda x: f"{x:.3g}"),
    Column("busbw_gbps", "busbw [GB/s]", lambda x: f"{x:.3g}"),
    Column("spread", "spread", lambda x: f"{x:.0%}"),
    Column("iterations", "ops/sample", str),
)

FORMULAS = (
    "busbw = algbw × 2(n−1)/n (all-reduce), × (n−1)/n (all-gather, reduce-scatter), × 1 "
    "(broadcast); algbw = bytes / latency; GB/s = 1e9 bytes/s; n = participating devices; "
    "bytes = each participant's buffer (all-reduce, broadcast), the gathered output "
    "(all-gather) or each participant's input (reduce-scatter). Cells: busbw GB/s (latency)."
)


def render_markdown(rows: list[dict[str, Any]], factor: float) -> str:
    flags = slow_links(rows, factor)
    flag_text = "\n".join(f"- {line}" for line in flags) or "- none"
    return (
        "\n\n".join(
            [
                "## Collectives preflight",
                FORMULAS,
                pivot_table(rows),
                f"Links more than {factor:g}× below the best link at the same operation and size "
                f"(bus bandwidth):\n\n{flag_text}",
                "### All rows",
                markdown_table([r for r in rows if "error" not in r], TABLE_COLUMNS),
            ]
        )
        + "\n"
    )


def plot_rows(rows: list[dict[str, Any]], path: str | os.PathLike) -> None:
    """A 2 x 2 log-log plot: bus bandwidth against size, per op, one line per link."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for ax, op in zip(axes.flat, OPS, strict=True):
        lines = defaultdict(list)
        for r in rows:
            if r.get("op") == op and "error" not in r:
                lines[link_name(r)].append((r["bytes"], r["busbw_gbps"]))
        for name, points in sorted(lines.items()):
            points.sort()
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
        ax.set(
            xscale="log",
            yscale="log",
            title=OP_NAMES[op],
            xlabel="message size",
            ylabel="bus bandwidth [GB/s]",
        )
        sizes = sorted({size for points in lines.values() for size, _ in points})
        if sizes:
            ax.set_xticks(sizes, [format_bytes(b) for b in sizes], fontsize="small")
            ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        if lines:
            ax.legend(fontsize="x-small")
    fig.tight_layout()
    save_figure(fig, path)


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> None:
    """Write a matplotlib figure atomically (temporary file, then rename) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _files.atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi)
    finally:
        plt.close(fig)


def _write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _files.write_text(path, text)


def report(rows: list[dict[str, Any]], opts: Options) -> None:
    """Print the table and the flags; write the JSON, Markdown and PNG asked for."""
    rows = annotate_flags(rows, opts.slow_factor)
    if opts.json:
        write_json(opts.json, rows)
    if opts.markdown:
        _write_text(opts.markdown, render_markdown(rows, opts.slow_factor))
    if opts.png:
        plot_rows(rows, opts.png)
    print(FORMULAS + "\n")
    print(pivot_table(rows))
    flags = slow_links(rows, opts.slow_factor)
    print(
        f"\nLinks more than {opts.slow_factor:g}× below the best link at the same operation "
        "and size (bus bandwidth):"
    )
    print("\n".join(f"  {line}" for line in flags) or "  none")
    for what, path in (("rows", opts.json), ("tables", opts.markdown), ("plot", opts.png)):
        if path:
            print(f"wrote {what} to {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> list[dict[str, Any]] | None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.collectives", description=__doc__.split("\n\n")[0]
    )
    add_options(parser, Options)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker_main(args.worker)
        return None
    opts = _quick(options_from_args(Options, args))
    _check_options(opts)
    if opts.from_json:
        rows = [r for path in opts.from_json for r in json.loads(Path(path).read_text())]
    elif (dist := distributed_env()) is not None:  # started by torchrun / srun
        rows = run_workers(opts, *dist)
        if rows is None:
            return None  # not rank 0: rank 0 reports
    else:
        rows = launch_local(opts)
    report(rows, opts)
    return rows


if __name__ == "__main__":
    main()
