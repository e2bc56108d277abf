"""The whole configuration of a PPO run: one dataclass, its presets, and its checks.

`PPOConfig` is the command line of `python -m baselines.ppo` (every field is a `--flag`, its
docstring is the help text); a preset (`--preset smoke|cpu|million|gpu`) picks other
defaults, and any flag after it overrides them. The resolved config is saved with the run
(`config.json`) and in every checkpoint.

Presets (their costs on the 2-core reference machine: docs/training.md, "Presets and what
they cost"):
    smoke    4 updates of 32 games of 5 vs 5 with a small S5 policy: the plumbing.
    cpu      the learning recipe of docs/results.md: 512 games x 32 steps per update,
             width 128, against pursuit (70%) and random (30%) with the auxiliary damage
             reward (reward_damage=1: measured at ~0.5-1% of the kill reward, nearly inert),
             constant learning rate 5e-4, stopped after 30 minutes of training, evaluated
             against pursuit and random (128 games each) every 100 updates.
    million  100,000 games of 5 vs 5: 1 M agents in every rollout, all played by the S5
             learner (self-play), 8 steps per update, minibatches sized to fit 24 GiB.
    gpu      16,384 games x 64 steps per update on one GPU (not measured here).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Literal

__all__ = ["PRESETS", "PPOConfig", "OpponentSpec", "parse_opponents", "preset", "validate"]


PolicyName = Literal["s5", "gru", "mlp"]
"""The recurrent cores (`baselines.policies`): S5, GRU, or an MLP without memory."""


@dataclass
class PPOConfig:
    """PPO with S5 (or GRU, MLP) recurrent policies on Gigastep, through the PyTorch bridge.

    IPPO shares one policy among the agents of each trained team (the agent type is a
    one-hot input); MAPPO adds a centralised critic on the global state vector.
    """

    # --- run -------------------------------------------------------------------------------
    scenario: str = "identical_5_vs_5_fobs_vec_void_disc"
    """Gigastep scenario name (`gigastep list --all`) or scenario file (file.toml#name)."""
    env: str = ""
    """EnvConfig overrides of the training game, `field=value,...` (JSON values); evaluations keep
    the scenario's reward weights. reward_damage=1 is ~0.5-1% of the kill reward (nearly inert;
    docs/training-options)."""
    out: str = "runs/ppo"
    """Run folder: metrics.csv/jsonl, config.json, checkpoints, curves, TensorBoard events."""
    seed: int = 0
    """Seed of torch, numpy and the environment's JAX key."""
    device: str = "cpu"
    """Torch and JAX device: cpu or cuda[:k]."""
    framework: Literal["torch", "jax"] = "torch"
    """torch: the PyTorch trainer (baselines.train); jax: the JAX twin (baselines.jax_ppo), one
    compiled program per update (vector or entity observations, one process)."""
    seeds: int = 1
    """Independent runs of this config with seeds seed, seed+1, ...; each in out/seed_<s> when
    > 1 (jax: vectorised over runs in one program; torch: one run after the other)."""
    updates: int = 200
    """Number of PPO updates (each: one rollout, then `epochs` passes over it)."""
    agent_steps: int = 0
    """Training budget in agent-steps (the log's `agent_steps`: every agent of every game, at
    every step); > 0 replaces --updates by the fewest updates that reach it,
    ceil(agent_steps / (rollout_steps x num_envs x agents of the game)). 0: --updates."""
    init_from: str = ""
    """Start from the policy of this checkpoint (fine-tuning): its weights and observation
    statistics, with a fresh optimiser, reward scaling and opponent pool, on this run's own
    scenario and opponents. The run's architecture flags must give the checkpoint's policy
    (an entity policy fits every team size). "": a fresh policy."""
    resume: bool = False
    """Continue the run in `out` from its latest checkpoint (the other flags must match)."""
    threads: int = 0
    """torch.set_num_threads (0: leave torch's default)."""
    compile: bool = False
    """torch.compile the acting step of every network player (inductor, fixed shapes). On the
    2-core CPU it cut the rollout's CPU time by ~10% for +25 s of warm-up (docs/training-speed);
    off by default; not measured on a GPU."""
    time_budget_s: float = 0.0
    """Stop after the update at which the run's training wall time reaches this (0: no limit);
    the run then ends as if --updates were reached. A run stopped by time is not
    reproducible bit for bit (where it stops depends on the machine's speed)."""

    # --- batch -----------------------------------------------------------------------------
    num_envs: int = 256
    """Games stepped together (every rollout holds num_envs x agents agents)."""
    rollout_steps: int = 32
    """Steps per rollout (the length of every replayed sequence)."""

    # --- algorithm and policy ---------------------------------------------------------------
    algo: Literal["ippo", "mappo"] = "ippo"
    """ippo: value head on the policy's core; mappo: a centralised critic on the state vector."""
    policy: PolicyName = "s5"
    """Recurrent core: s5 (S5 block, parallel scan in the update), gru, or mlp (no memory)."""
    encoder: Literal["auto", "mlp", "cnn", "both", "entity"] = "auto"
    """Observation encoder: mlp (vector obs), cnn (rgb obs), both (rgb_vector), entity
    (entity obs: shared row embedding, masked attention and pooling over the slots; one policy
    for every team size), auto: by obs."""
    hidden: int = 64
    """Width of the encoder, the core and the heads."""
    s5_state_dim: int = 32
    """S5 state size P per layer (P / 2 complex states)."""
    s5_layers: int = 1
    """Stacked S5 layers."""
    critic_hidden: int = 128
    """Width of the MAPPO critic's MLP."""
    separate_critic: bool = False
    """ippo: the value gets its own encoder and core (same kinds) instead of the actor's."""
    value_norm: bool = False
    """Train the critic on returns standardised by their running mean/std (MAPPO's ValueNorm)."""
    action_head: Literal["joint", "factored"] = "joint"
    """Discrete actions: joint (one 27-way categorical) or factored (turn, dive and throttle as
    three 3-way categoricals whose log-probabilities add; the same 27 actions)."""

    # --- training signal -------------------------------------------------------------------
    signal: Literal["individual", "team"] = "team"
    """team: every agent of a team, alive or dead, learns from the team's summed reward until the
    episode ends; individual: each agent learns from its own reward, its trajectory cut at its
    death (docs/training.md, "What the trainer learns from"; the default until 2026-12-06)."""
    shooter_credit: float = 0.0
    """Shaping, as a fraction C of reward_defeat_one_opponent: the training game pays the
    shooter C x the kill reward for a kill's worth of damage dealt (reward_damage) and charges
    an agent C x the kill reward when it dies (reward_agent_disabled); 0: off."""

    warm_start: str = ""
    """Clone a scripted player (random, circle, pursuit, evade) before PPO starts: its actions
    on 64 steps of the run's games, learned by cross-entropy (baselines.warmstart); the result
    is written to warm_start.json. "": off (PPO starts from a fresh policy)."""
    warm_start_updates: int = 100
    """Adam steps of the warm start's cross-entropy (256 whole sequences each)."""

    # --- opponents -------------------------------------------------------------------------
    team: int = 0
    """The trained team (ignored with --train-both)."""
    train_both: bool = False
    """Train both teams at once, each with its own policy, playing each other in every game."""
    opponent: str = "auto"
    """Opponent mix for the trained team, `kind[:weight],...`: self (the latest policy; symmetric
    scenarios), pool (past snapshots), random, circle, pursuit, evade, or a checkpoint path.
    auto: self:0.5,pool:0.25,pursuit:0.25 (symmetric), pursuit:0.5,random:0.5 (asymmetric)."""
    pool_size: int = 8
    """Snapshots kept in the opponent pool (oldest dropped first)."""
    pool_every: int = 10
    """Updates between two snapshots of the learner added to the pool."""
    pool_players: int = 2
    """Snapshots sampled (uniformly, per rollout) to play the pool's share of the batch."""

    # --- PPO -------------------------------------------------------------------------------
    epochs: int = 4
    """Passes over each rollout."""
    minibatches: int = 4
    """Minibatches per pass; each holds whole sequences of a random subset of the agents."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip: float = 0.2
    """PPO ratio clip."""
    clip_value: bool = False
    """Also clip the value update around the rollout's values (by `clip`)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus."""
    lr: float = 3e-4
    """Adam learning rate."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over `updates` and `time_budget_s` (if set)."""
    max_grad_norm: float = 0.5
    """Gradient clipping (global L2 norm) per minibatch; 0 disables it."""
    target_kl: float | None = None
    """Stop an update's epochs early once the approximate KL exceeds this."""
    norm_adv: bool = True
    """Normalise advantages per minibatch (over alive agents)."""
    norm_obs: bool = True
    """Running mean/variance normalisation of vector observations (and state vectors)."""
    scale_rewards: bool = True
    """Divide rewards by the running std of the discounted return (return-based scaling)."""

    # --- evaluation ------------------------------------------------------------------------
    eval_every: int = 0
    """Updates between evaluations against scripted opponents (and one at the end; 0: none)."""
    eval_games: int = 64
    """Games per opponent in each evaluation (the training game with the scenario's reward
    weights)."""
    eval_opponents: str = "auto"
    """Scripted opponents of the evaluations, `name,...`; auto: the mix's (else random,pursuit)."""

    # --- outputs ---------------------------------------------------------------------------
    checkpoint_every: int = 10
    """Updates between checkpoints (one is always written at the end)."""
    keep_checkpoints: int = 3
    """Numbered checkpoints kept besides checkpoint.pt (0: keep all)."""
    tensorboard: bool = True
    """Write TensorBoard events when the tensorboard package is installed."""
    plots: bool = True
    """Write learning-curve PNGs (matplotlib) at every checkpoint."""
    progress: bool = True
    """Show a progress bar with the live agent-steps/s and win rate."""


@dataclass(frozen=True)
class OpponentSpec:
    """One entry of the opponent mix: a kind and its share of the batch."""

    kind: str
    """self, pool, a scripted policy name, or "file"."""
    weight: float
    path: str | None = None
    """The checkpoint of a "file" opponent."""
    tail: int = 1
    """Path components of a "file" opponent's label: the fewest that tell it from the mix's
    other files (`runs/a/checkpoint.pt` and `runs/b/checkpoint.pt` are `file:a/checkpoint` and
    `file:b/checkpoint`)."""

    @property
    def label(self) -> str:
        """Name used in metrics (win_rate/<label>)."""
        if self.kind != "file":
            return self.kind
        parts = os.path.splitext(os.path.normpath(str(self.path)))[0].split(os.sep)
        return "file:" + "/".join(parts[-self.tail :])


SCRIPTED = ("random", "circle", "pursuit", "evade")
_KINDS = ("self", "pool", *SCRIPTED)


def parse_opponents(text: str, symmetric: bool) -> tuple[OpponentSpec, ...]:
    """Parse `kind[:weight],...` (see `PPOConfig.opponent`); weights are normalised to 1.

    Raises:
        ValueError: an unknown kind (with the closest names), a bad weight, `self`/`pool` in
            an asymmetric scenario, or a checkpoint path that does not exist.
    """
    from gigastep.game.types import closest

    if text == "auto":
        text = "self:0.5,pool:0.25,pursuit:0.25" if symmetric else "pursuit:0.5,random:0.5"
    specs = []
    for token in filter(None, (t.strip() for t in text.split(","))):
        name, weight = token, 1.0
        head, sep, tail = token.rpartition(":")
        if sep:
            try:
                name, weight = head, float(tail)
            except ValueError:
                pass  # a path with a colon and no weight
        if not math.isfinite(weight) or weight <= 0:
            raise ValueError(f"opponent weight must be a positive number, got {token!r}")
        if name in _KINDS:
            if name in ("self", "pool") and not symmetric:
                raise ValueError(
                    f"opponent {name!r} needs a symmetric scenario (both teams of the same "
                    "agent types); use scripted or checkpoint opponents, or --train-both"
                )
            specs.append(OpponentSpec(name, weight))
        elif name.endswith(".pt") or os.sep in name or os.path.exists(name):
            if not os.path.isfile(name):
                raise ValueError(f"opponent checkpoint {name!r} does not exist")
            specs.append(OpponentSpec("file", weight, name))
        else:
            raise ValueError(
                f"unknown opponent {name!r}; expected one of {list(_KINDS)} or a checkpoint "
                f"path (closest: {closest(name, _KINDS)})"
            )
    if not specs:
        raise ValueError(f"the opponent mix {text!r} is empty")
    specs = _distinct_file_labels(specs)
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"opponent mix {text!r} names a kind twice")
    total = sum(s.weight for s in specs)
    return tuple(dataclasses.replace(s, weight=s.weight / total) for s in specs)


