"""A memory probe: a tiny task that only a policy with memory can solve.

Each episode shows one of `cues` cues (a one-hot) on its first step only; `delay` steps
later a "decide now" flag is set, and the action taken then earns reward 1 if it is the cue's
index, else 0. After the decision the episode goes on for a random 0 to `tail` steps, so
episodes have random lengths and start at random places of a rollout: a policy must carry the
cue across steps and must not carry it across episodes. A memoryless policy cannot beat
chance (1 / cues) at the decision step.

It runs on the same PPO code as Gigastep (`baselines.train.Trainer`) through the step
interface of `baselines.envs`: one agent per game, discrete actions (27, as Gigastep; only the
first `cues` can be right).

    python -m baselines.probes --policy s5     # ~1 min on 2 cores; prints the success rate
    python -m baselines.probes --policy mlp    # stays near 1 / cues
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile

import torch

from .config import PolicyName, PPOConfig
from .envs import GameSpec

__all__ = ["MemoryProbe", "evaluate_probe", "probe_game", "train_probe"]


class MemoryProbe:
    """`num_envs` episodes of the probe stepped together (the `baselines.envs` interface)."""

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        device="cpu",
        cues: int = 4,
        delay: int = 5,
        tail: int = 3,
    ):
        if cues < 2 or cues > 27 or delay < 1 or tail < 0:
            raise ValueError(
                f"need 2 <= cues <= 27, delay >= 1, tail >= 0; got cues={cues}, "
                f"delay={delay}, tail={tail}"
            )
        self.num_envs, self.cues, self.delay, self.tail = num_envs, cues, delay, tail
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.cue = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.length = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.returns = torch.zeros(num_envs, 1, device=self.device)
        self.last_obs: torch.Tensor | None = None  # set by reset()

    @property
    def obs_size(self) -> int:
        return self.cues + 1

    def _new_episodes(self, mask: torch.Tensor) -> None:
        b = self.num_envs
        cue = torch.randint(0, self.cues, (b,), generator=self.generator, device=self.device)
        extra = torch.randint(0, self.tail + 1, (b,), generator=self.generator, device=self.device)
        self.cue = torch.where(mask, cue, self.cue)
        self.length = torch.where(mask, self.delay + 1 + extra, self.length)
        self.t = torch.where(mask, 0, self.t)
        self.returns = torch.where(mask[:, None], 0.0, self.returns)

    def _observe(self) -> torch.Tensor:
        obs = torch.zeros(self.num_envs, 1, self.obs_size, device=self.device)
        shown = (self.t == 0).float()
        obs[:, 0, : self.cues] = torch.nn.functional.one_hot(self.cue, self.cues) * shown[:, None]
        obs[:, 0, self.cues] = (self.t == self.delay).float()
        return obs

    def reset(self):
        self._new_episodes(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        self.last_obs = self._observe()
        return self.last_obs

    def step(self, actions: torch.Tensor):
        deciding = self.t == self.delay
        rewards = (deciding & (actions[:, 0].long() == self.cue)).float()[:, None]
        self.returns += rewards
        self.t += 1
        ended = self.t >= self.length
        final = self._observe()
        info = {
            "terminated": ended,
            "truncated": torch.zeros_like(ended),
            "final_obs": final,
            "episode_return": self.returns.clone(),
            "episode_length": self.t.clone(),
            "winner": torch.full_like(self.t, -1, dtype=torch.int32),
        }
        self._new_episodes(ended)
        self.last_obs = self._observe()
        dones = torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)
        return self.last_obs, rewards, dones, ended, info

    def snapshot(self) -> dict:
        if self.last_obs is None:
            raise RuntimeError("the probe has no state to snapshot before reset()")
        return {
            "generator": self.generator.get_state(),
            "cue": self.cue.clone(),
            "t": self.t.clone(),
            "length": self.length.clone(),
            "returns": self.returns.clone(),
            "last_obs": self.last_obs.clone(),
        }

    def restore(self, snapshot: dict) -> None:
        self.generator.set_state(snapshot["generator"])
        for name in ("cue", "t", "length", "returns", "last_obs"):
            setattr(self, name, snapshot[name].to(self.device).clone())

    def state_vector(self):
        raise ValueError("the memory probe has no global state vector: use --algo ippo")


def probe_game(cues: int = 4, delay: int = 5, tail: int = 3):
    """(GameSpec, factory) of the probe, for `baselines.train.Trainer`."""
    spec = GameSpec(
        name=f"memory_probe_c{cues}_d{delay}_t{tail}",
        scenario_hash=f"probe-{cues}-{delay}-{tail}",
        teams=(0,),
        type_keys=("agent",),
        obs_type="vector",
        vector_size=cues + 1,
        image_shape=None,
        discrete=True,
    )

    def factory(num_envs, seed, device, scripted=(), state_vectors=False, window=None):
        if window is not None:
            raise ValueError("the memory probe runs in one process")
        return MemoryProbe(num_envs, seed, device, cues, delay, tail)

    return spec, factory


PROBE_CONFIG = PPOConfig(
    num_envs=128,
    rollout_steps=16,
    updates=150,
    hidden=32,
    s5_state_dim=16,
    epochs=4,
    minibatches=4,
    lr=2e-3,
    ent_coef=0.01,
    gamma=0.9,
    norm_obs=False,
    scale_rewards=False,
    checkpoint_every=1000,
    tensorboard=False,
    plots=False,
    progress=False,
    opponent="auto",
)
"""The probe's training settings (~1 minute on 2 cores with the S5 policy)."""


