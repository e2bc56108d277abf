"""The zero-copy bridge between JAX and PyTorch: `jax_to_torch` and `torch_to_jax`.

They move arrays (or pytrees of arrays: tuples, lists, dicts, chex dataclasses such as
`EnvState`) through DLPack without copying, on CPU and GPU. A copy happens only where DLPack
cannot share memory: a non-contiguous or misaligned torch tensor, or a dtype JAX does not hold
(int64 / float64 while `jax_enable_x64` is off are narrowed to 32 bits).

GPU memory: importing this module (or `gigastep.adapters.torch`, which imports it), when
neither `XLA_PYTHON_CLIENT_PREALLOCATE` nor `XLA_PYTHON_CLIENT_MEM_FRACTION` (nor
`XLA_CLIENT_MEM_FRACTION`) is set and JAX has not yet started a backend, sets
`XLA_PYTHON_CLIENT_PREALLOCATE=false`: JAX then allocates GPU memory as it needs it instead of
reserving 75% of the GPU at start, leaving the rest to PyTorch. Set either variable yourself
(before JAX starts) to choose another split; if JAX already runs on a GPU when this module is
imported, a warning says the setting came too late.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, overload

import jax
import jax.dlpack
import jax.numpy as jnp
import numpy as np
import torch

__all__ = ["JAX_MEMORY_SETTING", "jax2torch", "jax_to_torch", "torch2jax", "torch_to_jax"]

# ------------------------------------------------------------------------------------------
# GPU memory shared by JAX and PyTorch
# ------------------------------------------------------------------------------------------

_MEMORY_VARIABLES = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_CLIENT_MEM_FRACTION",
)


def _jax_backends_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # private API moved: assume not started
        return False


def _configure_jax_gpu_memory() -> str:
    """Turn JAX's GPU preallocation off unless the user chose a setting (see module doc).

    Returns "user" (a variable was set), "late" (JAX had already started) or "set".
    """
    if any(name in os.environ for name in _MEMORY_VARIABLES):
        return "user"
    if _jax_backends_started():
        if any(d.platform == "gpu" for d in jax.devices()):
            warnings.warn(
                "gigastep.adapters.torch was imported after JAX started on the GPU, so JAX keeps "
                "its "
                "default preallocation (75% of GPU memory) and PyTorch may run short. Set "
                "XLA_PYTHON_CLIENT_PREALLOCATE=false (or XLA_PYTHON_CLIENT_MEM_FRACTION) before "
                "the first JAX computation, or import gigastep.adapters.torch first.",
                stacklevel=3,
            )
        return "late"
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return "set"


JAX_MEMORY_SETTING = _configure_jax_gpu_memory()
"""What the import did about JAX's GPU memory: "set", "user" or "late" (see module doc)."""

# ------------------------------------------------------------------------------------------
# DLPack conversion
# ------------------------------------------------------------------------------------------


def _leaf_to_torch(x: object) -> torch.Tensor:
    if isinstance(x, jax.Array):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        if len(x.sharding.device_set) > 1:
            raise ValueError(
                f"jax_to_torch needs arrays on one device; got one sharded over "
                f"{len(x.sharding.device_set)} devices (convert its addressable shards instead)"
            )
        return torch.from_dlpack(x)
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    if isinstance(x, torch.Tensor):
        return x
    raise TypeError(f"jax_to_torch converts JAX or NumPy arrays; got a leaf of type {type(x)}")


@overload
def jax_to_torch(x: jax.Array | np.ndarray) -> torch.Tensor: ...
@overload
def jax_to_torch(x: Any) -> Any: ...
def jax_to_torch(x: Any) -> Any:
    """JAX array(s) -> torch tensor(s) sharing the same memory (DLPack, no copy).

    Args:
        x: a `jax.Array` or a pytree of them (tuple, list, dict, chex dataclass); every dtype
            JAX holds (bool and uint8 included). Typed PRNG keys become their uint32 data.

    Returns:
        The same structure with `torch.Tensor` leaves on the matching torch device.
    """
    return jax.tree_util.tree_map(_leaf_to_torch, x)


# XLA's GPU executables require every entry parameter to start at a multiple of 16 bytes
# (`kEntryParameterAlignBytes` in xla/service/gpu/gpu_constants.h, checked by the GPU
# executable's `CheckAlignment`: "Address of buffer ... must be a multiple of ..."). A DLPack
# view of a torch tensor that starts inside its storage (`x[1:]`) breaks that, so such tensors
# are copied (torch's allocations are aligned to far more than 16 bytes).
XLA_PARAMETER_ALIGNMENT = 16


def _needs_copy(t: torch.Tensor) -> bool:
    """Whether `torch_to_jax` must copy `t` rather than view it: non-contiguous, or its data
    not aligned to `XLA_PARAMETER_ALIGNMENT` bytes. An empty tensor holds nothing to align."""
    if not t.is_contiguous():
        return True
    return t.numel() > 0 and t.data_ptr() % XLA_PARAMETER_ALIGNMENT != 0


def _leaf_to_jax(t: object) -> jax.Array:
    if isinstance(t, torch.Tensor):
        t = t.detach()
        if _needs_copy(t):
            t = t.clone(memory_format=torch.contiguous_format)
        return jax.dlpack.from_dlpack(t)
    if isinstance(t, (jax.Array, np.ndarray)):
        return jnp.asarray(t)
    raise TypeError(f"torch_to_jax converts torch tensors; got a leaf of type {type(t)}")


@overload
def torch_to_jax(x: torch.Tensor) -> jax.Array: ...
@overload
def torch_to_jax(x: Any) -> Any: ...
def torch_to_jax(x: Any) -> Any:
    """Torch tensor(s) -> JAX array(s) sharing the same memory (DLPack, no copy).

    Non-contiguous tensors and tensors whose data does not start at a multiple of 16 bytes
    (views such as `x[1:]`, which XLA's GPU executables cannot take) are copied first
    (`_needs_copy`); tensors that require grad are detached. JAX must not see the tensor
    change afterwards: treat it as read-only until JAX has consumed it.
    """
    return jax.tree_util.tree_map(_leaf_to_jax, x, is_leaf=lambda t: isinstance(t, torch.Tensor))


# The 2023 library's names (rules §10.1), for code that switches over.
jax2torch = jax_to_torch
torch2jax = torch_to_jax
