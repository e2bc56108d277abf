"""`TorchVecEnv`, a batched Gigastep for PyTorch, over the zero-copy bridge
(`gigastep.adapters.dlpack`: `jax_to_torch` / `torch_to_jax`, re-exported here).

`TorchVecEnv` runs `num_envs` games in one compiled call per step; finished games restart inside
that call and their last observation is kept in `info["final_obs"]`. Actions go in and
observations come out as torch tensors on the same device, without a host round trip.

Importing this module sets JAX's GPU memory to grow on demand beside PyTorch (see
`gigastep.adapters.dlpack`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, NamedTuple, TypeAlias

import jax
import jax.dlpack
import jax.numpy as jnp
import numpy as np
import torch

from gigastep import env as _env
from gigastep._util.checks import check_positive_int, check_seed, check_team
from gigastep.adapters.dlpack import (
    JAX_MEMORY_SETTING,
    _leaf_to_jax,
    jax2torch,
    jax_to_torch,
    torch2jax,
    torch_to_jax,
)
from gigastep.env import AutoresetResult
from gigastep.game.observations.global_state import state_vector
from gigastep.game.types import EnvConfig, EnvState, Observation, check_finite_state
from gigastep.opponents import Policy, get_policy
from gigastep.spaces import Box, Discrete, Tuple
from gigastep.versus import EnvLike, VersusEnv, observe_state, resolve_env

__all__ = [
    "JAX_MEMORY_SETTING",
    "ScriptedTeam",
    "StepOutputs",
    "TorchVecEnv",
    "jax2torch",
    "jax_to_torch",
    "observe_state",
    "torch2jax",
    "torch_to_jax",
]

TorchObservation: TypeAlias = "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"
"""Observations as torch tensors: one tensor, or the pair (rgb, vector) for "rgb_vector"."""

# ------------------------------------------------------------------------------------------
# Compiled batched functions (static: the game, an EnvConfig or a VersusEnv)
# ------------------------------------------------------------------------------------------

Game = EnvConfig | VersusEnv


def _reset_fn(game: Game) -> Callable[[jax.Array], tuple[Observation, EnvState]]:
    return game.reset if isinstance(game, VersusEnv) else partial(_env.reset, game)


def _score_config(config: EnvConfig, score: EnvLike) -> EnvConfig:
    """`score` (a scenario name, `GigastepEnv` or `EnvConfig`) as a config after checking that
    it differs from `config` only in its reward weights."""
    from gigastep.game.rewards import check_score

    if not isinstance(score, EnvConfig):
        score = resolve_env(score).config
    check_score(config, score)
    return score


def _autoreset_fn(game: Game) -> Callable[..., AutoresetResult]:
    if isinstance(game, VersusEnv):
        return game.step_autoreset
    return partial(_env.step_autoreset, game)


def _game_config(game: Game) -> EnvConfig:
    return game.config if isinstance(game, VersusEnv) else game


def _game_keys(key: jax.Array, num_envs: int, window: tuple[int, int] | None) -> jax.Array:
    """The per-game keys of a batch: `split(key, num_envs)`, or, for games [start, start +
    num_envs) of a batch of `total` (`window`), those games' keys of the whole batch."""
    if window is None:
        return jax.random.split(key, num_envs)
    start, total = window
    return jax.random.split(key, total)[start : start + num_envs]


@partial(jax.jit, static_argnums=(0, 1, 3))
def _reset(
    game: Game, num_envs: int, key: jax.Array, window: tuple[int, int] | None = None
) -> tuple[jax.Array, Observation, EnvState]:
    key, sub = jax.random.split(key)
    obs, states = jax.vmap(_reset_fn(game))(_game_keys(sub, num_envs, window))
    return key, obs, states


@partial(jax.jit, static_argnums=0)
def _observe(game: Game, states: EnvState, key: jax.Array) -> tuple[jax.Array, Observation]:
    key, sub = jax.random.split(key)
    keys = jax.random.split(sub, jax.tree_util.tree_leaves(states)[0].shape[0])
    obs = jax.vmap(partial(observe_state, _game_config(game)))(states, keys)
    if isinstance(game, VersusEnv):
        obs = jax.vmap(game.team_view)(obs)
    return key, obs


