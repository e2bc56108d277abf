"""Record one game step by step, save it as a small replay file, re-simulate it exactly.

A game is driven by `GameRunner` (two players, or a person through `overrides`), with this key
derivation, which a replay repeats to re-simulate the game bit for bit:

    key = jax.random.PRNGKey(seed)
    k_reset, k_game = jax.random.split(key)
    obs, state = env.reset(k_reset)
    for t = 0, 1, ...:
        k_policy, k_env = jax.random.split(jax.random.fold_in(k_game, t))
        actions = the players' actions (team 0's policy draws from fold_in(k_policy, 0),
                  team 1's from fold_in(k_policy, 1)), then any overrides
        obs, state, rewards, dones, episode_done = env.step(state, actions, k_env)

A replay file stores the scenario (its name as given to `gigastep.make`, any EnvConfig
overrides, and the config hash), the seed, the players' names, the ego views shown, and the
actions of every step (`env.step` is pure, so nothing else is needed), plus what the
re-simulation is checked against: the final episode returns, the step count and the SHA-256
of the final state (every agent's position, heading, health, ...; `state_sha256`). It is a
compressed `.npz` of plain arrays, read with `allow_pickle=False`; `FORMAT_VERSION` is stored
with it. Re-simulation is exact on the same platform and library versions (XLA may round
differently elsewhere); `Replay.simulate` checks it and says so if the game diverged. Loading
a replay whose scenario now has a different hash (its catalogue entry changed) fails with both
hashes.

Integrity: the file also holds `digest`, the SHA-256 of everything else in it (`_digest`:
format, version, metadata, actions, final returns, final state's hash), and `Replay.load`
refuses a file whose content no longer has it (ReplayError naming the file). An edited
action is thus caught by the digest, or, if the digest was recomputed too, by the
re-simulation, whose final state differs from the recorded one. Files written before the
digest existed (no `digest` array) still load, with a `ReplayWarning`: they are checked only
by their re-simulation.

`save_state` / `load_state` store one `EnvState` (single or batched) as `.npz`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.typing import ArrayLike

from gigastep._util.checks import check_positive_int
from gigastep._util.files import atomic_path
from gigastep.env import GigastepEnv
from gigastep.eval.matches import ScriptedPlayer, TorchActor, resolve_player
from gigastep.game.types import (
    AgentState,
    EnvConfig,
    EnvState,
    EpisodeState,
    Observation,
    check_finite_state,
)

if TYPE_CHECKING:
    from gigastep.eval.matches import Device, PlayerLike
    from gigastep.opponents import Policy

StrPath: TypeAlias = "str | os.PathLike[str]"
"""A file path."""

_Advanced: TypeAlias = "tuple[Observation, EnvState, np.ndarray, ArrayLike, ArrayLike, ArrayLike]"
"""What a recording's `advance(t, state)` returns: (obs, state, actions, rewards, dones,
episode_done) of step t."""

__all__ = [
    "FORMAT_VERSION",
    "GameRunner",
    "Recording",
    "Replay",
    "ReplayError",
    "ReplayWarning",
    "load_replay",
    "load_state",
    "make_env",
    "record_game",
    "save_state",
    "state_sha256",
]

FORMAT_VERSION = 1
"""Version of the replay file layout (a file of another version is refused)."""

STATE_FORMAT = "gigastep-state-1"


class ReplayError(ValueError):
    """A replay that cannot be loaded or re-simulated (message says why)."""


class ReplayWarning(UserWarning):
    """A replay loaded without its integrity check (a file written before the digest)."""


def make_env(scenario: str | GigastepEnv, overrides: dict[str, Any] | None = None) -> GigastepEnv:
    """The environment of a scenario name (`gigastep.make`), with EnvConfig overrides."""
    from gigastep.registry import make

    if isinstance(scenario, GigastepEnv):
        return GigastepEnv(scenario.config.replace(**overrides)) if overrides else scenario
    return make(scenario, **(overrides or {}))


def _scenario_name(env: GigastepEnv, scenario: str | None) -> str:
    if isinstance(scenario, str):
        return scenario
    spec = getattr(env, "spec", None)
    if spec is None:
        raise ValueError(
            "this environment has no scenario name (it was not built by gigastep.make): pass "
            "the name, or record from the name instead of the GigastepEnv"
        )
    return spec.name


def _config_hash(env: GigastepEnv) -> str:
    from gigastep.scenarios import scenario_hash

    return scenario_hash(env.config)


# ------------------------------------------------------------------------------------------
# Driving one game
# ------------------------------------------------------------------------------------------


@jax.jit
def _step_keys(k_game: jax.Array, t: int) -> tuple[jax.Array, jax.Array]:
    k = jax.random.split(jax.random.fold_in(k_game, t))
    return k[0], k[1]


def _start_keys(seed: int) -> tuple[jax.Array, jax.Array]:
    k = jax.random.split(jax.random.PRNGKey(seed))
    return k[0], k[1]


class GameRunner:
    """One game between two players (team 0's and team 1's), advanced one step at a time.

    Args:
        env: a scenario name (kept for replays), or a `GigastepEnv`.
        players: (team 0's player, team 1's player), in any form `gigastep.eval.matches` takes.
        seed: the game's seed (module docstring for how keys derive from it).
        overrides: EnvConfig fields applied to a named scenario.
        device: torch device for TorchPlayers.
    """

    def __init__(
        self,
        env: str | GigastepEnv,
        players: Sequence[PlayerLike],
        seed: int = 0,
        overrides: dict[str, Any] | None = None,
        device: Device = "cpu",
    ) -> None:
        if len(players) != 2:
            raise ValueError(f"players are (team 0's, team 1's); got {len(players)} players")
        self.env = make_env(env, overrides)
        self.scenario = env if isinstance(env, str) else None
        self.overrides = dict(overrides or {})
        self.config = self.env.config
        self.players = [resolve_player(p, device) for p in players]
        for team, p in enumerate(self.players):
            try:
                p.check(self.config, team)
            except ValueError as err:
                raise ValueError(f"{p.name} cannot play team {team}: {err}") from None
        self.seed = int(seed)
        self.device = device
        self._k_reset, self._k_game = _start_keys(self.seed)
        self._rows = [np.flatnonzero(np.asarray(self.config.teams) == t) for t in (0, 1)]
        self.reset()

    @property
    def names(self) -> tuple[str, str]:
        return (self.players[0].name, self.players[1].name)

    def reset(self) -> None:
        """Back to the game's first state (the same one: the seed decides it)."""
        self.obs, self.state = self.env.reset(self._k_reset)
        self.t = 0
        self.done = False
        self.actions: list[np.ndarray] = []
        self._actors: list[TorchActor | None] = [
            None
            if isinstance(p, ScriptedPlayer)
            else p.actor(self.config, team, 1, self.device, self.seed + team)
            for team, p in enumerate(self.players)
        ]

    def policy_actions(self) -> np.ndarray:
        """What the players do in the current state: (n,) int32 or (n, 3) float32."""
        k_policy, _ = _step_keys(self._k_game, self.t)
        n = self.config.n_agents
        discrete = self.config.discrete_actions
        actions = np.zeros((n,) if discrete else (n, 3), np.int32 if discrete else np.float32)
        for team, p in enumerate(self.players):
            rows = self._rows[team]
            if isinstance(p, ScriptedPlayer):
                out = _policy(self.config, p.policy)(self.state, k_policy, team)
                actions[rows] = np.asarray(out)[rows]
            else:
                actions[rows] = self._torch_actions(team)
        return actions

    def _torch_actions(self, team: int) -> np.ndarray:
        import torch

        from gigastep.adapters.torch import jax_to_torch

        rows = jnp.asarray(self._rows[team])
        obs = jax.tree_util.tree_map(
            lambda x: jax_to_torch(x[rows][None]).to(self.device), self.obs
        )
        first = torch.tensor([self.t == 0], device=self.device)
        actor = self._actors[team]
        assert actor is not None  # the team of a TorchPlayer has an actor
        out = actor(obs, first)
        return out[0].detach().cpu().numpy()

    def replay(self, agents: Iterable[int] = ()) -> Replay:
        """The replay of the game so far (needs a scenario name)."""
        return _replay_of(
            self.env,
            self.scenario,
            self.overrides,
            self.seed,
            self.names,
            agents,
            self.actions,
            self.state,
        )

    def step(
        self,
        actions: npt.ArrayLike | None = None,
        overrides: Mapping[int, npt.ArrayLike] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """Advance one step; returns (rewards (n,), dones (n,), episode_done) as NumPy.

        Args:
            actions: all agents' actions; default `policy_actions()`.
            overrides: {agent index: action} replacing those agents' actions (a person's).
        """
        if self.done:
            raise RuntimeError("the episode has ended; call reset() to start it again")
        actions = self.policy_actions() if actions is None else np.asarray(actions).copy()
        for agent, action in (overrides or {}).items():
            actions[agent] = action
        _, k_env = _step_keys(self._k_game, self.t)
        self.obs, self.state, rewards, dones, done = self.env.step(
            self.state, jnp.asarray(actions), k_env
        )
        self.actions.append(actions)
        self.t += 1
        self.done = bool(done)
        return np.asarray(rewards), np.asarray(dones), self.done


@lru_cache(maxsize=64)
def _policy(config: EnvConfig, policy: Policy) -> Callable[[EnvState, jax.Array, int], jax.Array]:
    """Compiled (state, k_policy, team) -> policy(config, state, fold_in(k_policy, team))."""
    return jax.jit(lambda state, k, team: policy(config, state, jax.random.fold_in(k, team)))


# ------------------------------------------------------------------------------------------
# Recordings
# ------------------------------------------------------------------------------------------


@dataclass
class Recording:
    """A played game: its states (stacked over time, on the device), the ego views of the
    chosen agents, and every step's actions, rewards and dones (NumPy).

    T steps give T + 1 states (the first one after the reset, then one per step).
    """

    env: GigastepEnv
    scenario: str | None
    overrides: dict[str, Any]
    seed: int
    players: tuple[str, str]
    agents: tuple[int, ...]
    states: EnvState  # leaves (T + 1, ...)
    ego: np.ndarray | None  # (T + 1, len(agents), res_x, res_y, 3) uint8
    actions: np.ndarray  # (T, n) int32 or (T, n, 3) float32
    rewards: np.ndarray  # (T, n) float32
    dones: np.ndarray  # (T, n) bool
    episode_done: np.ndarray  # (T,) bool

    @property
    def steps(self) -> int:
        return len(self.actions)

    def replay(self) -> Replay:
        """The replay of this game (needs a scenario name)."""
        final = jax.tree_util.tree_map(lambda x: x[-1], self.states)
        return _replay_of(
            self.env,
            self.scenario,
            self.overrides,
            self.seed,
            self.players,
            self.agents,
            self.actions,
            final,
        )


def _replay_of(
    env: GigastepEnv,
    scenario: str | None,
    overrides: dict[str, Any],
    seed: int,
    players: tuple[str, str],
    agents: Iterable[int],
    actions: Sequence[np.ndarray] | np.ndarray,
    final: EnvState,
) -> Replay:
    n = env.n_agents
    empty = (0, n) if env.discrete_actions else (0, n, 3)
    dtype = np.int32 if env.discrete_actions else np.float32
    return Replay(
        scenario=_scenario_name(env, scenario),
        overrides=dict(overrides),
        config_hash=_config_hash(env),
        seed=seed,
        players=cast("tuple[str, str]", tuple(players)),  # (team 0's, team 1's)
        agents=tuple(agents),
        # a (T, ...) array stacks as the sequence of its rows
        actions=np.stack(cast("Sequence[np.ndarray]", actions)).astype(dtype)
        if len(actions)
        else np.zeros(empty, dtype),
        final_returns=np.asarray(final.episode.returns, np.float32),
        final_step=int(final.episode.step),
        platform=_platform(),
        final_state_sha256=state_sha256(final),
    )


def _ego(env: GigastepEnv, obs: Observation, agents: tuple[int, ...]) -> jax.Array | None:
    if not agents:
        return None
    rgb = obs[0] if isinstance(obs, tuple) else obs
    return rgb[jnp.asarray(agents)]


def check_agents(env: GigastepEnv, agents: Iterable[int]) -> tuple[int, ...]:
    """Validate the agents whose ego views are shown (RGB observations needed)."""
    agents = tuple(int(a) for a in agents)
    bad = [a for a in agents if not 0 <= a < env.n_agents]
    if bad:
        raise ValueError(f"agents {bad} do not exist: this game has agents 0..{env.n_agents - 1}")
    if agents and env.obs_type not in ("rgb", "rgb_vector"):
        raise ValueError(
            f"ego views need RGB observations, and this scenario observes {env.obs_type!r} "
            "(no images): choose an _rgb_ variant of the scenario, or show no agents"
        )
    return agents


def _collect(
    env: GigastepEnv,
    first_obs: Observation,
    first_state: EnvState,
    advance: Callable[[int, EnvState], _Advanced],
    agents: tuple[int, ...],
    steps: int,
) -> dict[str, Any]:
    """Run `advance(t, state) -> (obs, state, actions, rewards, dones, done)` until the episode
    ends or `steps` steps; stack what a Recording holds."""
    states, ego = [first_state], [_ego(env, first_obs, agents)]
    actions, rewards, dones, ep_done = [], [], [], []
    state = first_state
    for t in range(steps):
        obs, state, a, r, d, done = advance(t, state)
        states.append(state)
        ego.append(_ego(env, obs, agents))
        actions.append(np.asarray(a))
        rewards.append(np.asarray(r))
        dones.append(np.asarray(d))
        ep_done.append(bool(done))
        if done:
            break
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)
    n = env.n_agents
    empty = (0, n) if env.discrete_actions else (0, n, 3)
    dtype = np.int32 if env.discrete_actions else np.float32
    return dict(
        states=stacked,
        # with agents, every ego view is an array
        ego=None if not agents else np.asarray(jnp.stack(cast("list[jax.Array]", ego))),
        actions=np.stack(actions).astype(dtype) if actions else np.zeros(empty, dtype),
        rewards=np.stack(rewards) if rewards else np.zeros((0, n), np.float32),
        dones=np.stack(dones) if dones else np.zeros((0, n), bool),
        episode_done=np.asarray(ep_done, bool),
    )


