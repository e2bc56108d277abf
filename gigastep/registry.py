"""`make`: a scenario name, file or builder → a `GigastepEnv`, the one place that joins the two.

The scenario catalogue (`gigastep.scenarios`) turns names and TOML into an `EnvConfig` and knows
nothing of environments; `GigastepEnv` (`gigastep.env`) plays any `EnvConfig` and knows nothing
of names. `make` sits above both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gigastep.env import GigastepEnv
from gigastep.scenarios.catalogue import ScenarioBuilder, ScenarioSpec, resolve, scenario_hash

__all__ = ["make", "make_scenario"]


def make(scenario: str | Path | ScenarioBuilder, **overrides: Any) -> GigastepEnv:
    """A `GigastepEnv` of a scenario, with `env.spec` its `ScenarioSpec` (name, version, hash).

    Args:
        scenario: a catalogue name (`gigastep.list_scenarios()`, or a bare base name), a TOML
            file (`str` ending in ".toml" or a `Path`, optionally followed by
            `#scenario_name`; see `gigastep.scenarios.resolve`), or a `ScenarioBuilder`.
        **overrides: `EnvConfig` fields applied last.

    Example:
        >>> env = gigastep.make("identical_5_vs_1_pobs_vec_void_disc")
        >>> env.spec.name, env.n_agents
        ('identical_5_vs_1_pobs_vec_void_disc', 6)
    """
    if isinstance(scenario, ScenarioBuilder):
        config = scenario.config(**overrides)
        spec = ScenarioSpec(scenario.name, scenario.version, scenario_hash(config))
    else:
        spec, config = resolve(scenario, **overrides)
    env = GigastepEnv(config)
    env.spec = spec
    return env


make_scenario = make
"""The 2023 library's name for `make`."""
