"""JaxMARL adapter: a Gigastep game as a `jaxmarl.environments.multi_agent_env.MultiAgentEnv`.

`make(name_or_env, opponent=None, team=0, final_obs=False, world_state=True, **overrides)`
returns a `GigastepJaxMARLEnv` that JaxMARL's wrappers (`LogWrapper`, `MPELogWrapper`,
`SMAXLogWrapper`, `CTRolloutManager`) and baselines (IPPO, MAPPO) run with nothing changed but
the line that makes the environment. Needs the `jaxmarl` extra (`pip install
'gigastep[jaxmarl]'`, see docs/install.md); `import gigastep` never imports JaxMARL.

The JaxMARL conventions, and what Gigastep puts in them:

- Agents are named `team{t}_agent{k}`, k counting within the team (`team0_agent0`, ...,
  `team1_agent0`, ...; the names of the PettingZoo adapter), in the order of the game's agent
  axis. `agents` lists the agents the caller controls: all of them, or with `opponent` only
  team `team`'s, the other team being played by a scripted policy of
  `gigastep.opponents` inside the same step (as `TorchVecEnv(..., opponent=...)`).
  `num_agents = len(agents)`.
- `reset(key) -> (obs, state)` and `step(key, state, actions) -> (obs, state, rewards, dones,
  infos)`, with dicts keyed by `agents`; the state is Gigastep's `EnvState`. `step` resets a
  finished game inside the same compiled program (Gigastep's `step_autoreset`: the fresh game
  is computed on every call and kept where the game ended, with no Python branching), so under
  `jax.vmap` every step costs one reset per game, as JaxMARL's own `MultiAgentEnv.step` does.
  `step(..., reset_state=s)` restarts a finished game from `s` instead (its observation is
  that of `observe_state`: nothing detected yet, communication noise drawn from the key).
- Observations: `obs[agent]` is the agent's row of Gigastep's observation: float32 (L,) for a
  vector scenario, float32 (entity_size,) for an entity one, uint8 (res_x, res_y, 3) for an
  RGB one. "rgb_vector" scenarios (a tuple per
  agent) are refused at make time: JaxMARL's baselines stack the agents' observations into one
  array (`batchify`). With `world_state` (default), `obs["world_state"]` is the game's global
  state vector (S,) float32 seen from `team` (`GigastepEnv.state_vector`, its agents first),
  as SMAX provides it; `state_size = S` and `num_allies = num_agents`, so the
  `SMAXWorldStateWrapper` of JaxMARL's `mappo_rnn_smax.py` runs unchanged for a centralised
  critic.
- Spaces: `observation_space(agent)` / `action_space(agent)` are JaxMARL spaces, the same
  objects for every agent: `Box(low, high, (L,), float32)` (finite bounds,
  `gigastep.spaces.vector_bounds`; `entity_bounds` for entity scenarios) or
  `Box(0, 255, (res_x, res_y, 3), uint8)`; `Discrete(27)` or `Box(-1, 1, (3,), float32)`.
  Heterogeneous teams (agent types with different health, speed, range) share these spaces:
  a scenario has one observation length for every agent and type, so the baselines' stacking
  works, and an agent's own health and sprite in its ego row tell a shared network most of
  what sets its type apart.
- Actions: `actions[agent]` is one agent's action, an int index 0..26 or float32 (3,); axes
  of length 1 are dropped, since JaxMARL's baselines pass (1,) per agent (`unbatchify`).
- Rewards: `rewards[agent]` float32 (), Gigastep's per-agent reward.
- Dones: `dones[agent]` is True once the agent is dead (as in SMAX) and for every agent on
  the step that ends the episode (as in MPE; SMAX leaves its survivors False there), so that
  per-agent dones (`ippo_ff_mpe.py`) never bootstrap across a reset;
  `dones["__all__"]` is the episode's end. A dead agent's observation is all zeros, its reward
  0 (it earns nothing after the step it dies in) and its actions are ignored until the reset.
- Infos: per-agent leaves of shape (num_agents,), as JaxMARL's baselines expect (they reshape
  every info leaf to (NUM_ACTORS,)): `terminated` (a team eliminated), `truncated` (time
  limit), `winner` (int32 team 0 or 1 of an episode that ends with one team alive, else -1)
  and `won` (float32, 1 where the agent's team won the episode that ends at this step).
  With a team draw (`EnvConfig.team_draw`) also `present` (bool): the agent plays the
  episode of the returned state (an absent agent is dead from its start: done, zero
  observation and reward).
- Final observations: as in every JaxMARL environment, the observation `step` returns where
  an episode ends is the fresh game's first observation, so the ending game's last
  observation is not in `obs`. With `final_obs=True` it is in `infos["final_obs"]` (a dict
  keyed by `agents`, equal to `obs` where no episode ended); it is off by default because
  such a leaf is not of shape (num_agents,), which the baselines' info reshape requires, and
  because it costs a second observation per step.
- `get_avail_actions(state)`: every action is available to every agent (discrete actions
  only; dead agents' actions are ignored). `agent_classes`: the controlled agents by team.

Example:
    >>> env = make("identical_5_vs_5_fobs_vec_void_disc", opponent="pursuit")
    >>> obs, state = env.reset(jax.random.key(0))
    >>> actions = {a: env.action_space(a).sample(k) for a, k in
    ...            zip(env.agents, jax.random.split(jax.random.key(1), env.num_agents))}
    >>> obs, state, rewards, dones, infos = env.step(jax.random.key(2), state, actions)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gigastep import env as _env
from gigastep._util.checks import check_team
from gigastep.adapters._names import agent_names
from gigastep.env import team_outcome
from gigastep.game.batching import select_games
from gigastep.game.dynamics import N_DISCRETE_ACTIONS
from gigastep.game.observations.global_state import state_vector, state_vector_size
from gigastep.game.types import EnvState, Observation
from gigastep.opponents import Policy
from gigastep.spaces import float_bounds
from gigastep.versus import EnvLike, VersusEnv, observe_state, resolve_env

try:
    from jaxmarl.environments import spaces as _spaces
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv
except ImportError as error:
    raise ImportError(
        f"gigastep.jaxmarl needs JaxMARL, which could not be imported ({error}); install the "
        "extra: pip install 'gigastep[jaxmarl]' (docs/install.md)"
    ) from error

__all__ = ["GigastepJaxMARLEnv", "agent_names", "make"]


def _one_array(obs: Observation) -> jax.Array:
    """The observation as one array: the tuple form ("rgb_vector") is refused at make time."""
    if isinstance(obs, tuple):
        raise TypeError("rgb_vector observations (a tuple per agent) are not supported")
    return obs


def _rows(index: np.ndarray, n: int) -> Callable[[jax.Array], jax.Array]:
    """A function selecting the rows `index` of a per-agent array (leading axis n)."""
    if len(index) == n:
        return lambda x: x
    lo, hi = int(index[0]), int(index[-1]) + 1
    if hi - lo == len(index):
        return lambda x: x[lo:hi]
    idx = jnp.asarray(index)
    return lambda x: x[idx]


class GigastepJaxMARLEnv(MultiAgentEnv):
    """A Gigastep game under JaxMARL's `MultiAgentEnv` interface (see the module docstring).

    Args:
        env: a scenario name, a `GigastepEnv` or an `EnvConfig`.
        opponent: None (the caller controls both teams) or a scripted policy (a name of
            `gigastep.opponents.POLICIES` or a callable) that plays team `1 - team`.
        team: the team whose view `obs["world_state"]` takes, and with `opponent` the team
            the caller controls.
        final_obs: add `infos["final_obs"]`, the last observation of an ending episode.
        world_state: add `obs["world_state"]`, the global state vector for a centralised
            critic.
        **overrides: `EnvConfig` fields to change.

    Raises:
        ValueError: an "rgb_vector" scenario, a team other than 0 or 1, or an opponent for a
            team with no agents.
    """

    def __init__(
        self,
        env: EnvLike,
        *,
        opponent: str | Policy | None = None,
        team: int = 0,
        final_obs: bool = False,
        world_state: bool = True,
        **overrides: Any,
    ) -> None:
        game = resolve_env(env, **overrides)
        check_team(team)
        config = game.config
        if config.obs_type == "rgb_vector":
            raise ValueError(
                "the JaxMARL adapter needs one observation array per agent, since JaxMARL's "
                "baselines stack the agents' observations (batchify); this scenario has "
                "obs_type='rgb_vector' (a tuple (rgb, vector) per agent): pass "
                "obs_type='vector' or obs_type='rgb'"
            )
        self.game = game
        self.config = config
        self.team = int(team)
        self.versus = None if opponent is None else VersusEnv(game, opponent, 1 - self.team)
        n = config.n_agents
        self.agent_indices = (
            np.arange(n) if self.versus is None else np.asarray(self.versus.team_indices)
        )
        every = agent_names(config)
        super().__init__(num_agents=len(self.agent_indices))
        self.agents = [every[i] for i in self.agent_indices]
        self.agent_teams = np.asarray(config.teams, np.int32)[self.agent_indices]
        self.final_obs = bool(final_obs)
        self.world_state = bool(world_state)
        self.num_allies = self.num_agents  # SMAX's name, read by SMAXWorldStateWrapper
        self.state_size = state_vector_size(config)
        self._take = _rows(self.agent_indices, n)
        obs_space = self._observation_space()
        act_space = self._action_space()
        self.observation_spaces = {a: obs_space for a in self.agents}
        self.action_spaces = {a: act_space for a in self.agents}

    def __repr__(self) -> str:
        if self.versus is None:
            who = "both teams"
        else:
            policy = getattr(self.versus.policy, "__name__", repr(self.versus.policy))
            who = f"team {self.team} vs scripted {policy}"
        return f"GigastepJaxMARLEnv({self.game!r}, {who})"

    # --- spaces -------------------------------------------------------------------------
    def _observation_space(self) -> Any:
        c = self.config
        if c.obs_type == "rgb":
            return _spaces.Box(0, 255, (c.resolution_x, c.resolution_y, 3), jnp.uint8)
        low, high = float_bounds(c)  # vector or entity
        return _spaces.Box(jnp.asarray(low), jnp.asarray(high), (len(low),), jnp.float32)

    def _action_space(self) -> Any:
        if self.config.discrete_actions:
            return _spaces.Discrete(N_DISCRETE_ACTIONS)
        return _spaces.Box(-1.0, 1.0, (3,), jnp.float32)

    @property
    def agent_classes(self) -> dict[str, list[str]]:
        """The controlled agents by team: {"team0": [...], "team1": [...]} (teams with none
        left out)."""
        classes: dict[str, list[str]] = {}
        for name, t in zip(self.agents, self.agent_teams, strict=True):
            classes.setdefault(f"team{int(t)}", []).append(name)
        return classes

    # --- the JaxMARL interface ----------------------------------------------------------
    @partial(jax.jit, static_argnums=0)
    def reset(self, key: jax.Array) -> tuple[dict[str, jax.Array], EnvState]:
        obs, state = _env.reset(self.config, key)
        return self._observations(self._take(_one_array(obs)), state), state

    @partial(jax.jit, static_argnums=0)
    def step(
        self,
        key: jax.Array,
        state: EnvState,
        actions: Mapping[str, jax.Array],
        reset_state: EnvState | None = None,
    ) -> tuple[
        dict[str, jax.Array], EnvState, dict[str, jax.Array], dict[str, jax.Array], dict[str, Any]
    ]:
        """One step with auto-reset: where the episode ends, `obs` and the returned state are
        the fresh game's (from `reset_state` when given), rewards and dones the ending step's."""
        joint = self._joint_actions(actions)
        if reset_state is None:
            if self.versus is None:
                out = _env.step_autoreset(self.config, state, joint, key, self.final_obs)
            else:
                out = self.versus.step_autoreset(state, joint, key, self.final_obs)
            obs, nxt, rewards, dead, done, info = out
            outcome = (info.terminated, info.truncated, info.winner)
            return self._assemble(obs, nxt, rewards, dead, done, outcome, info.final_obs)
        k_step, k_obs = jax.random.split(key)
        obs_st, state_st, rewards, dead, done = self._step(k_step, state, joint)
        obs_re = self._take(_one_array(observe_state(self.config, reset_state, k_obs)))
        obs = jnp.where(done, obs_re, _one_array(obs_st))
        nxt = select_games(done, reset_state, state_st)
        outcome = self._outcome(state_st, done)
        return self._assemble(obs, nxt, rewards, dead, done, outcome, obs_st)

    def step_env(
        self, key: jax.Array, state: EnvState, actions: Mapping[str, jax.Array]
    ) -> tuple[
        dict[str, jax.Array], EnvState, dict[str, jax.Array], dict[str, jax.Array], dict[str, Any]
    ]:
        """One step without reset (a finished game stays finished): the same outputs as
        `step`, with `infos["final_obs"]` (if asked for) equal to `obs`."""
        obs, nxt, rewards, dead, done = self._step(key, state, self._joint_actions(actions))
        return self._assemble(obs, nxt, rewards, dead, done, self._outcome(nxt, done), obs)

    def get_obs(self, state: EnvState) -> dict[str, jax.Array]:
        """The observations of `state` as at a reset (`gigastep.versus.observe_state`:
        nothing detected yet, communication noise from a fixed key)."""
        obs = observe_state(self.config, state, jax.random.PRNGKey(0))
        return self._observations(self._take(_one_array(obs)), state)

    def get_avail_actions(self, state: EnvState) -> dict[str, jax.Array]:
        """All-True bool (27,) masks: every action is available (dead agents' are ignored)."""
        if not self.config.discrete_actions:
            raise ValueError(
                "get_avail_actions is defined for discrete actions; this scenario has "
                "continuous actions (Box(-1, 1, (3,))), where every action is allowed"
            )
        mask = jnp.ones((N_DISCRETE_ACTIONS,), bool)
        return {a: mask for a in self.agents}

    # --- helpers ------------------------------------------------------------------------
    def _joint_actions(self, actions: Mapping[str, jax.Array]) -> jax.Array:
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise KeyError(
                f"actions must have one entry per agent of env.agents; missing {missing} "
                f"(got keys {sorted(actions)})"
            )
        discrete = self.config.discrete_actions
        shape: tuple[int, ...] = () if discrete else (3,)
        dtype = jnp.int32 if discrete else jnp.float32
        rows = []
        for a in self.agents:
            act = jnp.asarray(actions[a])
            if act.size != (1 if discrete else 3):  # JaxMARL's baselines pass () or (1,)
                raise ValueError(
                    f"actions[{a!r}] must hold one agent's action, shape {shape} (or with "
                    f"axes of length 1, e.g. (1,)); got shape {act.shape}"
                )
            rows.append(act.reshape(shape).astype(dtype))
        return jnp.stack(rows)

    def _step(self, key: jax.Array, state: EnvState, joint: jax.Array) -> _env.StepResult:
        if self.versus is None:
            return _env.step(self.config, state, joint, key)
        return self.versus.step(state, joint, key)

    def _outcome(self, state: EnvState, done: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        alive = state.agents.alive
        terminated, truncated = team_outcome(self.config, alive, done)
        return terminated, truncated, _env.episode_winner(self.config, alive, done)

    def _observations(self, obs: Observation, state: EnvState) -> dict[str, jax.Array]:
        obs = _one_array(obs)
        out = {a: obs[i] for i, a in enumerate(self.agents)}
        if self.world_state:
            out["world_state"] = state_vector(self.config, state, self.team)
        return out

    def _assemble(
        self,
        obs: Observation,
        state: EnvState,
        rewards: jax.Array,
        dead: jax.Array,
        done: jax.Array,
        outcome: tuple[jax.Array, jax.Array, jax.Array],
        last: Observation,
    ) -> tuple[
        dict[str, jax.Array], EnvState, dict[str, jax.Array], dict[str, jax.Array], dict[str, Any]
    ]:
        n = self.num_agents
        dones = dead | done
        terminated, truncated, winner = outcome
        won = (winner == jnp.asarray(self.agent_teams)).astype(jnp.float32)
        infos: dict[str, Any] = {
            "terminated": jnp.full((n,), terminated),
            "truncated": jnp.full((n,), truncated),
            "winner": jnp.full((n,), winner, jnp.int32),
            "won": won,
        }
        if state.episode.present is not None:
            infos["present"] = self._take(state.episode.present)
        if self.final_obs:
            final = _one_array(last)
            infos["final_obs"] = {a: final[i] for i, a in enumerate(self.agents)}
        done_dict = {a: dones[i] for i, a in enumerate(self.agents)}
        done_dict["__all__"] = done
        return (
            self._observations(obs, state),
            state,
            {a: rewards[i] for i, a in enumerate(self.agents)},
            done_dict,
            infos,
        )


def make(
    name_or_env: EnvLike,
    *,
    opponent: str | Policy | None = None,
    team: int = 0,
    final_obs: bool = False,
    world_state: bool = True,
    **overrides: Any,
) -> GigastepJaxMARLEnv:
    """A Gigastep game as a JaxMARL `MultiAgentEnv` (arguments: `GigastepJaxMARLEnv`).

    Example:
        >>> env = make("identical_5_vs_1_fobs_vec_void_disc", opponent="evade")
        >>> env.agents
        ['team0_agent0', 'team0_agent1', 'team0_agent2', 'team0_agent3', 'team0_agent4']
    """
    return GigastepJaxMARLEnv(
        name_or_env,
        opponent=opponent,
        team=team,
        final_obs=final_obs,
        world_state=world_state,
        **overrides,
    )
