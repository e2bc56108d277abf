"""Random-but-interesting states, actions and noise for the reference-equivalence tests.

Plain NumPy generators seeded by a `np.random.Generator`, so a failing case is reproduced from
its seed alone. States are "reachable-looking" (dead agents have health 0 and no locks; locks
only between enemies) but deliberately crowded: agents are clustered so that collisions,
detections, locks and kills happen; some sit near the map edges or near boxes; some point at
an enemy; tracking counts sit near the damage thresholds; waypoints are placed on agents.
"""

from __future__ import annotations

import math

import numpy as np

from tests.reference import scaled_boxes

TRACKED_CHOICES = np.array([0, 0, 0, 0, 1, 2, 3, 3, 4, 5, 8, 9, 10, 11, 20], np.int32)


def _position(config, rng, centres, placed, boxes):
    """One (x, y, z) drawn from a mixture: cluster, near a placed agent, edge, box, uniform."""
    lx, ly, lz = config.limit_x, config.limit_y, config.z_max
    scale = 1.0  # detection and damage ranges are absolute, so clusters are too
    kind = rng.choice(
        ["cluster", "partner", "edge", "box", "uniform"], p=[0.5, 0.15, 0.12, 0.08, 0.15]
    )
    z = float(rng.choice([0.0, 0.0, 1.0, 2.0, 2.0, lz, rng.uniform(0, lz)]))
    z = float(np.clip(z + rng.normal(0, 0.15) * (rng.random() < 0.5), 0, lz))
    if kind == "partner" and placed:
        x0, y0, z0 = placed[rng.integers(len(placed))]
        return (
            x0 + rng.normal(0, 0.2),
            y0 + rng.normal(0, 0.2),
            float(np.clip(z0 + rng.normal(0, 0.25), 0, lz)),
        )
    if kind == "edge":
        t = rng.uniform(-0.02, 0.3) * scale
        x, y = rng.uniform(0, lx), rng.uniform(0, ly)
        side = rng.integers(4)
        if side == 0:
            x = t
        elif side == 1:
            x = lx - t
        elif side == 2:
            y = t
        else:
            y = ly - t
        if rng.random() < 0.1:
            x = 0.0 if side == 0 else x  # exactly on the boundary (not out of bounds)
        return x, y, z
    if kind == "box" and boxes:
        x1, y1, x2, y2 = boxes[rng.integers(len(boxes))]
        x = rng.uniform(float(x1) - 0.3 * scale, float(x2) + 0.3 * scale)
        y = rng.uniform(float(y1) - 0.3 * scale, float(y2) + 0.3 * scale)
        return x, y, z
    if kind in ("cluster", "partner", "box"):
        cx, cy = centres[rng.integers(len(centres))]
        return cx + rng.normal(0, 0.9 * scale), cy + rng.normal(0, 0.9 * scale), z
    return rng.uniform(0, lx), rng.uniform(0, ly), z


def random_state(config, rng: np.random.Generator, p_dead: float = 0.2) -> dict:
    """A crowded random state as a dict of NumPy arrays (keys of reference.STATE_KEYS)."""
    n = config.n_agents
    lx, ly = config.limit_x, config.limit_y
    teams = np.asarray(config.teams)
    map_idx = int(rng.integers(len(config.maps)))
    boxes = [b for b in scaled_boxes(config, map_idx) if b[2] > b[0]]
    centres = [
        (rng.uniform(0.2 * lx, 0.8 * lx), rng.uniform(0.2 * ly, 0.8 * ly))
        for _ in range(int(rng.integers(1, 3)))
    ]
    placed: list[tuple[float, float, float]] = []
    for _ in range(n):
        placed.append(_position(config, rng, centres, placed, boxes))
    x = np.array([p[0] for p in placed], np.float32)
    y = np.array([p[1] for p in placed], np.float32)
    z = np.array([p[2] for p in placed], np.float32)

    max_health = np.asarray(config.max_health, np.float32)
    alive = rng.random(n) > p_dead
    if rng.random() < 0.1:  # sometimes a whole team is already dead
        alive[teams == rng.integers(2)] = False
    health = np.where(
        rng.random(n) < 0.3, max_health, rng.uniform(0.02, 1.0, n) * max_health
    ).astype(np.float32)
    health[rng.random(n) < 0.15] = rng.uniform(0.005, 0.12)  # one damage tick from death
    health = np.where(alive, health, 0.0).astype(np.float32)

    heading = rng.uniform(-math.pi, math.pi, n).astype(np.float32)
    for i in range(n):  # point some agents at an enemy so locks and shots happen
        enemies = np.flatnonzero(teams != teams[i])
        if enemies.size and rng.random() < 0.45:
            k = enemies[rng.integers(enemies.size)]
            aim = math.atan2(y[k] - y[i], x[k] - x[i]) + rng.normal(0, 0.3)
            heading[i] = (aim + math.pi) % (2 * math.pi) - math.pi
    if rng.random() < 0.25:  # endgame: the last agent of a team heads out of the map
        team = int(rng.integers(2))
        members = np.flatnonzero(teams == team)
        if members.size and (alive & (teams != team)).any():
            last = int(rng.choice(members))
            alive[members] = False
            health[members] = 0.0
            alive[last], health[last] = True, max_health[last]
            x[last], y[last], heading[last] = 0.02, rng.uniform(1.0, ly - 1.0), -math.pi
    heading = np.where(heading >= math.pi, -math.pi, heading).astype(np.float32)
    v = rng.uniform(1.3, 3.2, n)
    v[rng.random(n) < 0.15] = 1.0  # the reset speed
    v[rng.random(n) < 0.15] = 1.3  # the speed floor

    tracked = rng.choice(TRACKED_CHOICES, (n, n)).astype(np.int32)
    enemy_pair = teams[:, None] != teams[None, :]
    both_alive = alive[:, None] & alive[None, :]
    tracked = np.where(enemy_pair & both_alive, tracked, 0).astype(np.int32)

    waypoint = np.zeros(4, np.float32)
    waypoint_time = np.float32(0.0)
    if config.enable_waypoints:
        size = config.waypoint_size
        u = rng.random()
        if (u < 0.55 and alive.any()) or (u < 0.75 and (~alive).any()):  # on top of an agent
            i = rng.choice(np.flatnonzero(alive if u < 0.55 and alive.any() else ~alive))
            wx = float(x[i]) - rng.uniform(0.0, size)
            wy = float(y[i]) - rng.uniform(0.0, size)
        else:
            wx, wy = rng.uniform(0, lx - size), rng.uniform(0, ly - size)
        waypoint = np.array([wx, wy, wx + size, wy + size], np.float32)
        waypoint_time = np.float32(
            rng.choice([0.0, 0.0, 0.05, rng.uniform(0.15, 10.0), rng.uniform(0.15, 10.0)])
        )
    max_len = config.max_episode_length
    if max_len is None:
        step = int(rng.integers(0, 1000))
    else:
        step = int(rng.choice([max_len - 1, max_len - 2, rng.integers(0, max_len)]))
    return {
        "x": x,
        "y": y,
        "z": z,
        "v": v.astype(np.float32),
        "heading": heading,
        "health": health,
        "alive": alive,
        "tracked": tracked,
        "map_idx": np.int32(map_idx),
        "waypoint": waypoint,
        "waypoint_time": waypoint_time,
        "aux_rewards_factor": np.float32(rng.choice([1.0, 1.0, 0.5, rng.uniform(0, 2)])),
        "step": np.int32(max(step, 0)),
        "returns": rng.normal(0, 1, n).astype(np.float32),
    }


