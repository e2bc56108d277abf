"""Gigastep: fast multi-agent reinforcement-learning environments as pure JAX functions."""

from gigastep.types import AgentState, EnvConfig, EnvState, EpisodeState, MapSpec

__version__ = "0.1.0"

__all__ = [
    "AgentState",
    "EnvConfig",
    "EnvState",
    "EpisodeState",
    "MapSpec",
    "__version__",
]