def _distinct_file_labels(specs: list[OpponentSpec]) -> list[OpponentSpec]:
    """`specs` with each file opponent's label as long as it takes to tell the files apart
    (the same file twice keeps one label, refused as a kind named twice)."""
    files = [s for s in specs if s.kind == "file"]
    paths = {os.path.normpath(str(s.path)) for s in files}
    for tail in range(1, 1 + max((p.count(os.sep) + 1 for p in paths), default=1)):
        labelled = [dataclasses.replace(s, tail=tail) for s in files]
        if len({s.label for s in labelled}) == len(paths):
            break
    swap = dict(zip(map(id, files), labelled, strict=True)) if files else {}
    return [swap.get(id(s), s) for s in specs]


PRESETS: dict[str, dict] = {
    "smoke": dict(
        num_envs=32,
        rollout_steps=16,
        updates=4,
        hidden=32,
        s5_state_dim=16,
        epochs=2,
        minibatches=2,
        checkpoint_every=2,
        pool_every=2,
    ),
    "cpu": dict(
        num_envs=512,
        rollout_steps=32,
        hidden=128,
        lr=5e-4,
        minibatches=8,
        opponent="pursuit:0.7,random:0.3",
        env="reward_damage=1",
        anneal_lr=False,
        updates=1_000_000,
        time_budget_s=1800.0,
        eval_every=100,
        eval_games=128,
    ),
    "million": dict(
        num_envs=100_000,
        rollout_steps=8,
        updates=3,
        epochs=1,
        minibatches=20,
        opponent="self",
        checkpoint_every=1,
        keep_checkpoints=1,
        plots=False,
    ),
    "gpu": dict(
        num_envs=16_384,
        rollout_steps=64,
        updates=500,
        device="cuda",
        epochs=4,
        minibatches=8,
        hidden=128,
        s5_state_dim=64,
        eval_every=50,
        eval_games=512,
    ),
}
"""Named defaults (costs in the module docstring); flags given after --preset override them."""