def record_game(
    env: str | GigastepEnv,
    players: Sequence[PlayerLike],
    steps: int = 200,
    seed: int = 0,
    agents: Iterable[int] = (),
    overrides: dict[str, Any] | None = None,
    device: Device = "cpu",
    progress: Callable[[int], object] | None = None,
) -> Recording:
    """Play one episode (at most `steps` steps) between (team 0's, team 1's) players.

    Args:
        env: a scenario name (recommended: replays need it) or a `GigastepEnv`.
        agents: agents whose RGB observations the recording keeps (for videos).
        progress: optional callable `progress(steps_done)`.
    """
    check_positive_int(steps, "steps")
    game = GameRunner(env, players, seed, overrides, device)
    agents = check_agents(game.env, agents)

    def advance(t: int, state: EnvState) -> _Advanced:
        rewards, dones, done = game.step()
        if progress is not None:
            progress(t + 1)
        return game.obs, game.state, game.actions[-1], rewards, dones, done

    parts = _collect(game.env, game.obs, game.state, advance, agents, steps)
    return Recording(
        env=game.env,
        scenario=game.scenario,
        overrides=game.overrides,
        seed=game.seed,
        players=game.names,
        agents=agents,
        **parts,
    )


# ------------------------------------------------------------------------------------------
# Replay files
# ------------------------------------------------------------------------------------------


