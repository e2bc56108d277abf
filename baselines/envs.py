"""What the trainer needs to know about a game, and how it makes a batch of them.

`GameSpec` describes the agents (teams, types), observations and actions of a game without
holding it; `gigastep_game(name)` gives the spec of a Gigastep scenario and a factory of
`gigastep.adapters.torch.TorchVecEnv` batches. Any other batched environment with the same step
interface (e.g. the memory probe of `baselines.probes`) can be trained by passing its own
spec and factory to the trainer.

The step interface (B games of n agents, torch tensors on one device):
    reset() -> obs;  step(actions) -> (obs, rewards [B, n], dones [B, n], ep_dones [B],
    info) with info holding terminated, truncated, final_obs, episode_return, episode_length,
    winner (and state_vector, final_state_vector [B, 2, S] when asked); snapshot() /
    restore(snapshot) for exact resumption; state_vector() -> [B, 2, S]; `last_obs`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gigastep.game.types import EnvConfig

__all__ = [
    "GameSpec",
    "game_spec_from_config",
    "gigastep_game",
    "shooter_credit_weights",
    "training_env",
    "unshaped_config",
    "vec_env_factory",
]


@dataclass(frozen=True)
class GameSpec:
    """Agents, observations and actions of a game (static; saved with checkpoints)."""

    name: str
    """Scenario name."""
    scenario_hash: str
    """`gigastep.scenario_hash` of the config (or a probe's own id)."""
    teams: tuple[int, ...]
    """Team (0 or 1) of each agent."""
    type_keys: tuple[str, ...]
    """Agent type of each agent (its name, or its attributes when unnamed)."""
    obs_type: str
    """vector, rgb, rgb_vector or entity."""
    vector_size: int
    """Length of the vector observation, or of the entity observation (its `entity_size`)."""
    image_shape: tuple[int, int, int] | None
    discrete: bool
    state_size: int = 0
    """Length of the global state vector (0: the game has none)."""
    vocab: tuple[str, ...] = ()
    """The agent types of the type one-hot, in order, where a run fixed them: a run started
    from a trained policy (`--init-from`) keeps that policy's. Empty: the game's own types,
    sorted (`type_vocab`)."""

    @property
    def n_agents(self) -> int:
        return len(self.teams)

    def team_agents(self, team: int) -> np.ndarray:
        """Indices of the agents of `team`, in agent order."""
        return np.flatnonzero(np.asarray(self.teams) == team)

    @property
    def team_sizes(self) -> tuple[int, int]:
        return (len(self.team_agents(0)), len(self.team_agents(1)))

    @property
    def symmetric(self) -> bool:
        """Both teams have the same agent types in the same order."""
        a, b = (tuple(self.type_keys[i] for i in self.team_agents(t)) for t in (0, 1))
        return len(a) > 0 and a == b

    @property
    def type_vocab(self) -> tuple[str, ...]:
        """The one-hot positions: `vocab` where set, else the distinct agent types, sorted."""
        return tuple(self.vocab) or tuple(sorted(set(self.type_keys)))


def _type_key(config, i: int) -> str:
    if config.type_names:
        return config.type_names[i]
    values = (
        config.sprites[i],
        config.max_health[i],
        config.detection_range[i],
        config.damage_range[i],
        config.thrust[i],
        config.idle_reward[i],
    )
    return "sprite={}/health={:g}/range={:g}/damage={:g}/thrust={:g}/idle={:g}".format(*values)


def _vector_size(config) -> int:
    """The flat observation's length: the vector part's, the entity observation's
    (`entity_size`), or 0 (images only)."""
    if config.obs_type == "entity":
        return int(config.entity_size)
    return int(config.vector_size) if "vector" in config.obs_type else 0


def game_spec_from_config(config, name: str) -> GameSpec:
    """The `GameSpec` of a Gigastep `EnvConfig`."""
    from gigastep.game.observations.global_state import state_vector_size
    from gigastep.scenarios import scenario_hash

    image = None
    if "rgb" in config.obs_type:
        image = (config.resolution_x, config.resolution_y, 3)
    return GameSpec(
        name=name,
        scenario_hash=scenario_hash(config),
        teams=tuple(config.teams),
        type_keys=tuple(_type_key(config, i) for i in range(config.n_agents)),
        obs_type=config.obs_type,
        vector_size=_vector_size(config),
        image_shape=image,
        discrete=config.discrete_actions,
        state_size=state_vector_size(config),
    )


def parse_overrides(text: str) -> dict:
    """`field=value,...` -> {field: value}; values are read as JSON (numbers, true/false,
    null, [lists], {"objects": ...}) or else kept as strings. Only commas outside brackets
    and braces separate entries, so `seeds=[0,16]` is one entry.

    Raises:
        ValueError: an entry without `=`, or unbalanced brackets.
    """
    import json

    entries, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"--env: unbalanced {ch!r} at character {i} of {text!r}")
        elif ch == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"--env: {depth} unclosed bracket(s) in {text!r}")
    entries.append(text[start:])
    out = {}
    for item in filter(None, (t.strip() for t in entries)):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--env entries are field=value, got {item!r}")
        try:
            out[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[name.strip()] = value.strip()
    return out


def unshaped_config(scenario: str, config: EnvConfig) -> EnvConfig | None:
    """`config` (the scenario with `--env` overrides) with the scenario's own reward weights
    (`gigastep.game.rewards.WEIGHT_FIELDS`), or None where the overrides change none of them:
    the weights of the unshaped return the trainers log (`return_unshaped/<kind>`)."""
    import gigastep
    from gigastep.game.rewards import WEIGHT_FIELDS

    own = gigastep.make(scenario).config
    score = config.replace(**{f: getattr(own, f) for f in WEIGHT_FIELDS})
    return None if score == config else score


def evaluation_config(scenario: str, overrides: str = "", shooter_credit: float = 0.0) -> EnvConfig:
    """The game the trainers' evaluations play: the training game (`training_env`) with the
    scenario's own reward weights. Reward shaping is not evaluated; other overrides (a map
    generator, sensing ranges) are, since they change the game the policy learned to play.
    With weights-only overrides it is the scenario itself."""
    config = training_env(scenario, overrides, shooter_credit).config
    return unshaped_config(scenario, config) or config


def shooter_credit_weights(config: EnvConfig, credit: float) -> dict[str, float]:
    """The reward weights of `--shooter-credit credit` on a game `config`: a fraction `credit`
    of the kill reward K = `reward_defeat_one_opponent`, paid through the game's own terms.

    * ``reward_damage = credit * K * damage_per_second / H``: the damage term pays
      (dealt - 0.5 taken) * dt (rules §4.10), and an agent of max health H dies after
      H / damage_per_second damage units, so the shooter of a whole kill earns credit * K
      (the target pays half the rate for the hits it survives);
    * ``reward_agent_disabled = credit * K``: the agent that dies is charged credit * K.

    H is the mean of the agents' max health (every agent's in the scenarios with one type).
    Both terms pass the aux factor and the team-size division like the kill reward.
    """
    kill = float(config.reward_defeat_one_opponent)
    health = float(np.mean(config.max_health))
    return {
        "reward_damage": credit * kill * float(config.damage_per_second) / health,
        "reward_agent_disabled": credit * kill,
    }


def training_env(scenario: str, overrides: str = "", shooter_credit: float = 0.0):
    """The Gigastep environment a run trains on: the scenario with `--env` overrides
    (`parse_overrides`) and, with `shooter_credit` > 0, `shooter_credit_weights`."""
    import gigastep

    values = parse_overrides(overrides)
    env = gigastep.make(scenario, **values)
    if shooter_credit:
        env = gigastep.make(
            scenario, **values, **shooter_credit_weights(env.config, shooter_credit)
        )
    return env


def gigastep_game(
    scenario: str, overrides: str = "", shooter_credit: float = 0.0
) -> tuple[GameSpec, Callable]:
    """(spec, factory) of a Gigastep scenario with `EnvConfig` overrides (`parse_overrides`);
    `factory(num_envs, seed, device, scripted, state_vectors, window)` builds a
    `TorchVecEnv` (scripted: `ScriptedTeam`s played inside the step; window: this process's
    games of a larger batch, see `TorchVecEnv`).

    With `shooter_credit` the training game also pays `shooter_credit_weights`.

    Raises:
        ValueError: unknown scenario name or field (with the closest names).
    """
    env = training_env(scenario, overrides, shooter_credit)
    spec = game_spec_from_config(env.config, env.spec.name if env.spec else scenario)
    # where the overrides shape the reward, each step also reports the unshaped one
    return spec, vec_env_factory(env, score=unshaped_config(scenario, env.config))


def vec_env_factory(env, score=None) -> Callable:
    """`factory(num_envs, seed, device, scripted, state_vectors, window)`: a `TorchVecEnv` of
    `env`'s games (`score`: the config whose rewards each step also reports, see
    `TorchVecEnv`)."""

    def factory(num_envs, seed, device, scripted=(), state_vectors=False, window=None):
        from gigastep.adapters.torch import TorchVecEnv

        return TorchVecEnv(
            env,
            num_envs,
            seed=seed,
            device=device,
            scripted=scripted,
            state_vectors=state_vectors,
            window=window,
            score=score,
        )

    return factory