def preset(name: str | None) -> PPOConfig:
    """The default config of a preset (None: the dataclass defaults)."""
    if name is None:
        return PPOConfig()
    if name not in PRESETS:
        from gigastep.game.types import closest

        raise ValueError(
            f"unknown preset {name!r}; expected one of {sorted(PRESETS)} "
            f"(closest: {closest(name, PRESETS)})"
        )
    return PPOConfig(**PRESETS[name])


def _positive(config: PPOConfig, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"--{name.replace('_', '-')} must be a positive integer, got {value!r}"
            )


def _check_env_fields(text: str) -> None:
    """--env's syntax and field names, before the run folder exists (values are checked when
    the game is made)."""
    from gigastep.game.types import check_fields

    from .envs import parse_overrides

    try:
        check_fields(parse_overrides(text), "--env")
    except TypeError as err:  # one line with exit 2, like every other bad flag
        raise ValueError(str(err)) from None


def validate(config: PPOConfig) -> None:
    """Check the numbers of a config that do not need the scenario (before any compute).

    Raises:
        ValueError: naming the flag, the value given and what is expected.
    """
    _positive(
        config,
        "updates",
        "num_envs",
        "rollout_steps",
        "hidden",
        "epochs",
        "minibatches",
        "s5_layers",
        "critic_hidden",
        "pool_size",
        "pool_every",
        "pool_players",
        "checkpoint_every",
        "eval_games",
        "seeds",
        "warm_start_updates",
    )
    if not re.fullmatch(r"cpu|cuda(:\d+)?", str(config.device)):
        raise ValueError(
            f"--device must be cpu, cuda or cuda:K (K a GPU index), got {config.device!r}"
        )
    if config.framework not in ("torch", "jax"):
        raise ValueError(f"--framework must be torch or jax, got {config.framework!r}")
    if isinstance(config.eval_every, bool) or not isinstance(config.eval_every, int):
        raise ValueError(f"--eval-every must be an integer >= 0, got {config.eval_every!r}")
    if config.eval_every < 0:
        raise ValueError(f"--eval-every must be >= 0 (0: no evaluation), got {config.eval_every}")
    if config.eval_opponents != "auto":
        names = [t.strip() for t in config.eval_opponents.split(",") if t.strip()]
        bad = [n for n in names if n not in SCRIPTED]
        if bad or not names:
            raise ValueError(
                f"--eval-opponents must be auto or scripted names from {list(SCRIPTED)}, "
                f"got {config.eval_opponents!r}"
            )
    if config.policy == "s5" and (config.s5_state_dim < 2 or config.s5_state_dim % 2):
        raise ValueError(f"--s5-state-dim must be even and >= 2, got {config.s5_state_dim}")
    for name, lo, hi in (("gamma", 0, 1), ("gae_lambda", 0, 1)):
        value = getattr(config, name)
        if not lo <= value <= hi:
            raise ValueError(f"--{name.replace('_', '-')} must be in [{lo}, {hi}], got {value}")
    for name in ("clip", "lr"):
        if not 0 < getattr(config, name) < math.inf:
            raise ValueError(f"--{name} must be > 0 and finite, got {getattr(config, name)}")
    for name in ("vf_coef", "ent_coef", "max_grad_norm"):
        if not 0 <= getattr(config, name) < math.inf:
            raise ValueError(
                f"--{name.replace('_', '-')} must be >= 0 and finite, got {getattr(config, name)}"
            )
    if config.target_kl is not None and not 0 < config.target_kl < math.inf:
        raise ValueError(f"--target-kl must be > 0 and finite, or None, got {config.target_kl}")
    if isinstance(config.seed, bool) or not isinstance(config.seed, int):
        raise ValueError(f"--seed must be an integer, got {config.seed!r}")
    last = config.seed + config.seeds - 1
    if config.seed < 0 or last > 2**32 - 1:
        raise ValueError(
            f"--seed {config.seed} with --seeds {config.seeds} runs seeds {config.seed}..{last}; "
            f"seeds must lie in 0..2**32 - 1 = {2**32 - 1} (a PRNG key keeps 32 bits, so others "
            f"repeat the games of a seed in that range)"
        )
    if config.separate_critic and config.algo != "ippo":
        raise ValueError(
            f"--separate-critic gives the ippo value head its own network; --algo "
            f"{config.algo}'s central critic is already separate (drop one of the two)"
        )
    if config.action_head not in ("joint", "factored"):
        raise ValueError(f"--action-head must be joint or factored, got {config.action_head!r}")
    if config.signal not in ("individual", "team"):
        raise ValueError(f"--signal must be individual or team, got {config.signal!r}")
    if config.env:
        _check_env_fields(config.env)
    credit = config.shooter_credit
    if isinstance(credit, bool) or not isinstance(credit, int | float):
        raise ValueError(f"--shooter-credit must be a number >= 0, got {credit!r}")
    if not 0 <= credit < math.inf:
        raise ValueError(f"--shooter-credit must be >= 0 and finite (0: off), got {credit}")
    if credit:
        from .envs import parse_overrides

        clash = sorted(
            {"reward_damage", "reward_agent_disabled"} & set(parse_overrides(config.env))
        )
        if clash:
            raise ValueError(
                f"--shooter-credit {credit} sets {' and '.join(clash)} of the training game; "
                f"--env {config.env!r} sets them too (drop one of the two)"
            )
    if config.warm_start and config.warm_start not in SCRIPTED:
        from gigastep.game.types import closest

        raise ValueError(
            f"--warm-start must be a scripted player {list(SCRIPTED)} or '' (off), got "
            f"{config.warm_start!r} (closest: {closest(config.warm_start, SCRIPTED)})"
        )
    steps = config.agent_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"--agent-steps must be an integer >= 0 (0: --updates), got {steps!r}")
    if config.init_from and config.warm_start:
        raise ValueError(
            f"--init-from {config.init_from!r} starts from a trained policy and --warm-start "
            f"{config.warm_start!r} from a cloned one (drop one of the two)"
        )
    if config.team not in (0, 1):
        raise ValueError(f"--team must be 0 or 1, got {config.team}")
    for name in ("keep_checkpoints", "threads"):
        if isinstance(getattr(config, name), bool) or not isinstance(getattr(config, name), int):
            raise ValueError(
                f"--{name.replace('_', '-')} must be an integer >= 0, got {getattr(config, name)!r}"
            )
    if config.keep_checkpoints < 0 or config.threads < 0:
        raise ValueError("--keep-checkpoints and --threads must be >= 0")
    if not 0 <= config.time_budget_s < math.inf:
        raise ValueError(f"--time-budget-s must be >= 0 and finite, got {config.time_budget_s}")