def _platform() -> str:
    import platform

    return f"{jax.default_backend()}, jax {jax.__version__}, {platform.machine()}"


def _update(digest: Any, name: str, array: npt.ArrayLike) -> None:
    """Hash one named array: its name, dtype, shape and bytes (C order)."""
    array = np.ascontiguousarray(array)
    head = json.dumps([name, array.dtype.str, list(array.shape)])
    digest.update(head.encode())
    digest.update(b"\0")
    digest.update(array.tobytes())
    digest.update(b"\0")


def state_sha256(state: EnvState) -> str:
    """The SHA-256 of an `EnvState`: every field's name, dtype, shape and bytes, so two states
    have the same hash only if they are equal bit for bit."""
    digest = hashlib.sha256()
    for name, array in sorted(_flat(state).items()):
        _update(digest, name, array)
    return digest.hexdigest()


def _digest(arrays: Mapping[str, npt.ArrayLike]) -> str:
    """The SHA-256 of a replay file's arrays, all but `digest` itself, in name order."""
    digest = hashlib.sha256(b"gigastep-replay-digest-1\0")
    for name in sorted(arrays):
        if name != "digest":
            _update(digest, name, arrays[name])
    return digest.hexdigest()


_META: dict[str, tuple[type | tuple[type, ...], str]] = {
    "scenario": (str, "a scenario name"),
    "config_hash": (str, "the scenario's hash"),
    "seed": (int, "an integer"),
    "players": (list, "[team 0's player, team 1's player]"),
    "agents": (list, "a list of agent indices"),
    "overrides": (dict, "an object of EnvConfig fields"),
    "final_step": ((int, type(None)), "an integer or null"),
}
"""The metadata every replay holds: key -> (JSON type, what it must be)."""


