"""Warm start (`--warm-start pursuit`): PPO begins from a policy cloned from a scripted player.

Before the first update, the scripted `teacher` (a name of `gigastep.opponents.POLICIES`)
acts for every agent of the run's own batch of games for `steps` steps (the run's scripted
opponents play their rows as in training; the step is the run's, already compiled). The
learner's rows' observations, the teacher's actions on them and the episode starts are
recorded; the policy's observation normaliser takes in the observations, and the actor is
trained by cross-entropy on the teacher's actions (whole sequences replayed from their start
with `ActorCritic.evaluate`, so recurrent cores learn as they act) for `updates` Adam steps.
The accuracy of the policy's most likely action on the held-out last eighth of the games is
measured before and after. The games are then reset, and PPO starts.

The result (`WarmStart`) is written to the run folder as `warm_start.json` and logged on
stderr: a warm-started run is its own row of any results table, never a silent default.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

__all__ = ["DEMONSTRATION_STEPS", "WarmStart", "clone", "demonstrations", "warm_start"]

DEMONSTRATION_STEPS = 64
"""Steps of the run's games the teacher plays for the demonstrations."""


@dataclass(frozen=True)
class WarmStart:
    """What a warm start did (`warm_start.json`)."""

    teacher: str
    rows: int
    """Agent rows of the demonstrations (held-out ones included)."""
    steps: int
    samples: int
    """Agent-steps of the learner's team, alive, used for training (held-out ones excluded)."""
    updates: int
    seconds: float
    """Wall time of collection and training."""
    accuracy_before: float
    """Held-out accuracy of the untrained policy's most likely action."""
    accuracy: float
    """Held-out accuracy after cloning."""

    def to_dict(self) -> dict:
        return asdict(self)


def demonstrations(venv, teacher: str, steps: int, seed: int) -> dict[str, torch.Tensor]:
    """`steps` steps of every game of `venv` (a `TorchVecEnv`, reset first) with the actions of
    the scripted `teacher` for every agent (scripted opponents inside the step play their own
    rows, as in training): {"obs" [T, B, n, L] float32, "actions" [T, B, n] int64, "first"
    [T, B] bool, "alive" [T, B, n] bool (alive before the step)}."""
    import jax

    from gigastep.adapters.torch import jax_to_torch
    from gigastep.opponents import get_policy

    config = venv.config
    if not config.discrete_actions:
        raise ValueError(
            "--warm-start clones a scripted player's discrete actions; this game has "
            "continuous actions (use a scenario with the _disc suffix)"
        )
    if config.obs_type != "vector":
        raise ValueError(
            f"--warm-start needs vector observations, got {config.obs_type!r} "
            "(use a scenario with the _vec suffix)"
        )
    policy = get_policy(teacher)
    act = jax.jit(jax.vmap(lambda s, k: policy(config, s, k)))
    key = jax.random.PRNGKey(seed)
    obs = venv.reset()
    b = obs.shape[0]
    first = torch.ones(b, dtype=torch.bool, device=obs.device)
    dead = torch.zeros(obs.shape[:2], dtype=torch.bool, device=obs.device)
    out: dict[str, list] = {"obs": [], "actions": [], "first": [], "alive": []}
    for t in range(steps):
        keys = jax.random.split(jax.random.fold_in(key, t), b)
        actions = jax_to_torch(act(venv.states, keys)).to(torch.int64)
        out["obs"].append(obs)
        out["actions"].append(actions)
        out["first"].append(first)
        out["alive"].append(first[:, None] | ~dead)
        obs, _, dead, first, _ = venv.step(actions.to(torch.int32))
    return {k: torch.stack(v) for k, v in out.items()}


def _accuracy(net, obs, types, first, actions, alive) -> float:
    with torch.no_grad():
        t, n = first.shape
        h0 = net.core.initial_state(n, obs.device)
        x = net.encoder(obs.reshape(t * n, -1), types.repeat(t, 1)).view(t, n, -1)
        y, _ = net.core.sequence(x, first, h0)
        logits = net._joint(net.heads(y)[..., : net.spec.n_action_outputs])
        hits = (logits.argmax(-1) == actions) & alive
        return float(hits.sum()) / max(int(alive.sum()), 1)


