"""TorchRL adapter: `GigastepTorchRLEnv`, a batched `torchrl.envs.EnvBase` over the JAX game.

It steps `num_envs` games through `gigastep.adapters.torch.TorchVecEnv` (one compiled call per step;
observations, rewards and dones cross from JAX to torch through DLPack without a copy) and
lays them out as TorchRL's multi-agent environments do, with one group per team, so that
trainers built for heterogeneous groups (BenchMARL-style) see each team as its own group:

    root        "done", "terminated", "truncated"         (B, 1) bool   the episode
                "state"        (B, S) float32   with `state=True`: the global state vector
    "team0"     "observation"  (B, m0, L) float32         vector obs (vector, rgb_vector),
                                                         or entity obs (entity_size)
                "pixels"       (B, m0, res_x, res_y, 3) uint8   RGB obs (rgb, rgb_vector)
                ("info", "mask")  (B, m0) bool            the agent is alive
                "action"       (B, m0, 3) float32 in [-1, 1] (continuous) or (B, m0) int64
                               in 0..26 (discrete)
                "reward"       (B, m0, 1) float32
                "done", "terminated", "truncated"   (B, m0, 1) bool: the episode's, per agent
    "team1"     the same for team 1 (m1 agents)

B = `num_envs`, `batch_size` is `[B]`. `terminated` means a team was eliminated, `truncated`
the time limit, `done` either. Agents that die stay in their group with zero observations
and rewards and `("info", "mask")` False (their actions are ignored); the groups' done entries
are the episode's, so TorchRL never asks to reset a single agent.
With a team draw (`EnvConfig.team_draw`) the groups keep every slot of the roster; the agents
absent from an episode are dead from its start, so `("info", "mask")` is False for them
throughout (TorchVecEnv's `present` tells absent from dead).

The observations of a group are its "observation" and/or "pixels" alone: the alive mask is
under the group's "info", where TorchRL's VMAS environments keep their per-agent extras and
where BenchMARL looks for them (it leaves `(group, "info")` out of its models' inputs and of
its training batches, and logs its mean). With `state=True` the root "state" is the game's
global state vector (`gigastep.game.observations.global_state`) seen from `team`, in the
place TorchRL's PettingZoo environments put theirs (`return_state=True`), for centralised
critics; in the "next" of a step that ends a game it is the ending state's, as the
observations are. `render()` draws one game's top view (an RGB image).

Resets, the TorchRL way: `TorchVecEnv` restarts finished games inside the step that ends them.
This adapter returns the *final* observation of a finished game in that step's "next" (as
TorchRL expects), keeps the fresh game's first observation, and hands it out when TorchRL
resets those games with a partial `"_reset"` mask (`rollout` and collectors do that after
every done step): no second reset is computed. Resetting a game that has not ended resets it
for real; a reset without a mask restarts every game.

Example:
    >>> from gigastep.adapters.torchrl import GigastepTorchRLEnv
    >>> env = GigastepTorchRLEnv("identical_5_vs_5_fobs_vec_void_disc", num_envs=8)
    >>> rollout = env.rollout(10)                  # random actions
    >>> rollout["next", "team0", "reward"].shape
    torch.Size([8, 10, 5, 1])
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from gigastep import env as _env
from gigastep._util.checks import check_team
from gigastep.adapters.torch import TorchObservation, TorchVecEnv, jax_to_torch
from gigastep.game.batching import select_games
from gigastep.game.dynamics import N_DISCRETE_ACTIONS
from gigastep.game.observations import global_view
from gigastep.game.observations.global_state import state_vector_size
from gigastep.game.types import EnvConfig, EnvState
from gigastep.opponents import Policy
from gigastep.spaces import float_bounds
from gigastep.versus import EnvLike, VersusEnv, resolve_env

__all__ = ["GigastepTorchRLEnv"]

_DONE_KEYS = ("done", "terminated", "truncated")


def _team_slices(teams: np.ndarray) -> dict[str, slice | torch.Tensor]:
    """{group: its agents' indices}: a slice (a view, no copy) where the team is contiguous."""
    out = {}
    for team in (0, 1):
        idx = np.flatnonzero(teams == team)
        if idx.size == 0:
            continue
        contiguous = idx[-1] - idx[0] + 1 == idx.size
        out[f"team{team}"] = slice(idx[0], idx[-1] + 1) if contiguous else torch.as_tensor(idx)
    return out


@partial(jax.jit, static_argnums=0)
def _fresh_states(config: EnvConfig, keys: jax.Array) -> EnvState:
    """Fresh game states, one per key (the states of `jax.vmap(reset)`)."""
    return jax.vmap(partial(_env.reset, config))(keys)[1]


_global_view = jax.jit(global_view, static_argnums=0)


def _where(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """`new` for the games of `mask` (B,), else `old`."""
    return torch.where(mask.reshape(-1, *(1,) * (new.ndim - 1)), new, old)


class GigastepTorchRLEnv(EnvBase):
    """`num_envs` Gigastep games as one batched TorchRL environment (see the module doc).

    Args:
        name_or_env: a scenario name, `GigastepEnv`, `EnvConfig` or `VersusEnv`.
        num_envs: games stepped together (the batch size B).
        device: "cpu" or "cuda[:k]" (JAX must see that GPU).
        seed: seed of the first reset; `set_seed` changes it for the next full reset.
        opponent: optional scripted policy for the team you do not control (a name of
            `gigastep.opponents` or a callable); then only group `f"team{team}"` exists.
        team: the controlled team when `opponent` is given, and the team the "state" vector is
            seen from (its agents first).
        state: add the root "state" entry, the global state vector (S,) of each game.
        **overrides: EnvConfig fields changed (e.g. `max_episode_length=100`).
    """

    def __init__(
        self,
        name_or_env: EnvLike | VersusEnv,
        num_envs: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        opponent: str | Policy | None = None,
        team: int = 0,
        state: bool = False,
        **overrides: Any,
    ) -> None:
        check_team(team)
        if overrides:
            if isinstance(name_or_env, VersusEnv):
                raise TypeError("EnvConfig overrides need a scenario name, GigastepEnv or config")
            name_or_env = resolve_env(name_or_env, **overrides)
        venv = TorchVecEnv(
            name_or_env,
            num_envs,
            seed=seed,
            device=device,
            final_obs=True,
            opponent=opponent,
            team=team,
            state_vectors=state,
        )
        super().__init__(device=venv.device, batch_size=torch.Size([num_envs]))
        self._venv = venv
        self.config = venv.config
        self.num_envs = num_envs
        self._seed = int(seed)
        self.team = int(team)
        self.state = bool(state)
        if isinstance(venv.game, VersusEnv):
            controlled = np.full(venv.n_agents, venv.game.team)
        else:
            controlled = np.asarray(self.config.teams)
        self._groups = _team_slices(controlled)
        self.group_map = {
            group: [f"{group}_agent{i}" for i in range(int(np.sum(controlled == int(group[-1]))))]
            for group in self._groups
        }
        # (observations, alive, state vectors or None) of the games as they are now (after
        # auto-reset)
        self._fresh_obs: Any = None
        self._pending = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self._reset_key = jax.random.PRNGKey(seed + 1)  # for resets of games that go on
        self._make_specs()

    # --- specs --------------------------------------------------------------------------
    def _make_specs(self) -> None:
        c, b, dev = self.config, self.num_envs, self.device
        obs, act, rew, done = {}, {}, {}, {}
        for group, agents in self.group_map.items():
            m = len(agents)
            shape = (b, m)
            mask = Categorical(2, shape, dtype=torch.bool, device=dev)
            entries: dict[str, Any] = {
                "info": Composite(mask=mask, shape=shape, device=dev),
            }
            if c.obs_type in ("vector", "rgb_vector", "entity"):
                low, high = float_bounds(c)
                size = len(low)
                if np.all(np.isfinite(low)) and np.all(np.isfinite(high)):
                    entries["observation"] = Bounded(
                        torch.as_tensor(low).expand(b, m, -1),
                        torch.as_tensor(high).expand(b, m, -1),
                        (b, m, size),
                        dtype=torch.float32,
                        device=dev,
                    )
                else:  # a game whose speed has no bound (drag = 0)
                    entries["observation"] = Unbounded(
                        (b, m, size), dtype=torch.float32, device=dev
                    )
            if c.obs_type in ("rgb", "rgb_vector"):
                entries["pixels"] = Bounded(
                    0, 255, (b, m, c.resolution_x, c.resolution_y, 3), dtype=torch.uint8, device=dev
                )
            obs[group] = Composite(entries, shape=shape, device=dev)
            if c.discrete_actions:
                action = Categorical(N_DISCRETE_ACTIONS, shape, dtype=torch.int64, device=dev)
            else:
                action = Bounded(-1.0, 1.0, (b, m, 3), dtype=torch.float32, device=dev)
            act[group] = Composite(action=action, shape=shape, device=dev)
            rew[group] = Composite(
                reward=Unbounded((b, m, 1), dtype=torch.float32, device=dev),
                shape=shape,
                device=dev,
            )
            done[group] = Composite(
                {k: Categorical(2, (b, m, 1), dtype=torch.bool, device=dev) for k in _DONE_KEYS},
                shape=shape,
                device=dev,
            )
        root = {k: Categorical(2, (b, 1), dtype=torch.bool, device=dev) for k in _DONE_KEYS}
        if self.state:
            size = state_vector_size(c)
            obs["state"] = Unbounded((b, size), dtype=torch.float32, device=dev)
        self.observation_spec = Composite(obs, shape=(b,), device=dev)
        self.action_spec = Composite(act, shape=(b,), device=dev)
        self.reward_spec = Composite(rew, shape=(b,), device=dev)
        self.done_spec = Composite({**root, **done}, shape=(b,), device=dev)

    # --- conversion ---------------------------------------------------------------------
    def _observations(
        self, obs: TorchObservation, alive: torch.Tensor
    ) -> dict[str, dict[str, torch.Tensor]]:
        c = self.config
        if c.obs_type == "rgb_vector":
            rgb, vec = obs
        else:
            rgb, vec = (obs, None) if c.obs_type == "rgb" else (None, obs)
        out = {}
        for group, idx in self._groups.items():
            entries: dict[str, Any] = {"info": {"mask": alive[:, idx]}}
            if vec is not None:
                entries["observation"] = vec[:, idx]
            if rgb is not None:
                entries["pixels"] = rgb[:, idx]
            out[group] = entries
        return out

    def _done_entries(
        self, terminated: torch.Tensor, truncated: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        terminated, truncated = terminated.reshape(-1, 1), truncated.reshape(-1, 1)
        return {"done": terminated | truncated, "terminated": terminated, "truncated": truncated}

    def _output(
        self,
        obs: TorchObservation,
        alive: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        rewards: torch.Tensor | None = None,
        state: torch.Tensor | None = None,
    ) -> TensorDict:
        root = self._done_entries(terminated, truncated)
        data: dict[str, Any] = {**root}
        if self.state:
            data["state"] = state
        for group, entries in self._observations(obs, alive).items():
            m = len(self.group_map[group])
            for key, value in root.items():
                entries[key] = value.unsqueeze(1).expand(-1, m, 1)
            if rewards is not None:
                entries["reward"] = rewards[:, self._groups[group]].unsqueeze(-1)
            data[group] = TensorDict(entries, batch_size=(self.num_envs, m), device=self.device)
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    def _joint_actions(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The (B, n[, 3]) actions of every controlled agent, in the game's agent order."""
        parts = {group: tensordict.get((group, "action")) for group in self._groups}
        if all(isinstance(i, slice) for i in self._groups.values()):
            order = sorted(self._groups, key=lambda g: self._groups[g].start)  # type: ignore[union-attr]
            return torch.cat([parts[g] for g in order], dim=1)
        first = next(iter(parts.values()))
        joint = first.new_empty((self.num_envs, self._venv.n_agents, *first.shape[2:]))
        for group, idx in self._groups.items():
            joint[:, idx] = parts[group]
        return joint

    # --- EnvBase ------------------------------------------------------------------------
    def _step(self, tensordict: TensorDictBase) -> TensorDict:
        obs, rewards, dones, ep_dones, info = self._venv.step(self._joint_actions(tensordict))
        # games that ended were restarted inside the step: all their agents are alive (with
        # a team draw, all their present agents: the states say which)
        fresh_state = info["state_vector"][:, self.team] if self.state else None
        if self.config.team_draw is None:
            fresh_alive = ~dones | ep_dones.unsqueeze(1)
        else:
            fresh_alive = self._alive_now()
        self._fresh_obs = (obs, fresh_alive, fresh_state)
        self._pending = ep_dones
        final_alive = ~dones  # the finished step's agents, whose final observation this is
        final_state = info["final_state_vector"][:, self.team] if self.state else None
        return self._output(
            info["final_obs"],
            final_alive,
            info["terminated"],
            info["truncated"],
            rewards,
            final_state,
        )

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDict:
        mask = self._reset_mask(tensordict)
        if mask is None or self._fresh_obs is None:
            obs = self._venv.reset(seed=self._seed)
            self._seed += 1  # the next full reset draws new games
            alive = torch.ones(
                self.num_envs, self._venv.n_agents, dtype=torch.bool, device=self.device
            )
            if self.config.team_draw is not None:
                alive = self._alive_now()
            self._fresh_obs = (obs, alive, self._state_vectors())
        else:
            running = mask & ~self._pending
            if bool(running.any()):
                self._reset_running(running)
        self._pending = torch.zeros_like(self._pending)
        obs, alive, state = self._fresh_obs
        zeros = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return self._output(obs, alive, zeros, zeros, state=state)

    def _alive_now(self) -> torch.Tensor:
        """(B, m) bool: the controlled agents alive in the games as they are now."""
        alive = self._venv.states.agents.alive
        if isinstance(self._venv.game, VersusEnv):
            alive = jax.vmap(self._venv.game.team_view)(alive)
        return jax_to_torch(alive)

    def _state_vectors(self) -> torch.Tensor | None:
        """(B, S) float32: the current games' state vectors seen from `team` (with `state`)."""
        return self._venv.state_vector()[:, self.team] if self.state else None

    def _reset_mask(self, tensordict: TensorDictBase | None) -> torch.Tensor | None:
        """(B,) bool: the games a partial reset asks for (any of its "_reset" entries), or
        None for a full reset."""
        if tensordict is None:
            return None
        masks = []
        for key in ("_reset", *((g, "_reset") for g in self._groups)):
            value = tensordict.get(key, None)
            if value is not None:
                masks.append(value.reshape(self.num_envs, -1).any(-1))
        if not masks:
            return None
        return torch.stack(masks).any(0)

    def _reset_running(self, mask: torch.Tensor) -> None:
        """Really reset the games of `mask` that have not ended (their states are replaced)."""
        self._reset_key, sub = jax.random.split(self._reset_key)
        fresh = _fresh_states(self.config, jax.random.split(sub, self.num_envs))
        states = select_games(jax.numpy.asarray(mask.cpu().numpy()), fresh, self._venv.states)
        fresh_obs = self._venv.reset_to(states)  # observes every game as at a reset
        fresh_alive = jax_to_torch(states.agents.alive)
        if isinstance(self._venv.game, VersusEnv):
            fresh_alive = jax_to_torch(jax.vmap(self._venv.game.team_view)(states.agents.alive))
        # the games that go on keep their current observations (and states: the vectors of
        # the states now held are theirs and the fresh games')
        obs, alive, _ = self._fresh_obs
        self._fresh_obs = (
            jax.tree_util.tree_map(lambda new, old: _where(mask, new, old), fresh_obs, obs),
            _where(mask, fresh_alive, alive),
            self._state_vectors(),
        )

    def _set_seed(self, seed: int | None) -> None:
        self._seed = 0 if seed is None else int(seed)
        self._reset_key = jax.random.PRNGKey(self._seed + 1)
        self._fresh_obs = None  # the next reset restarts every game from this seed

    def render(self, mode: str = "rgb_array", env_index: int = 0) -> np.ndarray:
        """The top view of game `env_index` as it is now: a (res_y, res_x, 3) uint8 image
        (rows = world y; the picture of `GigastepEnv.global_view`, as the Gymnasium and
        PettingZoo adapters render it). After a step that ended the game, it is the fresh
        game's first picture. `mode` must be "rgb_array" (the one mode; the argument is there
        for callers that pass it, as BenchMARL's evaluation videos do)."""
        if mode != "rgb_array":
            raise ValueError(f"render supports mode='rgb_array' only, got mode={mode!r}")
        if isinstance(env_index, bool) or not 0 <= int(env_index) < self.num_envs:
            raise ValueError(
                f"env_index must be a game of this batch, 0..{self.num_envs - 1}; got {env_index!r}"
            )
        if self._fresh_obs is None:
            raise RuntimeError("call reset() before render()")
        one = jax.tree_util.tree_map(lambda x: x[int(env_index)], self._venv.states)
        view = np.asarray(_global_view(self.config, one))
        return np.ascontiguousarray(np.swapaxes(view, 0, 1))

    def close(self, *, raise_if_closed: bool = True) -> None:
        self._venv.close()
        super().close(raise_if_closed=raise_if_closed)