def _batched_autoreset_fn(game: Game) -> Callable[..., AutoresetResult]:
    if isinstance(game, VersusEnv):
        return game.batched_step_autoreset
    return partial(_env.batched_step_autoreset, game)


@lru_cache(maxsize=64)
def _state_treedef(game: Game) -> jax.tree_util.PyTreeDef:
    """The pytree structure of one batch of `game`'s states."""
    shapes = jax.eval_shape(_reset_fn(game), jax.random.PRNGKey(0))
    return jax.tree_util.tree_structure(shapes[1])


@dataclass(frozen=True)
class ScriptedTeam:
    """Games `[start, stop)` of a `TorchVecEnv` batch in which team `team` is played by a
    scripted policy inside the compiled step (the caller's actions for those rows are
    ignored). `policy` is a name of `gigastep.opponents.POLICIES` or a pure
    `policy(config, state, key) -> actions of all agents`; it acts on the state before the
    step, i.e. on the same information as the observations the caller acted on."""

    start: int
    stop: int
    team: int
    policy: Any = "random"

    def __post_init__(self) -> None:
        for name in ("start", "stop", "team"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"ScriptedTeam.{name} must be an int, got {value!r}")
        if not 0 <= self.start < self.stop:
            raise ValueError(
                f"ScriptedTeam needs 0 <= start < stop, got [{self.start}, {self.stop})"
            )
        check_team(self.team, "ScriptedTeam.team")
        object.__setattr__(self, "policy", get_policy(self.policy))


def _apply_scripted(
    config: EnvConfig,
    scripted: tuple[ScriptedTeam, ...],
    states: EnvState,
    actions: jax.Array,
    key: jax.Array,
    window: tuple[int, int] | None = None,
) -> jax.Array:
    """`actions` (B, n, ...) with the rows of every scripted team replaced by its policy's
    actions on its slice of games. Game b's team t draws the key of b in
    `_game_keys(fold_in(key, t), ...)`: it does not depend on how the batch is sliced."""
    teams = np.asarray(config.teams)
    b = actions.shape[0]
    team_keys = [_game_keys(jax.random.fold_in(key, t), b, window) for t in (0, 1)]
    for entry in scripted:
        games = jax.tree_util.tree_map(lambda x, e=entry: x[e.start : e.stop], states)
        keys = team_keys[entry.team][entry.start : entry.stop]
        acts = jax.vmap(partial(entry.policy, config))(games, keys).astype(actions.dtype)
        rows = np.flatnonzero(teams == entry.team)
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        if hi - lo == len(rows):
            actions = actions.at[entry.start : entry.stop, lo:hi].set(acts[:, lo:hi])
        else:
            actions = actions.at[entry.start : entry.stop, rows].set(acts[:, rows])
    return actions


class StepOutputs(NamedTuple):
    """What the compiled batched step of a `TorchVecEnv` returns besides the key and states:
    arrays with leading axis B (JAX arrays in the compiled call, torch tensors once
    converted by `jax_to_torch`). A NamedTuple, so it is a pytree that jit returns as is.

    `final_obs` is None unless the env was built with `final_obs=True`; `state_vector` and
    `final_state_vector` are None unless with `state_vectors=True`; `score` is None unless
    the env was built with a `score` config.
    """

    obs: Any  # the next observation (a fresh game's where the episode ended)
    rewards: Any  # (B, n) float32
    dones: Any  # (B, n) bool, True for dead agents
    ep_dones: Any  # (B,) bool, the episode ended at this step
    terminated: Any  # (B,) bool
    truncated: Any  # (B,) bool
    episode_return: Any  # (B, n) float32, the return of the episode so far (before reset)
    episode_length: Any  # (B,) int32
    winner: Any  # (B,) int32, 0 or 1 at the end of a won episode, else -1
    final_obs: Any = None  # the last observation of the finished games (obs elsewhere)
    state_vector: Any = None  # (B, 2, S) float32, of the next states, from team 0 and 1
    final_state_vector: Any = None  # (B, 2, S) float32, of the states the step ended in
    score: Any = None  # (B, n) float32, the step's rewards under the `score` config's weights