def clone(
    net,
    obs_norm,
    demos: dict[str, torch.Tensor],
    types: torch.Tensor,
    test: torch.Tensor,
    teacher: str,
    *,
    seed: int,
    updates: int = 200,
    lr: float = 1e-3,
    minibatch: int = 256,
) -> WarmStart:
    """Train `net`'s actor (and `obs_norm`'s statistics) on the teacher's actions (module doc).

    Args:
        net: the learner's `ActorCritic` (changed in place).
        obs_norm: its `ObsNormalizer` (takes in the training rows' observations).
        demos: the learner's rows of `demonstrations`: obs [T, N, L] (raw), actions [T, N],
            first [T, N], alive [T, N].
        types: float32 [N, K], the rows' type one-hots.
        test: bool [N], the held-out rows (whole games: accuracy is measured on them).
        teacher: the scripted player's name (recorded).
        seed: the minibatches' torch generator.
        updates: Adam steps. minibatch: rows (whole sequences) per step.

    Returns:
        A `WarmStart` (its `seconds` count the training only).
    """
    start = time.perf_counter()
    raw, actions, first, alive = (demos[k] for k in ("obs", "actions", "first", "alive"))
    t, n = first.shape
    device = raw.device
    train_rows = torch.nonzero(~test).squeeze(-1)
    test_rows = torch.nonzero(test).squeeze(-1)
    obs_norm.add(raw[:, train_rows].reshape(-1, raw.shape[-1]), alive[:, train_rows].reshape(-1))
    obs_norm.commit()
    obs = obs_norm(raw.reshape(t * n, -1)).view(t, n, -1)

    def accuracy() -> float:
        r = test_rows
        return _accuracy(net, obs[:, r], types[r], first[:, r], actions[:, r], alive[:, r])

    before = accuracy()
    optimiser = torch.optim.Adam(net.parameters(), lr=lr)
    generator = torch.Generator(device).manual_seed(seed)
    per_step = min(minibatch, len(train_rows))
    for _ in range(updates):
        pick = torch.randperm(len(train_rows), generator=generator, device=device)[:per_step]
        idx = train_rows[pick]
        logp, _, _ = net.evaluate(
            obs[:, idx],
            types[idx],
            first[:, idx],
            net.initial_state(len(idx), device),
            actions[:, idx],
            _central_zeros(net, t, len(idx), device),
        )
        mask = alive[:, idx]
        loss = -torch.where(mask, logp, 0.0).sum() / mask.sum().clamp(min=1)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
    return WarmStart(
        teacher=teacher,
        rows=int(test.numel()),
        steps=t,
        samples=int(alive[:, train_rows].sum()),
        updates=updates,
        seconds=time.perf_counter() - start,
        accuracy_before=before,
        accuracy=accuracy(),
    )


def warm_start(venv, learners, teacher: str, seed: int, updates: int) -> list[dict]:
    """Clone `teacher` into every learner on its rows of `venv`'s games (both trainers).

    Args:
        venv: the run's `TorchVecEnv` (reset here; reset it again before training).
        learners: (name, net, obs_norm, rows, types) per learner: its `ActorCritic`,
            `ObsNormalizer`, `baselines.matchmaking.Rows` in `venv`'s batch and type one-hots
            [N, K].
        teacher: a scripted player's name. seed: the demonstrations' and minibatches' seed.
        updates: Adam steps per learner.

    Returns:
        One `WarmStart.to_dict()` per learner, with its ``learner`` name.
    """
    demos = demonstrations(venv, teacher, DEMONSTRATION_STEPS, seed)
    b = demos["first"].shape[1]
    held_out = b - max(b // 8, 1)  # the last eighth of the games
    flat = {k: v.flatten(1, 2) if v.dim() > 2 else v for k, v in demos.items()}
    out = []
    for name, net, obs_norm, rows, types in learners:
        mine = {
            "obs": flat["obs"].index_select(1, rows.index),
            "actions": flat["actions"].index_select(1, rows.index),
            "alive": flat["alive"].index_select(1, rows.index),
            "first": flat["first"].index_select(1, rows.game),
        }
        test = rows.game >= held_out
        result = clone(net, obs_norm, mine, types, test, teacher, seed=seed, updates=updates)
        out.append({"learner": name, **result.to_dict()})
    return out


def _central_zeros(net, t: int, n: int, device):
    """A central critic's input of zeros (its value is not trained by cloning), or None."""
    spec = net.spec
    if not spec.central_critic:
        return None
    return torch.zeros(t, n, spec.state_size + spec.n_slots + spec.n_types, device=device)
