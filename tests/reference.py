"""A plain, obviously-correct NumPy reference of a Gigastep step and reset, from the rules
(docs/rules.md) alone.

This module is deliberately slow: every phase is a small function with explicit Python loops
over agents and pairs, in float32 where rounding matters. It exists so that the fast JAX step
and reset can be checked against it (tests/game/test_reference_equivalence.py,
tests/game/test_reference_reset.py) and an optimisation cannot silently change the game. Section
numbers refer to docs/rules.md; where §15 (this project's decisions) overrides §0-§14
the row is cited as "§15 row N".

Conventions (fixed by the lead's contract, all from §15):
  * `alive` is bool; `dones = ~alive'`; headings wrap with a floor-mod into [-pi, pi).
  * Ranges scale the radius: cs = d2 / (cone_depth^2 range_j^2),
    cds = d2 / (damage_cone_depth^2 damage_range_j^2) (+inf when the denominator is 0).
  * Pairwise matrices M[i, j]: row i = target / observed, column j = observer / shooter.
  * `seen[e, i]`: ego e sees agent i. A dead ego sees nothing; its observation is all zeros.
  * Noise: detection[i, j] (target i, observer j), comm[e, j] (ego e, sender j),
    waypoint = (appear, x, y, lifetime) uniforms in [0, 1).

Decisions this reference takes where the rules leave room (each is documented where used):
  * Waypoint hit (§4.2 with §15 row 10): only agents alive at the START of the step
    (`alive_pre`) collect it, tested with the post-dynamics positions, before any death check of
    this step (§4.2 comes before §4.3). An agent that collects it and dies in the same step
    still gets R_wp (§4.10 "an agent that dies during the step gets its full step reward").
  * Obstacle penalty (§15 row 6): `- R_obs * (oob_i + hitbox_i) * alive_pre_i`, i.e. every agent
    that was alive and this step left the map or is inside a box (both kill it).
  * Game won (§15 row 9): `gw_i = [other team had >= 1 alive before the step and 0 after]
    * alive'_i`.
  * Divide by team size (§15 row 8): by the number of agents of the agent's own team
    (config.team_sizes), not by the alive count.
  * Deterministic communication (§5.1 with §15 row 21): seen_i = exists j with tau_j = tau_e
    and HD[i, j]; or i is an alive teammate of e. Dead ego: sees nothing. HD[i, j] already
    requires j alive after the hazards (alive^1, §4.6), so a teammate killed by damage in this
    very step still shares what it detected this step (as in the 2023 library, §5.1); only the
    restriction to the ego's team is new (§15 row 21). In stochastic mode that teammate does
    not communicate (c_j >= 2 for alive'_j = 0).
  * The observation of §4.12 uses the HD matrix of this step (computed with alive^1, §4.6), as
    §4.12 states: a target killed by damage in this very step can still be "seen" this step.
  * Coincident agents (d2 = 0, §4.6 with §15 row 1): no special case. The bearing is
    wrap(atan2(0, 0) - h_j) = wrap(-h_j), so j locks a coincident enemy iff
    |wrap(-h_j)| < damage_cone_angle (the 2023 precedence bug locked it whatever the heading).
  * `returns` (when the state has it) accumulates this step's reward.
"""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32
PI = F32(math.pi)
TWO_PI = F32(2.0 * math.pi)

STATE_KEYS = (
    "x",
    "y",
    "z",
    "v",
    "heading",
    "health",
    "alive",
    "tracked",
    "map_idx",
    "waypoint",
    "waypoint_time",
    "aux_rewards_factor",
    "step",
    "returns",
)


# ------------------------------------------------------------------------------------------
# Small helpers
# ------------------------------------------------------------------------------------------


def wrap_angle(a) -> np.float32:
    """§15 row 3: floor-mod wrap into [-pi, pi): (a + pi) mod 2pi - pi (Python-style mod)."""
    return F32(np.mod(F32(a) + PI, TWO_PI) - PI)