def budget_updates(config: PPOConfig, n_agents: int) -> int:
    """The number of updates a run trains: --updates, or with --agent-steps N the fewest
    updates of rollout_steps x num_envs x n_agents agent-steps each that reach N."""
    if not config.agent_steps:
        return config.updates
    per_update = config.rollout_steps * config.num_envs * n_agents
    return max(1, -(-config.agent_steps // per_update))


def to_dict(config: PPOConfig) -> dict:
    return dataclasses.asdict(config)


def from_dict(values: dict) -> PPOConfig:
    """A config from `to_dict` output (unknown keys are an error: a changed config schema)."""
    known = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"config has unknown fields {unknown}")
    return PPOConfig(**values)


def matmul_precision() -> dict[str, str]:
    """The float32 matmul precision the run computes with: JAX's default ("default" lets XLA
    use TF32 on GPUs that have it; "highest" is full float32) and torch's, if loaded."""
    import jax

    precision = getattr(jax.config, "jax_default_matmul_precision", None)
    out = {"jax_default_matmul_precision": str(precision or "default")}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_float32_matmul_precision"] = torch.get_float32_matmul_precision()
    return out


def dumps(config: PPOConfig, **extra) -> str:
    """The run's config.json: the config, the matmul precision it ran at, and `extra`."""
    values = {**to_dict(config), "matmul_precision": matmul_precision(), **extra}
    return json.dumps(values, indent=2, sort_keys=True)
