"""How much the damage shaping (`reward_damage`) weighs against the kill and win rewards.

Scripted matches (team 0 vs team 1, `gigastep.opponents`) are played twice from the same
seed, with `reward_damage=0` and with `reward_damage=W`: scripted policies do not see
rewards and the weight does not change the dynamics, so the two runs play the same games and
their reward difference is exactly the shaping term. Reported for team 0's agents, over every
agent-step of the rollout: sum |shaping| / sum |kill + win reward| and the net (signed) share.

Usage:
    python -m benchmarks.reward_shaping --games 256 --steps 200     # ~1 min CPU on 2 cores
"""

from __future__ import annotations

import argparse
import json

import torch

import gigastep
from gigastep.adapters.torch import ScriptedTeam, TorchVecEnv

MATCHES = (("pursuit", "random"), ("pursuit", "pursuit"), ("random", "pursuit"))


def _rewards(scenario: str, a: str, b: str, games: int, steps: int, weight: float, seed: int):
    """[steps, games, n] rewards of `a` (team 0) vs `b` (team 1), and the episodes ended."""
    env = gigastep.make(scenario, reward_damage=weight)
    scripted = (ScriptedTeam(0, games, 0, a), ScriptedTeam(0, games, 1, b))
    venv = TorchVecEnv(env, games, seed=seed, device="cpu", scripted=scripted)
    venv.reset()
    actions = torch.zeros(games, env.config.n_agents, dtype=torch.int32)  # ignored: scripted
    out, ended = [], 0
    for _ in range(steps):
        _, reward, _, done, _ = venv.step(actions)
        out.append(reward.clone())
        ended += int(done.sum())
    return torch.stack(out), ended


def measure(scenario: str, games: int, steps: int, weight: float = 1.0, seed: int = 7) -> list:
    """One row per scripted match (see the module doc)."""
    team0 = torch.tensor([t == 0 for t in gigastep.make(scenario).config.teams])
    rows = []
    for a, b in MATCHES:
        base, episodes = _rewards(scenario, a, b, games, steps, 0.0, seed)
        shaped, _ = _rewards(scenario, a, b, games, steps, weight, seed)
        shaping, kill = (shaped - base)[..., team0], base[..., team0]
        scale = float(kill.abs().sum())
        rows.append(
            {
                "match": f"{a} vs {b}",
                "episodes": episodes,
                "reward_damage": weight,
                "abs_share": float(shaping.abs().sum()) / scale,
                "net_share": float(shaping.sum()) / scale,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reward_shaping", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--scenario", default="identical_5_vs_5_fobs_vec_void_disc")
    parser.add_argument("--games", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--weight", type=float, default=1.0, help="reward_damage to measure")
    args = parser.parse_args(argv)
    for row in measure(args.scenario, args.games, args.steps, args.weight):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