def action_table() -> np.ndarray:
    """§3.2: the 27 x 3 table, row r = (a[(r // 3) % 3], a[r % 3], a[r // 9]), a = (-1, 0, 1)."""
    a = (-1.0, 0.0, 1.0)
    return np.array([[a[(r // 3) % 3], a[r % 3], a[r // 9]] for r in range(27)], dtype=np.float32)


def team_sizes(config) -> tuple[int, int]:
    teams = list(config.teams)
    return (sum(1 for t in teams if t == 0), sum(1 for t in teams if t == 1))


def scaled_boxes(config, map_idx: int) -> list[tuple[np.float32, ...]]:
    """§8.2: the boxes of map `map_idx`, scaled by limits / 10, padded with zero boxes to B."""
    spec = config.maps[int(map_idx)]
    sx = config.limit_x / 10.0
    sy = config.limit_y / 10.0
    boxes = [(F32(b[0] * sx), F32(b[1] * sy), F32(b[2] * sx), F32(b[3] * sy)) for b in spec.boxes]
    n_boxes = max(len(m.boxes) for m in config.maps)
    while len(boxes) < n_boxes:
        boxes.append((F32(0), F32(0), F32(0), F32(0)))
    return boxes


# ------------------------------------------------------------------------------------------
# §3 Dynamics of one agent
# ------------------------------------------------------------------------------------------


def action_inputs(config, action) -> tuple[np.float32, np.float32, np.float32]:
    """§3.3 step 1 (+ §15 "also part of this project's game"): table lookup for discrete
    actions (clipped to 0..26), NaN continuous inputs act as 0, everything clipped to [-1, 1]."""
    if config.discrete_actions:
        r = int(np.clip(int(action), 0, 26))
        u = action_table()[r]
    else:
        u = np.asarray(action, dtype=np.float32).copy()
        for k in range(3):
            if np.isnan(u[k]):
                u[k] = 0.0
    u = np.clip(u, -1.0, 1.0).astype(np.float32)
    return F32(u[0]), F32(u[1]), F32(u[2])


def move_agent(config, x, y, z, v, h, alive: bool, thrust, action):
    """§3.3 steps 2-7 for one agent. Dead agents (A = 0) keep x, y, z; v becomes max(v, v_min)."""
    dt = F32(config.dt)
    a = F32(1.0 if alive else 0.0)
    u_h, u_d, u_t = action_inputs(config, action)
    h_new = wrap_angle(F32(h) + dt * u_h * F32(config.heading_rate) * a)  # step 2
    v1 = F32(v) + dt * u_t * F32(config.throttle_rate) * a * F32(thrust)  # step 3
    v2 = v1 - dt * F32(config.drag) * v1 * v1 * a  # step 4 (drag)
    vx = v2 * F32(np.cos(h_new))  # step 5 uses the NEW heading
    vy = v2 * F32(np.sin(h_new))
    vz = F32(config.dive_rate) * u_d
    x_new = F32(x) + dt * vx * a  # step 6
    y_new = F32(y) + dt * vy * a
    z_new = F32(np.clip(F32(z) + dt * vz * a, F32(0.0), F32(config.z_max)))
    exchange = F32(config.dive_speed_exchange) * F32(config.gravity) * (F32(z) - z_new)
    v_sq = max(v2 * v2 + exchange, F32(config.min_speed) * F32(config.min_speed))  # step 7
    v_new = F32(np.sqrt(F32(v_sq)))
    return x_new, y_new, z_new, v_new, h_new


def dynamics(config, state, actions):
    """§4.1: apply §3 to every agent with its thrust."""
    n = config.n_agents
    out = {k: np.zeros(n, np.float32) for k in ("x", "y", "z", "v", "heading")}
    for i in range(n):
        moved = move_agent(
            config,
            state["x"][i],
            state["y"][i],
            state["z"][i],
            state["v"][i],
            state["heading"][i],
            bool(state["alive"][i]),
            config.thrust[i],
            actions[i],
        )
        for key, value in zip(("x", "y", "z", "v", "heading"), moved, strict=True):
            out[key][i] = value
    return out


# ------------------------------------------------------------------------------------------
# §4.2 Waypoints
# ------------------------------------------------------------------------------------------


def waypoints(config, state, pos, alive_pre, noise_waypoint):
    """§4.2 with §15 row 10 and the contract's noise layout.

    Returns (hit (n,) bool, new location (4,) float32, new remaining time () float32).
    """
    n = config.n_agents
    loc = np.asarray(state["waypoint"], np.float32).copy()
    time_left = F32(state["waypoint_time"])
    hit = np.zeros(n, bool)
    if not config.enable_waypoints:
        return hit, loc, time_left
    for i in range(n):  # step 1: inclusive hit test, only alive agents (§15 row 10)
        inside = loc[0] <= pos["x"][i] <= loc[2] and loc[1] <= pos["y"][i] <= loc[3]
        hit[i] = bool(time_left > 0) and inside and bool(alive_pre[i])
    time_left = F32(time_left - F32(config.dt))  # step 3: tick
    if hit.any():  # step 4: collected
        time_left = F32(0.0)
    u_appear, u_x, u_y, u_life = (F32(u) for u in noise_waypoint)
    appear = bool(time_left <= 0) and bool(u_appear < F32(config.waypoint_spawn_prob))  # step 5
    size = F32(config.waypoint_size)
    wx = u_x * (F32(config.limit_x) - size)  # step 6
    wy = u_y * (F32(config.limit_y) - size)
    lo, hi = (F32(t) for t in config.waypoint_lifetime)
    life = lo + u_life * (hi - lo)
    if appear:  # step 7
        loc = np.array([wx, wy, wx + size, wy + size], np.float32)
    time_left = F32(max(time_left, F32(0.0)) + (life if appear else F32(0.0)))
    return hit, loc, time_left


# ------------------------------------------------------------------------------------------
# §4.3-§4.5 Hazards: out of bounds, agent-agent collisions, boxes
# ------------------------------------------------------------------------------------------


def out_of_bounds(config, pos):
    """§4.3: strictly outside [0, limit_x] x [0, limit_y]."""
    n = config.n_agents
    lx, ly = F32(config.limit_x), F32(config.limit_y)
    oob = np.zeros(n, bool)
    for i in range(n):
        x, y = pos["x"][i], pos["y"][i]
        oob[i] = bool(x < 0 or x > lx or y < 0 or y > ly)
    return oob


def collisions(config, pos, alive):
    """§4.4: both agents of an alive pair with d2 < range^2 and |dz| < altitude die."""
    n = config.n_agents
    r2 = F32(config.collision_range) * F32(config.collision_range)
    col = np.zeros(n, bool)
    for i in range(n):
        for j in range(n):
            if i == j or not (alive[i] and alive[j]):
                continue
            d2 = sq_dist(pos, i, j)
            if d2 < r2 and abs(pos["z"][i] - pos["z"][j]) < F32(config.collision_altitude):
                col[i] = True
    return col


def hit_boxes(config, pos, map_idx):
    """§4.5: strictly inside a box of the current map; zero padding boxes never hit."""
    n = config.n_agents
    hitbox = np.zeros(n, bool)
    for i in range(n):
        for x1, y1, x2, y2 in scaled_boxes(config, map_idx):
            if x1 < pos["x"][i] < x2 and y1 < pos["y"][i] < y2:
                hitbox[i] = True
    return hitbox


def sq_dist(pos, i, j) -> np.float32:
    dx = F32(pos["x"][i]) - F32(pos["x"][j])
    dy = F32(pos["y"][i]) - F32(pos["y"][j])
    return F32(dx * dx + dy * dy)


# ------------------------------------------------------------------------------------------
# §4.6 Detection and shooting
# ------------------------------------------------------------------------------------------


def safe_score(d2, denom) -> np.float32:
    """d2 / denom, +inf where the denominator is 0 (an agent that cannot see / shoot)."""
    if denom == 0:
        return F32(np.inf)
    return F32(d2 / denom)


def bearing(pos, i, j) -> np.float32:
    """theta[i, j]: bearing of target i seen from j, relative to j's heading, in [-pi, pi)."""
    dx = F32(pos["x"][i]) - F32(pos["x"][j])
    dy = F32(pos["y"][i]) - F32(pos["y"][j])
    return wrap_angle(F32(np.arctan2(dy, dx)) - F32(pos["heading"][j]))


def detection(config, pos, alive1, noise_detection):
    """§4.6 with §15 rows 1, 2, 24. Returns (HD, S) as (n, n) bool, [target, observer]."""
    n = config.n_agents
    vc2 = F32(config.very_close_depth) * F32(config.very_close_depth)
    cd2 = F32(config.cone_depth) * F32(config.cone_depth)
    dd2 = F32(config.damage_cone_depth) * F32(config.damage_cone_depth)
    hd = np.zeros((n, n), bool)
    lock = np.zeros((n, n), bool)
    for i in range(n):  # target
        for j in range(n):  # observer / shooter
            can = config.teams[i] != config.teams[j] and bool(alive1[i]) and bool(alive1[j])
            if not can:
                continue
            d2 = sq_dist(pos, i, j)
            rng = F32(config.detection_range[j])
            drng = F32(config.damage_range[j])
            cs = safe_score(d2, cd2 * rng * rng)
            cds = safe_score(d2, dd2 * drng * drng)
            theta = bearing(pos, i, j)
            in_cone = bool(abs(theta) < F32(config.cone_angle))
            in_dcone = bool(abs(theta) < F32(config.damage_cone_angle))
            very_close = bool(d2 < vc2)
            can_shoot = bool(cds <= 1) and in_dcone  # §15 row 1
            if config.stochastic_obs:
                q = F32(np.clip(cs, 0.0, 1.0)) + F32(1.1) * F32(0.0 if in_cone else 1.0)
                sdet = bool(q < F32(noise_detection[i, j])) or can_shoot  # §15 row 2
            else:
                sdet = bool(cs <= 1) and in_cone
            hd[i, j] = very_close or sdet
            lock[i, j] = can_shoot and hd[i, j]
    return hd, lock


# ------------------------------------------------------------------------------------------
# §4.7 Tracking, damage and health
# ------------------------------------------------------------------------------------------


def tracking(config, tracked, lock):
    """§4.7 steps 1-2: tracked' = (tracked + S) S; Dmg = clip(tracked', min, max) - min."""
    n = config.n_agents
    new_tracked = np.zeros((n, n), np.int32)
    dmg = np.zeros((n, n), np.int32)
    lo, hi = int(config.min_tracking_steps), int(config.max_tracking_steps)
    for i in range(n):
        for j in range(n):
            s = int(lock[i, j])
            new_tracked[i, j] = (int(tracked[i, j]) + s) * s
            dmg[i, j] = min(max(int(new_tracked[i, j]), lo), hi) - lo
    return new_tracked, dmg


def health_update(config, health, takes, hit, alive1):
    """§4.7 step 8: clip((health - takes dps dt + heal dt + max_health hit) alive1, 0, max)."""
    n = config.n_agents
    dt = F32(config.dt)
    out = np.zeros(n, np.float32)
    for i in range(n):
        value = (
            F32(health[i])
            - F32(takes[i]) * F32(config.damage_per_second) * dt
            + F32(config.healing_per_second) * dt
            + F32(config.max_health[i]) * F32(1.0 if hit[i] else 0.0)
        )
        value = F32(value * F32(1.0 if alive1[i] else 0.0))
        out[i] = np.clip(value, F32(0.0), F32(config.max_health[i]))
    return out


# ------------------------------------------------------------------------------------------
# §4.9 Termination, §4.10 rewards
# ------------------------------------------------------------------------------------------


def alive_counts(config, alive) -> tuple[int, int]:
    a0 = sum(1 for i in range(config.n_agents) if alive[i] and config.teams[i] == 0)
    a1 = sum(1 for i in range(config.n_agents) if alive[i] and config.teams[i] == 1)
    return a0, a1


def episode_done(config, a0, a1, new_step) -> tuple[bool, bool, bool]:
    """§4.9. Returns (episode_done, team_elimination, time_limit)."""
    eliminated = (a0 == 0 and a1 == 0) or (
        config.episode_ends_one_team_dead and (a0 == 0 or a1 == 0)
    )
    time_up = config.max_episode_length is not None and new_step >= config.max_episode_length
    return bool(eliminated or time_up), bool(eliminated), bool(time_up)


def rewards(config, d, aux_factor):
    """§4.10 with §15 rows 6-9. `d` holds the step's intermediate quantities.

    Every term applies iff its weight is non-zero (§15 row 7; every term is finite, so a zero
    weight contributes exactly 0 and needs no gate); penalties are subtracted, so a negative
    penalty weight is a bonus. Returns (rewards (n,), the weighted terms before the aux factor,
    team-size division and alive_pre mask).
    """
    n = config.n_agents
    dt = F32(config.dt)
    a0_pre, a1_pre = d["counts_pre"]
    a0, a1 = d["counts_post"]
    d0, d1 = a0 - a0_pre, a1 - a1_pre
    sizes = team_sizes(config)
    out = np.zeros(n, np.float32)
    terms = {
        k: np.zeros(n, np.float32)
        for k in (
            "waypoint",
            "idle_reward",
            "defeat",
            "detection",
            "damage",
            "idle",
            "collision_agent",
            "collision_obstacle",
            "disabled",
            "game_won",
        )
    }
    for i in range(n):
        alive_post = F32(1.0 if d["alive"][i] else 0.0)
        alive_pre = F32(1.0 if d["alive_pre"][i] else 0.0)
        if config.teams[i] == 0:
            defeat = F32(d0 - d1) * alive_post / F32(a0 + 1)
            won = a1_pre >= 1 and a1 == 0
        else:
            defeat = F32(d1 - d0) * alive_post / F32(a1 + 1)
            won = a0_pre >= 1 and a0 == 0
        det = (
            F32(0.5) * F32(d["det_other"][i]) * dt - F32(0.2) * F32(d["detby"][i]) * dt
        ) * alive_post
        dmg = (F32(d["dmg_other"][i]) * dt - F32(0.5) * F32(d["takes"][i]) * dt) * alive_post
        t = terms
        t["waypoint"][i] = F32(config.reward_hit_waypoint) * F32(d["hit"][i])
        t["idle_reward"][i] = F32(config.idle_reward[i])
        t["defeat"][i] = F32(config.reward_defeat_one_opponent) * defeat
        t["detection"][i] = F32(config.reward_detection) * det
        t["damage"][i] = F32(config.reward_damage) * dmg
        t["idle"][i] = -F32(config.reward_idle) * F32(0.01) * dt * alive_post
        t["collision_agent"][i] = -F32(config.reward_collision_agent) * F32(d["col"][i])
        t["collision_obstacle"][i] = (
            -F32(config.reward_collision_obstacle)
            * F32(int(d["oob"][i]) + int(d["hitbox"][i]))
            * alive_pre
        )  # §15 row 6
        t["disabled"][i] = -F32(config.reward_agent_disabled) * (F32(1.0) - alive_post) * alive_pre
        t["game_won"][i] = F32(config.reward_game_won) * F32(1.0 if won else 0.0) * alive_post
        base = F32(0.0)
        for key in (
            "waypoint",
            "idle_reward",
            "defeat",
            "detection",
            "damage",
            "idle",
            "collision_agent",
            "collision_obstacle",
            "disabled",
        ):
            base = F32(base + t[key][i])
        total = F32(aux_factor) * base + t["game_won"][i]
        if config.divide_reward_by_team_size:  # §15 row 8
            total = total / F32(sizes[config.teams[i]])
        out[i] = F32(total * alive_pre)
    return out, terms


# ------------------------------------------------------------------------------------------
# §5.1 Visibility, §5.2 vector observation
# ------------------------------------------------------------------------------------------


def visibility(config, next_state, hd, noise_comm) -> np.ndarray:
    """§5.1 with §15 rows 19 and 21. Returns seen (n, n) bool, seen[e, i] = ego e sees i."""
    n = config.n_agents
    alive = next_state["alive"]
    teams = config.teams
    seen = np.zeros((n, n), bool)
    for e in range(n):
        if not alive[e]:
            continue  # a dead ego sees nothing (§15 rows 19, 21)
        if config.stochastic_comm:
            comm = np.zeros(n, bool)
            for j in range(n):
                dist = F32(np.sqrt(sq_dist(next_state, e, j)))
                c = (
                    F32(np.clip(dist / F32(config.communication_range), 0.0, 1.0))
                    + F32(2.0) * F32(0.0 if alive[j] else 1.0)
                    + F32(1.0 if teams[j] != teams[e] else 0.0)
                )
                comm[j] = bool(c <= F32(noise_comm[e, j]))
            for i in range(n):
                seen[e, i] = any((hd[i, j] or i == j) and comm[j] for j in range(n))
        else:
            for i in range(n):
                by_team = any(hd[i, j] and teams[j] == teams[e] for j in range(n))
                teammate = teams[i] == teams[e] and bool(alive[i])
                seen[e, i] = by_team or teammate
    return seen


def vector_order(config, next_state, seen_row, e) -> list[int]:
    """§5.2 ordering with §15 row 13: ego first, then seen agents by world distance (ties by
    index), then unseen agents by index; the first M."""
    n = config.n_agents
    others = [i for i in range(n) if i != e]
    seen_others = [i for i in others if seen_row[i]]
    unseen = [i for i in others if not seen_row[i]]
    seen_others.sort(key=lambda i: (float(np.sqrt(sq_dist(next_state, i, e))), i))
    order = [e, *seen_others, *unseen]
    m = min(n, config.max_agents_in_vec_obs)
    return order[:m]


def vector_observation(config, next_state, seen, e) -> np.ndarray:
    """§5.2 with §15 rows 3, 11, 13, 19, for ego e. float32 (L,)."""
    m = min(config.n_agents, config.max_agents_in_vec_obs)
    n_boxes = max(len(mp.boxes) for mp in config.maps)
    length = 9 * m + 5 * int(config.enable_waypoints) + 4 * n_boxes
    obs = np.zeros(length, np.float32)
    if not next_state["alive"][e]:
        return obs  # §15 row 19: a dead agent's observation is all zeros
    lx, ly, lz = F32(config.limit_x), F32(config.limit_y), F32(config.z_max)
    diag = F32(np.sqrt(lx * lx + ly * ly))
    s = next_state
    for row, i in enumerate(vector_order(config, next_state, seen[e], e)):
        if not seen[e, i]:
            continue  # unseen rows are all zeros
        if i == e:
            feats = [
                1.0,
                1.0,
                s["x"][e] / lx,
                s["y"][e] / ly,
                s["z"][e] / lz,
                s["heading"][e],
                s["v"][e] / diag,
            ]
        else:
            feats = [
                1.0,
                1.0 if config.teams[i] == config.teams[e] else 0.0,
                (s["x"][i] - s["x"][e]) / lx,
                (s["y"][i] - s["y"][e]) / ly,
                (s["z"][i] - s["z"][e]) / lz,
                wrap_angle(s["heading"][i] - s["heading"][e]),  # §15 row 3
                (s["v"][i] - s["v"][e]) / diag,
            ]
        feats += [s["health"][i], float(config.sprites[i])]
        obs[9 * row : 9 * row + 9] = np.array(feats, np.float32)
    k = 9 * m
    if config.enable_waypoints:  # §15 row 11
        active = bool(s["waypoint_time"] > 0)
        w = s["waypoint"]
        if active:
            obs[k : k + 4] = [
                (w[0] - s["x"][e]) / lx,
                (w[1] - s["y"][e]) / ly,
                (w[2] - s["x"][e]) / lx,
                (w[3] - s["y"][e]) / ly,
            ]
        obs[k + 4] = 1.0 if active else 0.0
        k += 5
    for x1, y1, x2, y2 in scaled_boxes(config, s["map_idx"]):
        obs[k : k + 4] = [x1 / lx, y1 / ly, x2 / lx, y2 / ly]
        k += 4
    return obs


# ------------------------------------------------------------------------------------------
# §5.3 RGB observation (with §15 rows 12, 14, 15, 16, 17, 19, 20), §8.3 prerendering
# ------------------------------------------------------------------------------------------

SPRITE_OFFSETS = {  # §5.3: bit -> pixel offsets from (px, py)
    1: [(0, 0)],
    2: [(1, 0), (-1, 0), (0, 1), (0, -1)],
    4: [(1, 1), (1, -1), (-1, 1), (-1, -1)],
}


def pixel(config, x, y) -> tuple[int, int]:
    """§0: px = round(x res_x / limit_x), py = round(y res_y / limit_y), half to even."""
    px = np.rint(F32(x) * F32(config.resolution_x) / F32(config.limit_x))
    py = np.rint(F32(y) * F32(config.resolution_y) / F32(config.limit_y))
    return int(px), int(py)


def pixel_z(config, z) -> int:
    """§0: pz = round(z 255 / z_max) as uint8."""
    return int(np.rint(F32(z) * F32(255.0) / F32(config.z_max)))


def background(config, map_idx) -> np.ndarray:
    """§8.3: black image with each box's half-open pixel block [X1, X2) x [Y1, Y2) grey 127."""
    rx, ry = config.resolution_x, config.resolution_y
    img = np.zeros((rx, ry, 3), np.int32)
    fx = F32(rx) / F32(config.limit_x)
    fy = F32(ry) / F32(config.limit_y)
    spec = config.maps[int(map_idx)]
    for x1, y1, x2, y2 in scaled_boxes(config, map_idx)[: len(spec.boxes)]:
        bx1, bx2 = (int(np.clip(np.trunc(F32(v) * fx), 0, rx - 1)) for v in (x1, x2))
        by1, by2 = (int(np.clip(np.trunc(F32(v) * fy), 0, ry - 1)) for v in (y1, y2))
        for px in range(bx1, bx2):
            for py in range(by1, by2):
                img[px, py] = 127
    return img


def put_max(img, px, py, colour) -> None:
    """max(., colour) at one pixel; out-of-range pixels are dropped (§15 row 14)."""
    if 0 <= px < img.shape[0] and 0 <= py < img.shape[1]:
        for c in range(3):
            img[px, py, c] = max(int(img[px, py, c]), int(colour[c]))


def rgb_observation(config, next_state, seen, took_damage, e) -> np.ndarray:
    """§5.3 for ego e, with §15 rows 12 (inactive waypoint not drawn), 14 (out-of-range pixels
    dropped), 15/17 (tails clip per axis, the health bar runs along its own edge py = res_y - 1
    with cut = trunc(res_x health / max_health)), 16 (saturating tail adds), 19 (a dead ego's
    image is all zeros), 20 (other agents' green = pz seen). uint8 (res_x, res_y, 3)."""
    rx, ry = config.resolution_x, config.resolution_y
    s = next_state
    if not s["alive"][e]:
        return np.zeros((rx, ry, 3), np.uint8)
    img = background(config, s["map_idx"])
    # 1-2: border on py = 0, px = 0, px = res_x - 1: red, and white unless the ego took damage
    for c in (0,) if took_damage[e] else (0, 1, 2):
        img[:, 0, c] = 255
        img[0, :, c] = 255
        img[rx - 1, :, c] = 255
    # 3: waypoint, only while active
    if config.enable_waypoints and s["waypoint_time"] > 0:
        size = F32(config.waypoint_size)
        nx = max(int(np.trunc(size * F32(rx) / F32(config.limit_x))), 1)
        ny = max(int(np.trunc(size * F32(ry) / F32(config.limit_y))), 1)
        sx, sy = pixel(config, s["waypoint"][0], s["waypoint"][1])
        for px in range(sx, sx + nx):
            for py in range(sy, sy + ny):
                if 0 <= px < rx and 0 <= py < ry:
                    img[px, py] = (127, 0, 127)
    # 4: health bar on the edge py = res_y - 1
    cut = int(np.trunc(F32(rx) * F32(s["health"][e]) / F32(config.max_health[e])))
    for px in range(rx):
        img[px, ry - 1, 1] = 255
        img[px, ry - 1, 0] = img[px, ry - 1, 2] = 0 if px < cut else 255
    # 5: tails, k pixels behind each agent
    n = config.n_agents
    pix = [pixel(config, s["x"][j], s["y"][j]) for j in range(n)]
    for k in range(1, 5):
        intensity = 255 - 51 * k
        tails = []
        for j in range(n):
            tx = F32(pix[j][0]) - F32(k) * F32(np.cos(F32(s["heading"][j])))
            ty = F32(pix[j][1]) - F32(k) * F32(np.sin(F32(s["heading"][j])))
            tx = int(np.trunc(np.clip(tx, F32(0), F32(rx - 1))))
            ty = int(np.trunc(np.clip(ty, F32(0), F32(ry - 1))))
            tails.append((tx, ty))
            if seen[e, j]:
                c = 2 if config.teams[j] == config.teams[e] else 0
                img[tx, ty, c] = min(255, int(img[tx, ty, c]) + intensity)
        put_max(img, *tails[e], (intensity,) * 3)
    # 6: agents
    px_e, py_e = pix[e]
    if 0 <= px_e < rx and 0 <= py_e < ry:
        img[px_e, py_e] = 0
    for j in range(n):
        pz = pixel_z(config, s["z"][j])
        if j == e:
            colour = (255 - pz, 255, 255 - pz)
        else:
            sj = 1 if seen[e, j] else 0
            enemy = config.teams[j] != config.teams[e]
            colour = (255 * enemy * sj, pz * sj, 255 * (not enemy) * sj)
        for bit, offsets in SPRITE_OFFSETS.items():
            if config.sprites[j] & bit:
                for dx, dy in offsets:
                    put_max(img, pix[j][0] + dx, pix[j][1] + dy, colour)
    return img.astype(np.uint8)


def observations(config, next_state, seen, took_damage):
    """§4.12: per obs_type, the vector observations (n, L) float32, the images
    (n, res_x, res_y, 3) uint8, or the pair (images, vectors)."""
    n = config.n_agents
    vec = rgb = None
    if config.obs_type in ("vector", "rgb_vector"):
        vec = np.stack([vector_observation(config, next_state, seen, e) for e in range(n)])
    if config.obs_type in ("rgb", "rgb_vector"):
        rgb = np.stack(
            [rgb_observation(config, next_state, seen, took_damage, e) for e in range(n)]
        )
    if config.obs_type == "rgb_vector":
        return rgb, vec
    return vec if vec is not None else rgb


# ------------------------------------------------------------------------------------------
# §4 The whole step
# ------------------------------------------------------------------------------------------


def reference_step_details(config, state: dict, actions, noise: dict):
    """One step (§4). Returns (obs, next_state, rewards, dones, ep_done, details).

    `details` holds the intermediate quantities (hit, oob, col, hitbox, HD, S, Dmg, seen, ...)
    so that tests can check that a rule was actually exercised.
    """
    n = config.n_agents
    actions = np.asarray(actions)
    alive_pre = np.asarray(state["alive"], bool).copy()
    counts_pre = alive_counts(config, alive_pre)

    pos = dynamics(config, state, actions)  # §4.1
    hit, wp_loc, wp_time = waypoints(config, state, pos, alive_pre, noise["waypoint"])  # §4.2
    oob = out_of_bounds(config, pos)  # §4.3
    alive = alive_pre & ~oob
    col = collisions(config, pos, alive)  # §4.4
    alive = alive & ~col
    hitbox = hit_boxes(config, pos, state["map_idx"])  # §4.5
    alive1 = alive & ~hitbox

    hd, lock = detection(config, pos, alive1, np.asarray(noise["detection"]))  # §4.6
    new_tracked, dmg = tracking(config, np.asarray(state["tracked"]), lock)  # §4.7
    takes = dmg.sum(axis=1)  # over shooters j
    detby = hd.sum(axis=1)
    det_other = hd.sum(axis=0)
    dmg_other = dmg.sum(axis=0)
    health = health_update(config, state["health"], takes, hit, alive1)
    alive_post = alive1 & (health > 0)
    counts_post = alive_counts(config, alive_post)

    new_step = int(state["step"]) + 1  # §4.8
    done, eliminated, time_up = episode_done(config, *counts_post, new_step)  # §4.9

    d = dict(
        alive_pre=alive_pre,
        alive1=alive1,
        alive=alive_post,
        hit=hit,
        oob=oob,
        col=col,
        hitbox=hitbox,
        hd=hd,
        lock=lock,
        dmg=dmg,
        takes=takes,
        detby=detby,
        det_other=det_other,
        dmg_other=dmg_other,
        counts_pre=counts_pre,
        counts_post=counts_post,
        eliminated=eliminated,
        time_up=time_up,
        took_damage=takes > 0,
    )
    reward, terms = rewards(config, d, state["aux_rewards_factor"])  # §4.10
    d["terms"] = terms

    next_state = dict(
        x=pos["x"],
        y=pos["y"],
        z=pos["z"],
        v=pos["v"],
        heading=pos["heading"],
        health=health,
        alive=alive_post,
        tracked=new_tracked,
        map_idx=np.int32(state["map_idx"]),
        waypoint=wp_loc,
        waypoint_time=F32(wp_time),
        aux_rewards_factor=F32(state["aux_rewards_factor"]),
        step=np.int32(new_step),
    )
    if "returns" in state:
        next_state["returns"] = (np.asarray(state["returns"], np.float32) + reward).astype(
            np.float32
        )
    seen = visibility(config, next_state, hd, np.asarray(noise["comm"]))  # §5.1
    d["seen"] = seen
    obs = observations(config, next_state, seen, d["took_damage"])  # §4.12, §5.2-§5.3
    dones = ~alive_post
    assert dones.shape == (n,)
    return obs, next_state, reward, dones, done, d


def reference_step(config, state: dict, actions, noise: dict):
    """One step (§4): (obs, next_state, rewards, dones, ep_done)."""
    return reference_step_details(config, state, actions, noise)[:5]


# ------------------------------------------------------------------------------------------
# §6 Reset (with §15 rows 4, 22, 23)
# ------------------------------------------------------------------------------------------
#
# Decisions the rules leave room for, taken as this project's reset documents them
# (`gigastep.game.reset.reset_state_streamed`):
#   * The random draws are inputs: the map index (uniform over config.maps, §15 row 4) and one
#     (4, n) array of uniforms in [0, 1) per round (round 0 the first draw, round r the r-th
#     redraw): the fractions of x, y, z and heading across each agent's ranges.
#   * Of a pair that is too close, only the later agent (higher index) is redrawn.
#   * With collision_range = 0 (no collisions in the step) pairs are never in conflict.
#   * After `reset_max_rounds` redraws the positions of the last round are kept, conflicts or
#     not.


def start_ranges(config, map_idx: int, agent: int):
    """§8.1 with §15 row 23: agent's start region (scaled as §8.2), height and heading range.
    Team 0 starts in start_team0 (region "a"), team 1 in start_team1."""
    spec = config.maps[int(map_idx)]
    sx, sy = config.limit_x / 10.0, config.limit_y / 10.0
    team = config.teams[agent]
    region = spec.start_team0 if team == 0 else spec.start_team1
    heading = spec.heading_team0 if team == 0 else spec.heading_team1
    region = (F32(region[0] * sx), F32(region[1] * sy), F32(region[2] * sx), F32(region[3] * sy))
    return region, (F32(spec.height[0]), F32(spec.height[1])), (F32(heading[0]), F32(heading[1]))


def placement_draw(config, map_idx: int, u, agent: int):
    """§6.2 for one agent from its four uniforms u (4,): lo + u (hi - lo) per coordinate, the
    heading wrapped into [-pi, pi) (§15 row 3). Returns (x, y, z, heading) float32."""
    (x1, y1, x2, y2), (z1, z2), (h1, h2) = start_ranges(config, map_idx, agent)
    u = np.asarray(u, np.float32)
    x = F32(x1 + F32(u[0]) * F32(x2 - x1))
    y = F32(y1 + F32(u[1]) * F32(y2 - y1))
    z = F32(z1 + F32(u[2]) * F32(z2 - z1))
    h = wrap_angle(F32(h1 + F32(u[3]) * F32(h2 - h1)))
    return x, y, z, h


def placement_conflict(config, map_idx: int, pos: dict, i: int, margin=0.1) -> bool:
    """§6.3 with §15 row 22: agent i must be redrawn if it is closer than collision_range +
    margin in the plane and collision_altitude + margin in altitude to an earlier agent, or
    strictly inside a real (not padding) box enlarged by margin on every side."""
    spec = config.maps[int(map_idx)]
    m = F32(margin)
    if config.collision_range > 0:
        radius2 = F32((config.collision_range + margin) ** 2)
        for j in range(i):
            close = sq_dist(pos, i, j) < radius2
            if close and abs(F32(pos["z"][i] - pos["z"][j])) < F32(config.collision_altitude) + m:
                return True
    x, y = pos["x"][i], pos["y"][i]
    for x1, y1, x2, y2 in scaled_boxes(config, map_idx)[: len(spec.boxes)]:
        if x1 - m < x < x2 + m and y1 - m < y < y2 + m:
            return True
    return False


def reference_reset_state(config, map_idx: int, uniforms) -> tuple[dict, int]:
    """§6.2-§6.4 with §15 rows 22 and 23, given the draws. `uniforms` (R + 1, 4, n) holds at
    least reset_max_rounds + 1 rounds. Returns (state with the keys of STATE_KEYS, number of
    redraw rounds made)."""
    n = config.n_agents
    pos = {k: np.zeros(n, np.float32) for k in ("x", "y", "z", "heading")}
    for i in range(n):
        pos["x"][i], pos["y"][i], pos["z"][i], pos["heading"][i] = placement_draw(
            config, map_idx, uniforms[0][:, i], i
        )
    rounds = 0
    for r in range(1, config.reset_max_rounds + 1):
        need = [placement_conflict(config, map_idx, pos, i) for i in range(n)]
        if not any(need):
            break
        for i in range(n):  # every conflict is decided on the positions before this round
            if need[i]:
                pos["x"][i], pos["y"][i], pos["z"][i], pos["heading"][i] = placement_draw(
                    config, map_idx, uniforms[r][:, i], i
                )
        rounds = r
    state = dict(
        **pos,
        v=np.ones(n, np.float32),
        health=np.asarray(config.max_health, np.float32),
        alive=np.ones(n, bool),
        tracked=np.zeros((n, n), np.int32),
        map_idx=np.int32(map_idx),
        waypoint=np.zeros(4, np.float32),
        waypoint_time=F32(0),
        aux_rewards_factor=F32(1),
        step=np.int32(0),
        returns=np.zeros(n, np.float32),
    )
    return state, rounds


def reference_reset(config, map_idx: int, uniforms, noise_comm):
    """§6 (reset): (obs, state, rounds). The first observation is that of §6.4: no detections
    (HD = 0), no damage, communication noise `noise_comm` (n, n)."""
    n = config.n_agents
    state, rounds = reference_reset_state(config, map_idx, uniforms)
    seen = visibility(config, state, np.zeros((n, n), bool), np.asarray(noise_comm))
    return observations(config, state, seen, np.zeros(n, bool)), state, rounds


# ------------------------------------------------------------------------------------------
# Converters between the JAX types and plain dicts of NumPy arrays
# ------------------------------------------------------------------------------------------


def state_to_numpy(env_state) -> dict:
    """EnvState (unbatched) -> dict of NumPy arrays with the keys of STATE_KEYS."""
    a, ep = env_state.agents, env_state.episode
    out = {
        "x": np.asarray(a.x, np.float32),
        "y": np.asarray(a.y, np.float32),
        "z": np.asarray(a.z, np.float32),
        "v": np.asarray(a.v, np.float32),
        "heading": np.asarray(a.heading, np.float32),
        "health": np.asarray(a.health, np.float32),
        "alive": np.asarray(a.alive, bool),
        "tracked": np.asarray(a.tracked, np.int32),
        "map_idx": np.int32(ep.map_idx),
        "waypoint": np.asarray(ep.waypoint, np.float32),
        "waypoint_time": np.float32(ep.waypoint_time),
        "aux_rewards_factor": np.float32(ep.aux_rewards_factor),
        "step": np.int32(ep.step),
    }
    if getattr(ep, "returns", None) is not None:
        out["returns"] = np.asarray(ep.returns, np.float32)
    return out


def numpy_to_state(config, state: dict):
    """dict of NumPy arrays -> EnvState (via EnvState.create)."""
    import jax.numpy as jnp

    from gigastep.types import EnvState

    env_state = EnvState.create(
        config,
        x=state["x"],
        y=state["y"],
        z=state["z"],
        v=state["v"],
        heading=state["heading"],
        health=state["health"],
        alive=state["alive"],
        tracked=state["tracked"],
        map_idx=state["map_idx"],
        waypoint=state["waypoint"],
        waypoint_time=state["waypoint_time"],
        aux_rewards_factor=state["aux_rewards_factor"],
        step=state["step"],
    )
    if "returns" in state:
        episode = env_state.episode.replace(returns=jnp.asarray(state["returns"], jnp.float32))
        env_state = env_state.replace(episode=episode)
    return env_state


def noise_to_numpy(noise) -> dict:
    return {
        "detection": np.asarray(noise.detection, np.float32),
        "comm": np.asarray(noise.comm, np.float32),
        "waypoint": np.asarray(noise.waypoint, np.float32),
    }


def numpy_to_noise(noise: dict):
    import jax.numpy as jnp

    from gigastep.types import StepNoise

    return StepNoise(
        detection=jnp.asarray(noise["detection"], jnp.float32),
        comm=jnp.asarray(noise["comm"], jnp.float32),
        waypoint=jnp.asarray(noise["waypoint"], jnp.float32),
    )
