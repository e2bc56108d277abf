"""The packages that come with the library but are not part of it, found by name.

The repository holds, beside `gigastep/`, the PPO baseline (`baselines/`) and the benchmarks
(`benchmarks/`). The library never imports either (tests/architecture checks it): the commands
`gigastep train` and `gigastep bench` run them as `python -m MODULE`, and the checkpoint loader
`ppo` (the entry point of the group `gigastep.players`) imports the baseline's loader only
when a checkpoint asks for it.

The PPO baseline has two names. The wheel ships it as `gigastep_baselines`, so that installing
Gigastep never takes the name `baselines`, which belongs to another project (OpenAI
Baselines); in a checkout, and in an editable install (`pip install -e .`), it is the folder
`baselines`. `BASELINE_PACKAGES` lists both, in the order they are tried. The benchmarks are
not in the wheel: they run from a checkout only.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from typing import Any

__all__ = ["BASELINE_PACKAGES", "load_ppo_player", "locate"]

BASELINE_PACKAGES = ("gigastep_baselines", "baselines")
"""The PPO baseline's package names, in the order they are tried: the installed wheel's, then
the checkout's."""


def locate(modules: Sequence[str]) -> tuple[str | None, list[str]]:
    """The first of `modules` (dotted names) that can be imported, without importing it.

    Returns `(name, [])` for the first one found, or `(None, reasons)`: one line per module
    saying why it cannot be imported (its package is missing, or holds no such module).
    Finding a submodule imports its package's `__init__` (as `python -m` would).
    """
    reasons = []
    for module in modules:
        package, _, name = module.rpartition(".")
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:  # its package is missing
            reasons.append(f"{module}: no package {package!r} is installed")
            continue
        except Exception as err:  # another project's package of that name may fail anyhow
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            reasons.append(f"{module}: the package {package!r} fails to import ({first})")
            continue
        if spec is not None and spec.origin is not None:
            return module, []
        found = importlib.util.find_spec(package) if package else None
        where = ", ".join(found.submodule_search_locations or []) if found is not None else ""
        reasons.append(
            f"{module}: the package {package!r} ({where}) has no module {name!r}, so it is "
            "another package of that name"
        )
    return None, reasons


def load_ppo_player(checkpoint: dict[str, Any], device: Any = "cpu") -> Any:
    """The `ppo` entry point of the group `gigastep.players`: the PPO baseline's loader
    (`players.load` of `gigastep_baselines` or `baselines`) applied to a checkpoint dict.

    Raises:
        ImportError: neither package holds the baseline's loader (each reason named).
    """
    module, reasons = locate([f"{package}.players" for package in BASELINE_PACKAGES])
    if module is None:
        raise ImportError(
            "the PPO checkpoint loader needs Gigastep's PPO baseline, shipped in the gigastep "
            "wheel as gigastep_baselines and in a checkout as baselines; neither was found ("
            + "; ".join(reasons)
            + "). Reinstall gigastep (pip install 'gigastep[train]') or run from a checkout"
        )
    return importlib.import_module(module).load(checkpoint, device)
