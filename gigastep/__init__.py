"""Gigastep: fast multi-agent reinforcement-learning environments as pure JAX functions.

>>> import jax, gigastep
>>> env = gigastep.make("identical_5_vs_1_fobs_vec_void_cont")
>>> obs, state = env.reset(jax.random.key(0))
"""

from typing import Any

from gigastep.env import GigastepEnv
from gigastep.game.types import (
    AgentState,
    EnvConfig,
    EnvState,
    EpisodeState,
    MapSpec,
    ProcMaps,
    StepInfo,
    StepNoise,
    TeamDraw,
)
from gigastep.wrappers import FrameStack

__version__ = "0.1.0"

_REGISTRY_API = ("make", "make_scenario")
_SCENARIO_API = (
    "AgentType",
    "ScenarioBuilder",
    "ScenarioSpec",
    "agent_types",
    "base_scenarios",
    "list_distributions",
    "list_scenarios",
    "make_config",
    "resolve",
    "scenario_hash",
)


# Rollouts: the module `gigastep.rollout` (its function `gigastep.rollout.rollout`; calling
# the module itself is deprecated, removed in 0.3) and the sharded form.
_ROLLOUT_API = ("parallel", "rollout", "sharded_rollout")


def __getattr__(name: str) -> Any:
    # The catalogue is imported on first use, so `import gigastep` stays light.
    if name in _REGISTRY_API:
        from gigastep import registry

        return getattr(registry, name)
    if name in _SCENARIO_API:
        from gigastep import scenarios

        return getattr(scenarios, name)
    if name in _ROLLOUT_API:
        import importlib

        if name == "sharded_rollout":
            return importlib.import_module("gigastep.parallel").sharded_rollout
        return importlib.import_module(f"gigastep.{name}")
    raise AttributeError(f"module 'gigastep' has no attribute {name!r}")


__all__ = [
    "AgentState",
    "EnvConfig",
    "EnvState",
    "EpisodeState",
    "FrameStack",
    "GigastepEnv",
    "MapSpec",
    "ProcMaps",
    "StepInfo",
    "StepNoise",
    "TeamDraw",
    "__version__",
    *_REGISTRY_API,
    *_SCENARIO_API,
    *_ROLLOUT_API,
]
