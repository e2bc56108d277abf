"""Play games between two players and count who wins: win/draw/loss with confidence intervals.

The players are those of `gigastep.eval.players` (a scripted policy's name, a policy
callable, a `TorchPlayer`, or a checkpoint file); the results and their intervals are
`gigastep.eval.statistics`' `MatchResult`.

`evaluate(a, b, scenario, games)` plays `games` complete episodes, fully batched: games between
scripted players run as one compiled JAX loop (segments of `lax.scan` over
`gigastep.env.batched_step` until every game has finished), games with a `TorchPlayer` run
over `gigastep.adapters.torch.TorchVecEnv` with the actor in the loop and a scripted side, if any,
inside its compiled step (`gigastep.adapters.torch.ScriptedTeam`). In a symmetric
scenario (both teams have the same agent types in the same order) A plays team 0 in
ceil(games / 2) games and team 1 in the rest, from the same start positions. Each batch slot
counts only its first episode: counting the first `games` episodes to finish instead would
favour short episodes (decisive games end early, draws last until the time limit).

Outcomes are those of `gigastep.env.episode_winner`: a win when only A's team has agents
alive at the end, a loss when only B's has, otherwise a draw (time limit, or both eliminated
in the same step). Win and loss rates come with Wilson score intervals.

Example:
    >>> from gigastep.eval.matches import evaluate
    >>> result = evaluate("pursuit", "random", "identical_5_vs_5_fobs_vec_void_disc", games=64)
    >>> result.wins + result.draws + result.losses == result.games
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import jax
import jax.numpy as jnp
import numpy as np

from gigastep import env as _env
from gigastep._util.checks import check_positive_int
from gigastep.eval.players import (
    Device,
    Player,
    PlayerLike,
    ScriptedPlayer,
    TorchActor,
    TorchPlayer,
    load_player,
    player_loaders,
    register_player_loader,
    resolve_player,
)
from gigastep.eval.statistics import MatchResult, SeatResult, wilson_interval
from gigastep.game.types import PER_AGENT_FIELDS, EnvConfig, EnvState
from gigastep.opponents import POLICIES, Policy
from gigastep.versus import EnvLike, resolve_env

if TYPE_CHECKING:
    import torch
    from jax.typing import DTypeLike

    from gigastep.adapters.torch import TorchObservation


Progress: TypeAlias = Callable[[int], object]
"""`progress(finished_games)`, called as games finish."""

__all__ = [
    "DEFAULT_SCENARIO",
    "MatchResult",
    "ScriptedPlayer",
    "SeatResult",
    "TorchActor",
    "TorchPlayer",
    "evaluate",
    "load_player",
    "player_loaders",
    "register_player_loader",
    "resolve_player",
    "symmetric",
    "wilson_interval",
]

DEFAULT_SCENARIO = "identical_5_vs_5_fobs_vec_void_disc"
"""The game `evaluate` and the command line play when none is named."""

SEGMENT_STEPS = 32  # steps per compiled call of the scripted loop (progress, early exit)

# ------------------------------------------------------------------------------------------
# Seats
# ------------------------------------------------------------------------------------------


def symmetric(config: EnvConfig) -> bool:
    """Whether both teams have the same agent types in the same order, and with a team draw
    the same sizes and type weights (so that swapping the teams gives the same game)."""
    teams = np.asarray(config.teams)
    rows = [np.flatnonzero(teams == t) for t in (0, 1)]
    if len(rows[0]) != len(rows[1]):
        return False
    draw = config.team_draw
    if draw is not None and (draw.sizes[0], draw.weights[0]) != (draw.sizes[1], draw.weights[1]):
        return False
    tables = [getattr(config, t) for t in PER_AGENT_FIELDS]
    if config.type_names:
        tables.append(config.type_names)
    return all([tab[i] for i in rows[0]] == [tab[i] for i in rows[1]] for tab in tables)


def _seat_plan(config: EnvConfig, games: int, a_team: int | None) -> list[tuple[int, int]]:
    """[(team A plays, games)] : both teams (A as team 0 in ceil(games / 2)) when `a_team` is
    None and the game is symmetric, else all games with A as `a_team` (default 0)."""
    if a_team is None and symmetric(config):
        first = -(-games // 2)
        return [(0, first), (1, games - first)] if games - first else [(0, first)]
    team = 0 if a_team is None else a_team
    if isinstance(team, bool) or team not in (0, 1):
        raise ValueError(f"a_team must be 0, 1 or None (both, in symmetric games), got {a_team!r}")
    return [(team, games)]


# ------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------


@dataclass
class _Tally:
    """The first episode of each of B game slots (host NumPy copies)."""

    finished: np.ndarray  # (B,) bool
    winner: np.ndarray  # (B,) int32
    returns: np.ndarray  # (B, n) float32
    length: np.ndarray  # (B,) int32


def _seat_result(config: EnvConfig, a_team: int, tally: _Tally, rows: slice) -> SeatResult:
    teams = np.asarray(config.teams)
    done = tally.finished[rows]
    winner = tally.winner[rows][done]
    team_return = [tally.returns[rows][done][:, teams == t].sum(axis=1) for t in (0, 1)]
    return SeatResult(
        team=a_team,
        games=int(done.sum()),
        wins=int(np.sum(winner == a_team)),
        draws=int(np.sum(winner == -1)),
        losses=int(np.sum(winner == 1 - a_team)),
        return_a=float(team_return[a_team].sum()),
        return_b=float(team_return[1 - a_team].sum()),
        length=int(tally.length[rows][done].sum()),
    )


def evaluate(
    player_a: PlayerLike,
    player_b: PlayerLike,
    scenario: EnvLike = DEFAULT_SCENARIO,
    games: int = 256,
    *,
    seed: int = 0,
    a_team: int | None = None,
    max_steps: int | None = None,
    batch_size: int = 4096,
    device: Device = "cpu",
    confidence: float = 0.95,
    progress: Progress | None = None,
    **overrides: Any,
) -> MatchResult:
    """Play `games` complete episodes of `scenario` between two players.

    Args:
        player_a, player_b: players (a scripted policy name, a policy callable, a
            `TorchPlayer` or a checkpoint path).
        scenario: a scenario name, `GigastepEnv` or `EnvConfig` (EnvConfig `overrides` are
            applied to it).
        games: episodes to count. In a symmetric game A plays team 0 in ceil(games / 2) of
            them and team 1 in the others (`a_team` fixes A's team instead).
        seed: seeds the start positions and every random draw (the two halves use the same
            start positions with the sides swapped).
        max_steps: steps after which unfinished games are given up (not counted, noted in the
            result); default the scenario's `max_episode_length`, by which every game ends.
        batch_size: games played at once (more are played in rounds).
        device: torch device for TorchPlayers ("cpu", "cuda", ...).
        progress: optional callable `progress(finished_games)` called as games finish.

    Returns:
        A `MatchResult`.
    """
    env = resolve_env(scenario, **overrides)
    config = env.config
    for name, value in (("games", games), ("batch_size", batch_size)):
        check_positive_int(value, name)
    steps = config.max_episode_length if max_steps is None else max_steps
    if steps is None:
        raise ValueError(
            "this scenario has no time limit (max_episode_length=None): pass max_steps, after "
            "which unfinished games are not counted"
        )
    check_positive_int(steps, "max_steps")
    plan = _seat_plan(config, games, a_team)
    a, b = resolve_player(player_a, device), resolve_player(player_b, device)
    for team, _ in plan:
        _check_player(a, config, team, "A")
        _check_player(b, config, 1 - team, "B")
    seats = _play_rounds(config, a, b, plan, steps, seed, batch_size, device, progress)
    unfinished = games - sum(s.games for s in seats)
    notes = []
    if unfinished:
        notes.append(
            f"{unfinished} of {games} games had not ended after {steps} steps and are not counted"
        )
    spec = getattr(env, "spec", None)
    name = spec.name if spec is not None else "custom"
    from gigastep.scenarios import scenario_hash

    return MatchResult(
        player_a=a.name,
        player_b=b.name,
        scenario=name,
        scenario_hash=scenario_hash(config),
        seats=tuple(seats),
        requested_games=games,
        unfinished=unfinished,
        max_steps=steps,
        seed=seed,
        confidence=confidence,
        notes=tuple(notes),
    )


def _check_player(player: Player, config: EnvConfig, team: int, which: str) -> None:
    try:
        player.check(config, team)
    except ValueError as err:
        raise ValueError(f"player {which} ({player.name}) cannot play team {team}: {err}") from None


def _slots(plan: list[tuple[int, int]], batch_size: int) -> int:
    """Game slots per seat and round: the largest seat's games rounded up to a power of two
    (so that evaluations of different sizes share compiled loops), at most batch_size over
    the seats. Every round has the same slots; those of the last round that are not needed
    play along uncounted."""
    most = max(count for _, count in plan)
    return max(1, min(1 << (most - 1).bit_length(), batch_size // len(plan)))


def _play_rounds(
    config: EnvConfig,
    a: Player,
    b: Player,
    plan: list[tuple[int, int]],
    steps: int,
    seed: int,
    batch_size: int,
    device: Device,
    progress: Progress | None,
) -> list[SeatResult]:
    """Play the seat plan in rounds of at most `batch_size` games; one SeatResult per seat."""
    totals = {team: SeatResult(team, 0, 0, 0, 0, 0.0, 0.0, 0) for team, _ in plan}
    remaining = dict(plan)
    size = _slots(plan, batch_size)
    groups = [(team, size) for team, _ in plan]
    done, round_index = 0, 0
    while any(remaining.values()):
        want = [min(remaining[team], size) for team, _ in plan]

        def report(n: int, base: int = done, cap: int = sum(want)) -> None:  # noqa: B008 (bound per round)
            if progress is not None:
                progress(base + min(n, cap))

        tally = _play(config, a, b, groups, steps, seed + 7919 * round_index, device, report)
        for g, ((team, _), count) in enumerate(zip(plan, want, strict=True)):
            rows = slice(g * size, g * size + count)
            _add(totals[team], _seat_result(config, team, tally, rows))
            remaining[team] -= count
            done += count
        round_index += 1
        if progress is not None:
            progress(done)
    return [totals[team] for team, _ in plan]


def _add(total: SeatResult, part: SeatResult) -> None:
    for f in dataclasses.fields(SeatResult):
        if f.name != "team":
            setattr(total, f.name, getattr(total, f.name) + getattr(part, f.name))


def _play(
    config: EnvConfig,
    a: Player,
    b: Player,
    groups: list[tuple[int, int]],
    steps: int,
    seed: int,
    device: Device,
    report: Callable[[int], None],
) -> _Tally:
    """One round: game slots grouped by A's team, A's games in each group first."""
    if isinstance(a, ScriptedPlayer) and isinstance(b, ScriptedPlayer):
        return _play_scripted(config, a, b, groups, steps, seed, report)
    return _play_torch(config, a, b, groups, steps, seed, device, report)


# ------------------------------------------------------------------------------------------
# Scripted vs scripted: one compiled JAX loop
# ------------------------------------------------------------------------------------------


def _policy_table(*players: ScriptedPlayer) -> tuple[tuple[Policy, ...], list[int]]:
    """The built-in policies followed by any other policy of `players` (a static table, so
    that every pairing of built-ins shares one compiled loop), and each player's index."""
    table = list(POLICIES.values())
    for p in players:
        if p.policy not in table:
            table.append(p.policy)
    return tuple(table), [table.index(p.policy) for p in players]


def _all_policies(
    config: EnvConfig, table: tuple[Policy, ...], state: EnvState, key: jax.Array
) -> jax.Array:
    """(P, n, ...) the actions of every policy of the table for one game."""
    return jnp.stack([p(config, state, key).astype(_action_dtype(config)) for p in table])


def _action_dtype(config: EnvConfig) -> DTypeLike:
    return jnp.int32 if config.discrete_actions else jnp.float32


def _joint_actions(
    config: EnvConfig, table: tuple[Policy, ...], seat: jax.Array, state: EnvState, key: jax.Array
) -> jax.Array:
    """All agents' actions of one game: team 0 by policy table[seat[0]], team 1 by
    table[seat[1]]. Every policy of the table is computed (they are cheap next to a step)
    and the two are picked, so the seat is data and one compiled loop plays every pairing."""
    actions = _all_policies(config, table, state, key)
    team0 = np.asarray(config.teams) == 0
    mask = jnp.asarray(team0.reshape((-1,) + (1,) * (actions.ndim - 2)))
    return jnp.where(mask, actions[seat[0]], actions[seat[1]])


def _record(
    rec: _Record,
    states: EnvState,
    ep_done: jax.Array,
    t: jax.Array,
    config: EnvConfig,
    steps: jax.Array,
) -> _Record:
    """Keep the outcome of each slot's first episode if it ends at step t (< steps)."""
    finished, winner, returns, length = rec
    new = ep_done & ~finished & (t < steps)
    won = _env.episode_winner(config, states.agents.alive, ep_done)
    return (
        finished | new,
        jnp.where(new, won, winner),
        jnp.where(new[:, None], states.episode.returns, returns),
        jnp.where(new, states.episode.step, length),
    )


@lru_cache(maxsize=32)
def _scripted_segment(
    config: EnvConfig, table: tuple[Policy, ...]
) -> Callable[..., tuple[EnvState, jax.Array, _Record, jax.Array]]:
    """Compiled: (states, key, rec, t, seats (B, 2), steps) -> (states, key, rec, t) after
    SEGMENT_STEPS steps of `gigastep.env.batched_step`. Finished games are not reset: each
    slot plays one episode, and what it does after its end is never read."""
    joint = jax.vmap(partial(_joint_actions, config, table))

    def body(carry: _Carry, _: object) -> tuple[_Carry, None]:
        states, key, rec, t, seats, steps = carry
        key, k_act, k_step = jax.random.split(key, 3)
        b = seats.shape[0]
        actions = joint(seats, states, jax.random.split(k_act, b))
        _, states, _, _, ep_done = _env.batched_step(
            config, states, actions, jax.random.split(k_step, b)
        )
        rec = _record(rec, states, ep_done, t, config, steps)
        return (states, key, rec, t + 1, seats, steps), None

    def run(
        states: EnvState,
        key: jax.Array,
        rec: _Record,
        t: jax.Array,
        seats: jax.Array,
        steps: jax.Array,
    ) -> tuple[EnvState, jax.Array, _Record, jax.Array]:
        carry, _ = jax.lax.scan(body, (states, key, rec, t, seats, steps), length=SEGMENT_STEPS)
        return carry[:4]

    return jax.jit(run, donate_argnums=(0, 2))


_Record: TypeAlias = tuple[jax.Array, jax.Array, jax.Array, jax.Array]
"""(finished (B,), winner (B,), returns (B, n), length (B,)) of each slot's first episode."""

_Carry: TypeAlias = tuple[EnvState, jax.Array, _Record, jax.Array, jax.Array, jax.Array]
"""(states, key, record, t, seats, steps) of the scripted loop."""


def _empty_record(b: int, n: int) -> _Record:
    return (
        jnp.zeros(b, bool),
        jnp.full(b, -1, jnp.int32),
        jnp.zeros((b, n), jnp.float32),
        jnp.zeros(b, jnp.int32),
    )


def _play_scripted(
    config: EnvConfig,
    a: ScriptedPlayer,
    b: ScriptedPlayer,
    groups: list[tuple[int, int]],
    steps: int,
    seed: int,
    report: Callable[[int], None],
) -> _Tally:
    table, (ia, ib) = _policy_table(a, b)
    seats = np.concatenate(
        [np.tile([(ia, ib) if team == 0 else (ib, ia)], (size, 1)) for team, size in groups]
    )
    total = len(seats)
    states = _groups_from_one_start(config, groups, seed)
    key = jax.random.PRNGKey(seed + 1)
    rec = _empty_record(total, config.n_agents)
    run = _scripted_segment(config, table)
    t, limit, seat_ids = jnp.int32(0), jnp.int32(steps), jnp.asarray(seats, jnp.int32)
    for _ in range(-(-steps // SEGMENT_STEPS)):
        states, key, rec, t = run(states, key, rec, t, seat_ids, limit)
        count = int(jnp.sum(rec[0]))  # one host read per segment
        report(count)
        if count == total:
            break
    return _Tally(*(np.asarray(x) for x in rec))


class _Side:
    """One team of one group of games, played by an actor (torch) or, inside TorchVecEnv's
    compiled step, by a scripted policy."""

    def __init__(
        self, player: Player, config: EnvConfig, team: int, rows: slice, device: Device, seed: int
    ) -> None:
        self.player, self.team, self.rows = player, team, rows
        self.index = np.flatnonzero(np.asarray(config.teams) == team)
        lo, hi = int(self.index[0]), int(self.index[-1]) + 1
        self.agents: slice | list[int] = (
            slice(lo, hi) if hi - lo == len(self.index) else list(self.index)
        )
        self.discrete = config.discrete_actions
        self.actor: TorchActor | None = None
        if not isinstance(player, ScriptedPlayer):
            self.actor = player.actor(config, team, rows.stop - rows.start, device, seed)

    def observe(self, obs: TorchObservation) -> TorchObservation:
        """This side's observations: its games' rows, its team's agents, contiguous."""
        return jax.tree_util.tree_map(lambda x: x[self.rows][:, self.agents].contiguous(), obs)

    def act(self, obs: TorchObservation, first: torch.Tensor, check: bool) -> torch.Tensor:
        assert self.actor is not None  # only the sides played by an actor act
        out = self.actor(self.observe(obs), first[self.rows])
        if check:
            _check_actor_output(out, self, obs)
        return out


def _check_actor_output(actions: Any, side: _Side, obs: TorchObservation) -> None:
    # `actions` is whatever an actor returned: this checks that it is a tensor of the right form
    import torch

    b, m = side.rows.stop - side.rows.start, len(side.index)
    leaf = jax.tree_util.tree_leaves(obs)[0]
    discrete = side.discrete
    shape = (b, m) if discrete else (b, m, 3)
    ok = isinstance(actions, torch.Tensor) and tuple(actions.shape) == shape
    if ok and actions.device != leaf.device:
        raise ValueError(
            f"the actor of {side.player.name} returned actions on {actions.device}; the "
            f"observations are on {leaf.device}"
        )
    if not ok or actions.is_floating_point() == discrete:
        what = "integer" if discrete else "float32"
        got = (
            f"{actions.dtype} of shape {tuple(actions.shape)}"
            if isinstance(actions, torch.Tensor)
            else type(actions).__name__
        )
        raise ValueError(
            f"the actor of {side.player.name} (team {side.team}) must return {what} actions "
            f"of shape {shape} (games, team agents{'' if discrete else ', 3'}); got {got}"
        )


def _groups_from_one_start(config: EnvConfig, groups: list[tuple[int, int]], seed: int) -> EnvState:
    """Start states of all slots: every group starts from the same positions."""
    sizes = [size for _, size in groups]
    keys = jax.random.split(jax.random.PRNGKey(seed), max(sizes))
    return _env.GigastepEnv(config).v_reset(jnp.concatenate([keys[:s] for s in sizes]))[1]


def _play_torch(
    config: EnvConfig,
    a: Player,
    b: Player,
    groups: list[tuple[int, int]],
    steps: int,
    seed: int,
    device: Device,
    report: Callable[[int], None],
) -> _Tally:
    import torch

    from gigastep.adapters.torch import ScriptedTeam, TorchVecEnv

    total = sum(size for _, size in groups)
    sides: list[_Side] = []
    start = 0
    for team_a, size in groups:
        rows = slice(start, start + size)
        for player, team in ((a, team_a), (b, 1 - team_a)):
            sides.append(_Side(player, config, team, rows, device, seed + len(sides)))
        start += size
    # Scripted sides play inside the compiled step; the actors' rows come from the caller.
    # (a side without an actor is a ScriptedPlayer's)
    scripted = [
        ScriptedTeam(s.rows.start, s.rows.stop, s.team, cast(ScriptedPlayer, s.player).policy)
        for s in sides
        if s.actor is None
    ]
    venv = TorchVecEnv(
        config, num_envs=total, seed=seed, device=device, final_obs=False, scripted=scripted
    )
    obs = venv.reset_to(_groups_from_one_start(config, groups, seed))
    dev = venv.device
    dtype = torch.int32 if config.discrete_actions else torch.float32
    shape = (total, config.n_agents) + (() if config.discrete_actions else (3,))
    actions = torch.zeros(shape, dtype=dtype, device=dev)  # scripted rows stay ignored zeros
    first = torch.ones(total, dtype=torch.bool, device=dev)
    finished = torch.zeros(total, dtype=torch.bool, device=dev)
    winner = torch.full((total,), -1, dtype=torch.int32, device=dev)
    returns = torch.zeros(total, config.n_agents, device=dev)
    length = torch.zeros(total, dtype=torch.int32, device=dev)
    for t in range(steps):
        for side in sides:
            if side.actor is not None:
                actions[side.rows, side.agents] = side.act(obs, first, check=t == 0).to(dtype)
        obs, _, _, ep_dones, info = venv.step(actions)
        new = ep_dones & ~finished
        finished |= new
        winner = torch.where(new, info["winner"], winner)
        returns = torch.where(new[:, None], info["episode_return"], returns)
        length = torch.where(new, info["episode_length"], length)
        first = ep_dones
        if t % SEGMENT_STEPS == SEGMENT_STEPS - 1 or t == steps - 1:
            count = int(finished.sum())  # one host read per segment
            report(count)
            if count == total:
                break
    venv.close()
    return _Tally(*(x.cpu().numpy() for x in (finished, winner, returns, length)))