def _check_meta(path: str, meta: object) -> dict[str, Any]:
    if not isinstance(meta, dict):
        raise ReplayError(f"{path!r}: its metadata is {type(meta).__name__}, not an object")
    missing = [key for key in _META if key not in meta]
    if missing:
        raise ReplayError(
            f"{path!r}: its metadata lacks {', '.join(missing)} (a replay holds {', '.join(_META)})"
        )
    for key, (kind, what) in _META.items():
        value = meta[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ReplayError(f"{path!r}: metadata {key} is {value!r}, expected {what}")
    players, agents = meta["players"], meta["agents"]
    if len(players) != 2 or not all(isinstance(p, str) for p in players):
        raise ReplayError(
            f"{path!r}: metadata players is {players!r}, expected {_META['players'][1]}"
        )
    if not all(isinstance(a, int) and not isinstance(a, bool) for a in agents):
        raise ReplayError(f"{path!r}: metadata agents is {agents!r}, expected agent indices")
    for key in ("render_options", "platform"):
        kind = dict if key == "render_options" else str
        if key in meta and not isinstance(meta[key], kind):
            raise ReplayError(
                f"{path!r}: metadata {key} is {meta[key]!r}, expected {kind.__name__}"
            )
    return meta


@dataclass
class Replay:
    """Everything needed to play a recorded game again (module docstring)."""

    scenario: str
    config_hash: str
    seed: int
    actions: np.ndarray  # (T, n) int32 or (T, n, 3) float32
    players: tuple[str, str] = ("?", "?")
    agents: tuple[int, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)
    final_returns: np.ndarray | None = None  # (n,) float32 at the end of the recording
    final_step: int | None = None
    platform: str = ""
    render_options: dict[str, Any] = field(default_factory=dict)  # how it was shown (scale, fps)
    version: int = FORMAT_VERSION
    final_state_sha256: str | None = None  # `state_sha256` of the recording's final state

    @property
    def steps(self) -> int:
        return len(self.actions)

    def save(self, path: StrPath) -> None:
        """Write the replay as a compressed .npz (atomically)."""
        meta = {
            "scenario": self.scenario,
            "config_hash": self.config_hash,
            "seed": self.seed,
            "players": list(self.players),
            "agents": list(self.agents),
            "overrides": self.overrides,
            "final_step": self.final_step,
            "platform": self.platform,
            "render_options": self.render_options,
        }
        arrays: dict[str, Any] = {
            "format": np.asarray("gigastep-replay"),
            "version": np.asarray(self.version, np.int32),
            "meta": np.asarray(json.dumps(meta, sort_keys=True)),
            "actions": np.asarray(self.actions),
        }
        if self.final_returns is not None:
            arrays["final_returns"] = np.asarray(self.final_returns, np.float32)
        if self.final_state_sha256 is not None:
            arrays["final_state_sha256"] = np.asarray(self.final_state_sha256)
        arrays["digest"] = np.asarray(_digest(arrays))
        with atomic_path(path, suffix=".npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez_compressed(f, **arrays)

    @classmethod
    def load(cls, path: StrPath) -> Replay:
        """Read a replay file (no pickle); see `env` for the scenario check.

        Raises:
            FileNotFoundError: no such file.
            ReplayError: not a replay (truncated, another file, another format version), its
                content does not have the digest it records (edited since it was written),
                or its metadata or arrays lack a key or have the wrong type; the message
                names the file.

        Warns:
            ReplayWarning: the file has no digest (written before digests existed).
        """
        path = os.fspath(path)
        arrays = _read_npz(path, "replay file", ReplayError)
        if str(arrays.get("format", "")) != "gigastep-replay" or "meta" not in arrays:
            raise ReplayError(f"{path!r} is not a Gigastep replay (arrays: {sorted(arrays)})")
        try:
            version = int(arrays.get("version", -1))
        except (TypeError, ValueError):
            raise ReplayError(
                f"{path!r}: its version is {arrays['version']!r}, not a number"
            ) from None
        if version != FORMAT_VERSION:
            raise ReplayError(
                f"{path!r} is a replay of format version {version}; this Gigastep reads "
                f"version {FORMAT_VERSION}"
            )
        if "digest" in arrays:
            recorded, actual = str(arrays["digest"]), _digest(arrays)
            if recorded != actual:
                raise ReplayError(
                    f"{path!r} was changed after it was written: its content's SHA-256 is "
                    f"{actual}, not the {recorded[:64]!r} it records"
                )
        else:
            warnings.warn(
                f"{path!r} has no digest (written by Gigastep 0.1.0 or older): its integrity is "
                "checked only by re-simulating it",
                ReplayWarning,
                stacklevel=2,
            )
        try:
            meta = json.loads(str(arrays["meta"]))
        except json.JSONDecodeError as err:
            raise ReplayError(f"{path!r}: its metadata is not JSON ({err})") from None
        meta = _check_meta(path, meta)
        actions = arrays.get("actions")
        if actions is None or actions.dtype not in (np.int32, np.float32) or actions.ndim < 2:
            raise ReplayError(
                f"{path!r}: its actions are "
                f"{'missing' if actions is None else f'{actions.dtype} {actions.shape}'}, "
                "expected (steps, agents) int32 or (steps, agents, 3) float32"
            )
        returns = arrays.get("final_returns")
        if returns is not None and (returns.dtype != np.float32 or returns.ndim != 1):
            raise ReplayError(
                f"{path!r}: its final_returns are {returns.dtype} {returns.shape}, expected "
                "(agents,) float32"
            )
        sha = arrays.get("final_state_sha256")
        return cls(
            scenario=meta["scenario"],
            config_hash=meta["config_hash"],
            seed=meta["seed"],
            actions=actions,
            players=(meta["players"][0], meta["players"][1]),
            agents=tuple(meta["agents"]),
            overrides=meta["overrides"],
            final_returns=returns,
            final_step=meta["final_step"],
            platform=meta.get("platform", ""),
            version=version,
            render_options=meta.get("render_options", {}),
            final_state_sha256=None if sha is None else str(sha),
        )

    def env(self) -> GigastepEnv:
        """The recorded game's environment, refused if the scenario changed since."""
        from gigastep.scenarios import scenario_hash

        env = make_env(self.scenario, self.overrides)
        now = scenario_hash(env.config)
        if now != self.config_hash:
            raise ReplayError(
                f"the replay was recorded on scenario {self.scenario!r} with config hash "
                f"{self.config_hash}, but that scenario now has hash {now}: the game changed "
                "since the recording, so the replay cannot be re-simulated"
            )
        n = env.n_agents
        shape = (n,) if env.discrete_actions else (n, 3)
        if self.actions.shape[1:] != shape:
            raise ReplayError(
                f"the replay's actions have shape {self.actions.shape[1:]} per step; "
                f"{self.scenario!r} takes {shape}"
            )
        return env

    def simulate(self, agents: Iterable[int] | None = None, check: bool = True) -> Recording:
        """Re-simulate the game from its seed and actions.

        Args:
            agents: ego views to keep (default: those of the recording).
            check: compare the final returns and step count with the recording's and raise
                `ReplayError` if they differ.
        """
        env = self.env()
        agents = check_agents(env, self.agents if agents is None else agents)
        k_reset, k_game = _start_keys(self.seed)
        obs, state = env.reset(k_reset)
        actions = jnp.asarray(self.actions)

        def advance(t: int, state: EnvState) -> _Advanced:
            _, k_env = _step_keys(k_game, t)
            obs, state, rewards, dones, done = env.step(state, actions[t], k_env)
            return obs, state, self.actions[t], rewards, dones, done

        parts = _collect(env, obs, state, advance, agents, self.steps)
        rec = Recording(
            env=env,
            scenario=self.scenario,
            overrides=self.overrides,
            seed=self.seed,
            players=self.players,
            agents=agents,
            **parts,
        )
        if check:
            self._check(rec)
        return rec

    def _check(self, rec: Recording) -> None:
        final = jax.tree_util.tree_map(lambda x: x[-1], rec.states)
        returns = np.asarray(final.episode.returns)
        same_steps = len(rec.actions) == self.steps
        same_returns = self.final_returns is None or np.array_equal(returns, self.final_returns)
        sha = state_sha256(final) if self.final_state_sha256 is not None else None
        if not (same_steps and same_returns and sha == self.final_state_sha256):
            state = "" if sha == self.final_state_sha256 else ", a different final state"
            raise ReplayError(
                "the re-simulated game differs from the recording (final returns "
                f"{returns.tolist()} vs {np.asarray(self.final_returns).tolist()}, "
                f"{len(rec.actions)} vs {self.steps} steps{state}). Replays are exact on the "
                f"platform they were recorded on ({self.platform}); this is {_platform()}"
            )


def _read_npz(path: str, what: str, error: type[Exception]) -> dict[str, np.ndarray]:
    """Every array of an .npz file, read without pickle; `error` if it is not one."""
    if os.path.isdir(path):
        raise error(f"{path!r} is a folder, not a Gigastep {what}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {what} {path!r}")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise error(
            f"{path!r} is not a Gigastep {what} (not a plain .npz, or truncated: {err})"
        ) from None


def load_replay(path: StrPath) -> Replay:
    """`Replay.load(path)`."""
    return Replay.load(path)


# ------------------------------------------------------------------------------------------
# States
# ------------------------------------------------------------------------------------------


def _flat(state: EnvState) -> dict[str, np.ndarray]:
    out = {}
    for part in ("agents", "episode"):
        sub = getattr(state, part)
        for f in dataclasses.fields(sub):
            value = getattr(sub, f.name)
            if value is not None:  # an optional field left out (the drawn map of a generator)
                out[f"{part}.{f.name}"] = np.asarray(value)
    return out


def save_state(state: EnvState, path: StrPath) -> None:
    """Write an `EnvState` (any leading batch axes) to a compressed .npz, atomically; refused
    (ValueError) if a position, speed or heading is not finite, as `load_state` would refuse
    the file."""
    if not isinstance(state, EnvState):
        raise TypeError(f"save_state takes an EnvState, got {type(state).__name__}")
    check_finite_state(state, "save_state")
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as f:
            flat: dict[str, Any] = _flat(state)
            np.savez_compressed(f, __format__=np.asarray(STATE_FORMAT), **flat)


def load_state(path: StrPath) -> EnvState:
    """Read an `EnvState` written by `save_state` (no pickle); arrays come back as JAX arrays.

    Raises:
        ValueError: not a state file, a field is missing, or a position, speed or heading is
            not finite (`gigastep.game.types.check_finite_state`).
    """
    path = os.fspath(path)
    arrays = _read_npz(path, "state file", ValueError)
    if str(arrays.pop("__format__", "")) != STATE_FORMAT:
        raise ValueError(f"{path!r} is not a Gigastep state file (format {STATE_FORMAT!r})")
    parts: dict[str, Any] = {}
    for part, cls in (("agents", AgentState), ("episode", EpisodeState)):
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields if f"{part}.{f.name}" in arrays]
        missing = [f.name for f in fields if f.name not in names and f.default is not None]
        if missing:
            raise ValueError(f"{path!r} lacks the state fields {part}.{missing}")
        parts[part] = cls(**{n: jnp.asarray(arrays[f"{part}.{n}"]) for n in names})
    state = EnvState(agents=parts["agents"], episode=parts["episode"])
    check_finite_state(state, f"load_state({path!r})")
    return state