@lru_cache(maxsize=64)
def _compiled_step(
    game: Game,
    final_obs: bool,
    reset_finished_only: bool,
    scripted: tuple[ScriptedTeam, ...] = (),
    state_vectors: bool = False,
    window: tuple[int, int] | None = None,
    score: EnvConfig | None = None,
) -> Callable[
    [list[jax.Array], jax.Array, jax.Array], tuple[jax.Array, list[jax.Array], StepOutputs]
]:
    """The compiled auto-resetting batched step of `game`: (state leaves, key, actions) ->
    (key, state leaves, `StepOutputs`); state leaves and key are donated.
    Built once per game (no static-argument hashing on the hot path). States travel as a flat
    list of arrays, so the hot path rebuilds no nested state dataclasses in Python.

    `reset_finished_only` resets only the games that ended (`env.batched_step_autoreset`),
    which on the CPU saves the resets of the games still running. Off the CPU that form
    computes every game's reset anyway (its choice is a select there, to keep the host out of
    the step: `gigastep.game.batching.where_masked`), so the vmapped step is used, with the
    same values.
    `window` = (start, total): the batch is games [start, start + B) of a batch of `total`
    games and draws their keys (see `_game_keys`).
    `scripted` teams are played inside the call (`ScriptedTeam`); with `state_vectors` the
    global state vectors (B, 2, S) of the next and of the finished states are returned too
    (`gigastep.game.observations.global_state`, seen from team 0 and from team 1); with a
    `score` config its weights' rewards too (`gigastep.env.step_autoreset`).
    """
    config = _game_config(game)
    if reset_finished_only:
        step = partial(_batched_autoreset_fn(game), final_obs=final_obs)
    else:
        step = jax.vmap(partial(_autoreset_fn(game), final_obs=final_obs))
    if state_vectors:
        step = partial(step, final_state=True)
    if score is not None:
        step = partial(step, score=score)

    treedef = _state_treedef(game)

    def run(
        leaves: list[jax.Array], key: jax.Array, actions: jax.Array
    ) -> tuple[jax.Array, list[jax.Array], StepOutputs]:
        key, sub = jax.random.split(key)
        states = jax.tree_util.tree_unflatten(treedef, leaves)
        if scripted:  # its own stream: the env's keys stay those of an unscripted batch
            actions = _apply_scripted(
                config, scripted, states, actions, jax.random.fold_in(sub, 1), window
            )
        obs, states, rewards, dones, ep_dones, info = step(
            states, actions, _game_keys(sub, actions.shape[0], window)
        )
        outputs = StepOutputs(
            obs=obs,
            rewards=rewards,
            dones=dones,
            ep_dones=ep_dones,
            terminated=info.terminated,
            truncated=info.truncated,
            episode_return=info.episode_return,
            episode_length=info.episode_length,
            winner=info.winner,
            final_obs=info.final_obs if final_obs else None,
            score=info.score,
        )
        if state_vectors:
            assert info.final_state is not None  # the step was asked for it (final_state=True)
            outputs = outputs._replace(
                state_vector=_both_state_vectors(config, states),
                final_state_vector=_both_state_vectors(config, info.final_state),
            )
        return key, jax.tree_util.tree_leaves(states), outputs

    return jax.jit(run, donate_argnums=(0, 1))


def _both_state_vectors(config: EnvConfig, states: EnvState) -> jax.Array:
    """(B, 2, S) float32: every game's state vector seen from team 0 and from team 1."""
    return jnp.stack(
        [jax.vmap(partial(state_vector, config, team=t))(states) for t in (0, 1)], axis=1
    )


@partial(jax.jit, static_argnums=0)
def _v_both_state_vectors(config: EnvConfig, states: EnvState) -> jax.Array:
    return _both_state_vectors(config, states)


# ------------------------------------------------------------------------------------------
# TorchVecEnv
# ------------------------------------------------------------------------------------------