@torch.no_grad()
def evaluate_probe(trainer, episodes: int = 1000, seed: int = 12345) -> float:
    """Greedy success rate of a trained probe policy on `episodes` fresh episodes."""
    learner = trainer.learners[0]
    probe = MemoryProbe(episodes, seed, trainer.device, **_probe_args(trainer.game))
    obs = probe.reset()
    first = torch.ones(episodes, dtype=torch.bool, device=trainer.device)
    h = learner.net.initial_state(episodes)
    done = torch.zeros(episodes, dtype=torch.bool, device=trainer.device)
    success = torch.zeros(episodes, device=trainer.device)
    for _ in range(probe.delay + 1):
        a, _, _, h = learner.net.act(
            learner.normalize(obs[:, 0]),
            learner.types[:1].expand(episodes, -1),
            first,
            h,
            deterministic=True,
        )
        obs, rewards, _, ended, _ = probe.step(a[:, None])
        success += rewards[:, 0] * (~done).float()
        done |= ended
        first = ended
    return float(success.mean())


def _probe_args(game: GameSpec) -> dict:
    cues, delay, tail = game.scenario_hash.split("-")[1:]
    return dict(cues=int(cues), delay=int(delay), tail=int(tail))


def train_probe(
    policy: PolicyName = "s5", updates: int | None = None, seed: int = 0, out=None, **overrides
):
    """Train a policy on the probe with the PPO trainer; returns (trainer, success rate)."""
    from .train import Trainer

    config = dataclasses.replace(PROBE_CONFIG, policy=policy, seed=seed, **overrides)
    if updates is not None:
        config = dataclasses.replace(config, updates=updates)
    with tempfile.TemporaryDirectory() as tmp:
        config = dataclasses.replace(config, out=str(out or tmp))
        trainer = Trainer(config, *probe_game())
        trainer.run()
    return trainer, evaluate_probe(trainer)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m baselines.probes", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--policy", choices=("s5", "gru", "mlp"), default="s5")
    parser.add_argument("--updates", type=int, default=PROBE_CONFIG.updates)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import time

    t0 = time.perf_counter()
    trainer, success = train_probe(args.policy, args.updates, args.seed)
    print(
        f"{args.policy}: success {success:.3f} after {trainer.update} updates "
        f"({time.perf_counter() - t0:.0f} s); chance {1 / _probe_args(trainer.game)['cues']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
