"""JaxMARL interface (`pip install 'gigastep[jaxmarl]'`): `gigastep.jaxmarl.make(name,
**overrides)` is a `jaxmarl.environments.multi_agent_env.MultiAgentEnv` that JaxMARL's
wrappers and baselines run unchanged. The adapter lives in `gigastep.adapters.jaxmarl`, whose
docstring gives the conventions (agent names, dones, infos, world state, final observations).
"""

from gigastep.adapters.jaxmarl import GigastepJaxMARLEnv, agent_names, make

__all__ = ["GigastepJaxMARLEnv", "agent_names", "make"]