def _jax_device(device: torch.device | str | None) -> jax.Device:
    if device is None:
        return jax.devices()[0]
    device = torch.device(device)
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type == "cuda":
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            raise ValueError(
                f"device {device} requested but JAX has no GPU backend (install jax[cuda12])"
            ) from None
        gpus = [d for d in gpus if d.process_index == jax.process_index()]
        index = device.index or 0
        if index >= len(gpus):
            raise ValueError(f"device {device}: JAX sees only {len(gpus)} GPU(s)")
        return gpus[index]
    raise ValueError(f"device must be 'cpu' or 'cuda[:k]', got {device}")


def _torch_device(jax_device: jax.Device) -> torch.device:
    if jax_device.platform == "cpu":
        return torch.device("cpu")
    if jax_device.platform == "gpu":
        # The ordinal among this process's GPUs, as torch numbers them (CUDA_VISIBLE_DEVICES).
        return torch.device("cuda", jax.local_devices(backend="gpu").index(jax_device))
    raise ValueError(f"no torch device matches JAX device {jax_device}")


class TorchVecEnv:
    """`num_envs` Gigastep games stepped together, with torch tensors in and out.

    Without `opponent` the caller controls every agent; with `opponent` (a scripted policy
    name or callable, see `gigastep.opponents`) it controls team `team` and the other team is
    played inside the same compiled step (observations, rewards and dones are then the
    team's rows).

    Shapes (B = num_envs, m = controlled agents):
        obs: (B, m, L) float32, (B, m, res_x, res_y, 3) uint8, or a tuple of both.
        actions: (B, m, 3) float (continuous) or (B, m) int (discrete), on `self.device`.
        rewards (B, m) float32; dones (B, m) bool (dead agents); ep_dones (B,) bool.
        info: `terminated` (B,) bool, `truncated` (B,) bool, `final_obs` (the last observation
            of games that ended this step, else this step's obs), `episode_return` (B, m)
            float32 and `episode_length` (B,) int32 (of the finished episode where ep_dones,
            else running values), `winner` (B,) int32 (the team left alone at the end of a
            finished episode, else -1: see `gigastep.env.episode_winner`).
            With `state_vectors=True` also `state_vector` and `final_state_vector`, (B, 2, S)
            float32: the global state vector (`gigastep.game.observations.global_state`) of the
            next state and of the state the step ended in, seen from team 0 and team 1.
            With a `score` config also `score` (B, m) float32: the step's rewards under that
            config's reward weights (it may differ from the game's config in those alone,
            `gigastep.game.rewards.WEIGHT_FIELDS`), e.g. the unshaped reward of a game played
            with an extra shaping term.

    `scripted` (a sequence of `ScriptedTeam`) lets the compiled step play one team of chosen
    slices of the batch with scripted policies while the caller acts for every other row
    (e.g. a learner against a mix of opponents); it cannot be combined with `opponent`.
    `window=(start, total)` makes this batch games [start, start + num_envs) of a batch of
    `total` games with the same seed: every game draws the random numbers it would draw there,
    so processes that each hold a slice together play the games of one large batch.

    Every step is one compiled call: the PRNG key advances on the device, finished games are
    reset in the same call, the game states are donated (updated in place), and nothing is
    copied to the host. Returned tensors share memory with JAX's outputs and stay valid after
    later steps.

    Example:
        >>> venv = TorchVecEnv("identical_5_vs_5_fobs_vec_void_cont", num_envs=1024)
        >>> obs = venv.reset()                                  # (1024, 10, L) float32
        >>> actions = torch.rand(1024, 10, 3) * 2 - 1
        >>> obs, rewards, dones, ep_dones, info = venv.step(actions)
    """

    def __init__(
        self,
        name_or_env: EnvLike | VersusEnv,
        num_envs: int,
        seed: int = 0,
        device: torch.device | str | None = None,
        final_obs: bool = True,
        opponent: str | Policy | None = None,
        team: int = 0,
        scripted: Iterable[ScriptedTeam] = (),
        state_vectors: bool = False,
        window: tuple[int, int] | None = None,
        score: EnvLike | None = None,
    ) -> None:
        check_positive_int(num_envs, "num_envs")
        self.game = _as_game(name_or_env, opponent, team)
        self.config = _game_config(self.game)
        self.score = None if score is None else _score_config(self.config, score)
        self.num_envs = num_envs
        self.final_obs = bool(final_obs)
        self.scripted = _check_scripted(scripted, num_envs, self.game)
        self.state_vectors = bool(state_vectors)
        self.jax_device = _jax_device(device)
        self.device = _torch_device(self.jax_device)
        self._key = jax.device_put(jax.random.PRNGKey(check_seed(seed)), self.jax_device)
        # the batched states as a flat list (see _compiled_step)
        self._leaves: list[jax.Array] | None = None
        self._treedef = _state_treedef(self.game)
        self.last_obs: TorchObservation | None = None
        self._held_actions: tuple[torch.Tensor, torch.Tensor, jax.Array] | None = None
        self.window = _check_window(window, num_envs)
        self._step = _compiled_step(
            self.game,
            self.final_obs,
            self.jax_device.platform == "cpu",
            self.scripted,
            self.state_vectors,
            self.window,
            self.score,
        )

    @classmethod
    def from_states(
        cls, name_or_env: EnvLike | VersusEnv, states: EnvState, seed: int = 0, **kwargs: Any
    ) -> TorchVecEnv:
        """A TorchVecEnv whose games start from `states` (an `EnvState` batched along axis 0,
        e.g. hand-built with `EnvState.create` and stacked). Call `step` right away; the first
        observation is `venv.last_obs`."""
        n = jax.tree_util.tree_leaves(states)[0].shape[0]
        venv = cls(name_or_env, n, seed=seed, **kwargs)
        venv.reset_to(states)
        return venv

    # --- attributes ---------------------------------------------------------------------
    @property
    def n_agents(self) -> int:
        """Agents controlled per game (all agents, or the team's when playing an opponent)."""
        return self.game.n_agents if isinstance(self.game, VersusEnv) else self.config.n_agents

    @property
    def action_space(self) -> Discrete | Box:
        """Per-agent action space (`gigastep.spaces`)."""
        return _env.GigastepEnv(self.config).action_space

    @property
    def observation_space(self) -> Box | Tuple:
        """Per-agent observation space (`gigastep.spaces`)."""
        return _env.GigastepEnv(self.config).observation_space

    @property
    def states(self) -> EnvState:
        """The current batched game states (JAX). Donated by the next `step`: copy them if you
        keep them."""
        if self._leaves is None:
            raise RuntimeError("call reset() first")
        return jax.tree_util.tree_unflatten(self._treedef, self._leaves)

    def __repr__(self) -> str:
        return f"TorchVecEnv({self.game!r}, num_envs={self.num_envs}, device={self.device})"

    # --- API ----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> TorchObservation:
        """Start `num_envs` fresh games; returns their observations (torch)."""
        if seed is not None:
            self._key = jax.device_put(jax.random.PRNGKey(check_seed(seed)), self.jax_device)
        self._key, obs, states = _reset(self.game, self.num_envs, self._key, self.window)
        self._leaves = jax.tree_util.tree_leaves(states)
        self.last_obs = jax_to_torch(obs)
        return self.last_obs

    def reset_to(self, states: EnvState) -> TorchObservation:
        """Continue from the given batched states (copied); returns their observations as at a
        reset (nothing detected yet)."""
        leaves = jax.tree_util.tree_leaves(states)
        if not isinstance(states, EnvState) or leaves[0].ndim < 1:
            raise TypeError("states must be an EnvState batched along axis 0")
        if leaves[0].shape[0] != self.num_envs:
            raise ValueError(f"states hold {leaves[0].shape[0]} games, expected {self.num_envs}")
        check_finite_state(states, "TorchVecEnv.reset_to")
        states = jax.tree_util.tree_map(
            lambda x: jax.device_put(jnp.array(x, copy=True), self.jax_device), states
        )
        self._key, obs = _observe(self.game, states, self._key)
        self._leaves = jax.tree_util.tree_leaves(states)
        self.last_obs = jax_to_torch(obs)
        return self.last_obs

    def step(
        self, actions: torch.Tensor
    ) -> tuple[TorchObservation, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """One step of every game; returns (obs, rewards, dones, ep_dones, info) as tensors."""
        if self._leaves is None:
            raise RuntimeError("call reset() (or reset_to(states)) before step()")
        checked = self._check_actions(actions)
        jax_actions = _leaf_to_jax(checked)
        self._key, self._leaves, out = self._step(self._leaves, self._key, jax_actions)
        # XLA runs the step asynchronously and reads the actions through a DLPack view of the
        # caller's memory: hold them until the next step has been queued behind this one, so
        # that a caller who frees its actions right away (and torch, reusing that memory on
        # its own stream) cannot overwrite them before XLA has read them.
        self._held_actions = (actions, checked, jax_actions)
        out = jax_to_torch(out)
        self.last_obs = out.obs
        info = {
            "terminated": out.terminated,
            "truncated": out.truncated,
            "final_obs": out.final_obs if self.final_obs else out.obs,
            "episode_return": out.episode_return,
            "episode_length": out.episode_length,
            "winner": out.winner,
        }
        if self.state_vectors:
            info["state_vector"] = out.state_vector
            info["final_state_vector"] = out.final_state_vector
        if self.score is not None:
            info["score"] = out.score
        return out.obs, out.rewards, out.dones, out.ep_dones, info

    @property
    def present(self) -> torch.Tensor:
        """(B, m) bool: the agents present in the current games (all True without a team draw,
        `EnvConfig.team_draw`). An absent agent is dead for its whole episode, its observation
        zero and its actions ignored: a trainer masks it out of its losses and statistics. After
        a `step`, the rows of games that restarted are their fresh episodes'."""
        present = self.states.episode.present
        if present is None:
            return torch.ones(self.num_envs, self.n_agents, dtype=torch.bool, device=self.device)
        if isinstance(self.game, VersusEnv):
            present = jax.vmap(self.game.team_view)(present)
        return jax_to_torch(present)

    def state_vector(self) -> torch.Tensor:
        """(B, 2, S) float32: the global state vector of the current states, seen from team
        0 and from team 1 (`gigastep.game.observations.global_state`)."""
        return jax_to_torch(_v_both_state_vectors(self.config, self.states))

    def snapshot(self) -> dict[str, Any]:
        """Everything the next steps depend on, as torch tensors (copies): the PRNG key, the
        game states (flat list of leaves) and the last observation. `restore` continues from
        it exactly (same key, same states: the same future steps, bit for bit)."""
        if self._leaves is None:
            raise RuntimeError("call reset() first")
        copy = partial(jax.tree_util.tree_map, lambda t: t.clone())
        # the key as int64: torch < 2.6 cannot save uint32 tensors
        return {
            "key": jax_to_torch(self._key).to(torch.int64),
            "states": [copy(jax_to_torch(leaf)) for leaf in self._leaves],
            "last_obs": copy(self.last_obs),
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Continue from a `snapshot()` (of a TorchVecEnv of the same game and batch size)."""
        missing = {"key", "states", "last_obs"} - set(snapshot)
        if missing:
            raise ValueError(f"not a TorchVecEnv snapshot: missing {sorted(missing)}")
        shapes = jax.eval_shape(lambda: _reset(self.game, self.num_envs, self._key, self.window)[2])
        want = [(tuple(x.shape), np.dtype(x.dtype)) for x in jax.tree_util.tree_leaves(shapes)]
        leaves, key = snapshot["states"], snapshot["key"]
        if not isinstance(leaves, list) or not all(isinstance(t, torch.Tensor) for t in leaves):
            raise TypeError(
                f"the snapshot's states must be a list of torch tensors (from snapshot()), got "
                f"{type(leaves).__name__}"
            )
        if not isinstance(key, torch.Tensor) or tuple(key.shape) != (2,):
            raise ValueError(
                f"the snapshot's key must be a torch tensor of shape (2,) (from snapshot()), got "
                f"{getattr(key, 'shape', type(key).__name__)}"
            )
        got = [(tuple(t.shape), _numpy_dtype(t)) for t in leaves]
        if got != want:
            raise ValueError(
                f"the snapshot's states do not fit this TorchVecEnv ({self.num_envs} games of "
                f"{self.config.n_agents} agents): got leaves {got[:3]}..., expected {want[:3]}..."
            )
        arrays = [t.cpu().numpy() for t in leaves]
        check_finite_state(
            jax.tree_util.tree_unflatten(self._treedef, arrays), "TorchVecEnv.restore"
        )
        put = partial(jax.device_put, device=self.jax_device)
        self._key = put(jnp.asarray(np.asarray(key.cpu()).astype(np.uint32)))
        self._leaves = [put(jnp.array(a)) for a in arrays]
        self.last_obs = jax.tree_util.tree_map(
            lambda t: t.to(self.device).clone(), snapshot["last_obs"]
        )

    def close(self) -> None:
        self._leaves = None

    # --- checks -------------------------------------------------------------------------
    def _check_actions(self, actions: object) -> torch.Tensor:
        if not isinstance(actions, torch.Tensor):
            raise TypeError(f"actions must be a torch.Tensor, got {type(actions).__name__}")
        b, m = self.num_envs, self.n_agents
        discrete = self.config.discrete_actions
        shape = (b, m) if discrete else (b, m, 3)
        if discrete:
            kind_ok = not (
                actions.is_floating_point() or actions.is_complex() or actions.dtype == torch.bool
            )
        else:
            kind_ok = actions.is_floating_point()
        if tuple(actions.shape) != shape or not kind_ok:
            what = "integer indices 0..26" if discrete else "floats (heading, dive, throttle)"
            raise ValueError(
                f"actions must be {what} of shape {shape} (num_envs, agents"
                f"{'' if discrete else ', 3'}); got {actions.dtype} of shape {tuple(actions.shape)}"
            )
        if actions.device != self.device:
            raise ValueError(
                f"actions are on {actions.device} but this TorchVecEnv runs on {self.device}"
            )
        want = torch.int32 if discrete else torch.float32
        return actions if actions.dtype == want else actions.to(want)


def _numpy_dtype(t: torch.Tensor) -> np.dtype:
    return np.dtype(str(t.dtype).removeprefix("torch."))


def _check_window(window: Iterable[int] | None, num_envs: int) -> tuple[int, int] | None:
    if window is None:
        return None
    try:
        start, total = (int(v) for v in window)
    except (TypeError, ValueError):
        raise TypeError(f"window must be (start, total), got {window!r}") from None
    if not 0 <= start <= total - num_envs:
        raise ValueError(
            f"window {window!r}: games [{start}, {start + num_envs}) must lie in a batch of {total}"
        )
    return (start, total)


def _check_scripted(
    scripted: Iterable[ScriptedTeam], num_envs: int, game: Game
) -> tuple[ScriptedTeam, ...]:
    """The scripted teams as a tuple, checked: inside the batch, no game and team twice."""
    scripted = tuple(scripted)
    if not all(isinstance(s, ScriptedTeam) for s in scripted):
        raise TypeError("scripted must be a sequence of gigastep.adapters.torch.ScriptedTeam")
    if scripted and isinstance(game, VersusEnv):
        raise ValueError("scripted teams cannot be combined with opponent=...: pass one")
    taken: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for s in scripted:
        if s.stop > num_envs:
            raise ValueError(f"{s} reaches past the batch of {num_envs} games")
        if not np.any(np.asarray(_game_config(game).teams) == s.team):
            raise ValueError(f"{s}: team {s.team} has no agents in this game")
        for lo, hi in taken[s.team]:
            if s.start < hi and lo < s.stop:
                raise ValueError(
                    f"{s} overlaps games [{lo}, {hi}) already scripted for team {s.team}"
                )
        taken[s.team].append((s.start, s.stop))
    return scripted


def _as_game(name_or_env: EnvLike | VersusEnv, opponent: str | Policy | None, team: int) -> Game:
    """An EnvConfig (all agents controlled) or a VersusEnv (one team scripted)."""
    if isinstance(name_or_env, VersusEnv):
        if opponent is not None:
            raise ValueError("pass either a VersusEnv or an opponent, not both")
        return name_or_env
    env = resolve_env(name_or_env)
    if opponent is None:
        return env.config
    check_team(team)
    return VersusEnv(env, opponent, opponent_team=1 - team)
