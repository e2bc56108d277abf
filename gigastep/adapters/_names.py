"""The agents' names that the multi-agent adapters (PettingZoo, JaxMARL) share, so that one
agent has one name in every library: `team{t}_agent{k}`, k counting within the team."""

from __future__ import annotations

from gigastep.game.types import EnvConfig

__all__ = ["agent_names"]


def agent_names(config: EnvConfig) -> list[str]:
    """`team{t}_agent{k}` for every agent, in agent order (k = index within the team)."""
    seen = [0, 0]
    names: list[str] = []
    for t in config.teams:
        names.append(f"team{t}_agent{seen[t]}")
        seen[t] += 1
    return names