def random_actions(config, rng: np.random.Generator) -> np.ndarray:
    """Continuous (n, 3) float32 with out-of-range, NaN and inf entries, or discrete (n,) int32
    including values outside 0..26."""
    n = config.n_agents
    if config.discrete_actions:
        return rng.integers(-3, 31, n).astype(np.int32)
    actions = rng.uniform(-1.3, 1.3, (n, 3))
    actions[rng.random((n, 3)) < 0.3] = rng.choice([-1.0, 0.0, 1.0])
    actions[rng.random((n, 3)) < 0.05] = np.nan
    actions[rng.random((n, 3)) < 0.02] = np.inf
    actions[rng.random((n, 3)) < 0.02] = -5.0
    return actions.astype(np.float32)


def random_noise(config, rng: np.random.Generator) -> dict:
    """Uniform step noise (contract layout); the waypoint appears about half of the time."""
    n = config.n_agents
    wp = rng.random(4).astype(np.float32)
    if rng.random() < 0.5:
        wp[0] = rng.uniform(0, config.waypoint_spawn_prob)
    return {
        "detection": rng.random((n, n)).astype(np.float32),
        "comm": rng.random((n, n)).astype(np.float32),
        "waypoint": wp.astype(np.float32),
    }


def stack_enemies(config, rng, state, actions) -> None:
    """Put an enemy exactly on top of an agent (same x, y, speed, heading, heading and throttle
    input; altitudes apart so they do not collide): they stay coincident after the step, the
    case where the 2023 library's `score <= 1 & cone` precedence bug shot outside the cone."""
    teams = np.asarray(config.teams)
    i = int(rng.integers(config.n_agents))
    enemies = np.flatnonzero(teams != teams[i])
    if not enemies.size:
        return
    j = int(rng.choice(enemies))
    for key in ("x", "y", "v", "heading"):
        state[key][j] = state[key][i]
    lz = config.z_max
    state["z"][i] = rng.uniform(0.0, lz / 2 - 0.6)
    state["z"][j] = state["z"][i] + rng.uniform(0.6, lz / 2)
    if config.discrete_actions:
        actions[j] = actions[i] = 3 * rng.integers(3) + 1 + 9 * rng.integers(3)  # no dive
    else:
        actions[i, 1] = actions[j, 1] = 0.0
        actions[j, 0], actions[j, 2] = actions[i, 0], actions[i, 2]


def random_case(config, rng: np.random.Generator, stacked: bool = False):
    """One (state, actions, noise) triple; `stacked` puts one enemy pair on the same x, y."""
    state = random_state(config, rng)
    actions = random_actions(config, rng)
    if stacked:
        stack_enemies(config, rng, state, actions)
    return state, actions, random_noise(config, rng)


def random_cases(config, seed: int, count: int, stacked: bool = False):
    """`count` (state, actions, noise) triples from one seed."""
    rng = np.random.default_rng(seed)
    return [random_case(config, rng, stacked) for _ in range(count)]
