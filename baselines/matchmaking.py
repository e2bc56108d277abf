"""Who plays whom: the batch split into slices by opponent kind, frozen players, the pool.

The B games of a batch are cut into contiguous slices, one per entry of the opponent mix
(`--opponent self:0.5,pool:0.25,pursuit:0.25`), in proportion to the weights (largest
remainder; every kind gets at least one game). In each slice the trained team (`--team`) is
played by the learner and the other team by:
    self     the learner as well (symmetric scenarios; both teams' rows are training data),
    pool     past snapshots of the learner: the slice is cut into `pool_players` equal parts;
             each part draws one snapshot uniformly from the pool per rollout, and every
             episode that starts in that part during the rollout is played to its end by
             that snapshot, with its recurrent state (`PoolPlayer`),
    a name   a scripted policy of `gigastep.opponents`, played inside the compiled step,
    file     a frozen policy loaded from a checkpoint.
With `--train-both` there is one slice: team 0's learner against team 1's learner.

Rows: agent a of game g is row g * n + a of the flattened [B * n] batch; every network
player (learner or frozen) owns a fixed set of rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .config import OpponentSpec, PPOConfig, parse_opponents
from .envs import GameSpec
from .normalize import ObsNormalizer
from .policies import ActorCritic, PolicySpec

__all__ = [
    "FrozenPlayer",
    "check_file_opponent",
    "MatchPlan",
    "OpponentPool",
    "PoolPlayer",
    "Rows",
    "Slice",
    "make_plan",
]


@dataclass
class Rows:
    """A player's rows in this process's part of the batch, with per-row game, team, slot,
    type, and the row's place in the whole batch (for noise and minibatches)."""

    index: torch.Tensor
    """[N] int64: (g - start) * n + a, the row in this process's flattened games."""
    game: torch.Tensor
    """[N] int64: the game g - start in this process's games."""
    team: torch.Tensor
    """[N] int64: the agent's team."""
    slot: torch.Tensor
    """[N] int64: the agent's position within its team."""
    type_id: torch.Tensor
    """[N] int64: the agent's index in the type vocabulary."""
    uid: torch.Tensor
    """[N] int64: g * n + a, the row's id in the whole batch (its sampling-noise counter)."""
    pos: torch.Tensor
    """[N] int64: the row's position among the player's rows of the whole batch."""
    total: int = 0
    """The player's rows in the whole batch (all processes)."""
    span: tuple[int, int] | None = None
    """(start, stop) when `index` is the contiguous range start..stop-1 (read as a view)."""

    def take(self, flat):
        """This player's rows of a flattened [B * n, ...] tensor (or pair of tensors): a view
        when the rows are contiguous, else a gathered copy."""
        if isinstance(flat, tuple):
            return tuple(self.take(x) for x in flat)
        if self.span is not None:
            return flat[self.span[0] : self.span[1]]
        return flat.index_select(0, self.index)

    def put(self, flat: torch.Tensor, values: torch.Tensor) -> None:
        """Write `values` into this player's rows of a flattened [B * n, ...] tensor."""
        if self.span is not None:
            flat[self.span[0] : self.span[1]] = values
        else:
            flat[self.index] = values

    @staticmethod
    def of(blocks, game: GameSpec, vocab: tuple[str, ...], device, games=None) -> Rows:
        """The rows of `blocks`, a list of (start, stop, team): that team's agents in games
        [start, stop) of the whole batch, kept where the game is in `games` = [lo, hi)
        (this process's games; all when None)."""
        n = game.n_agents
        cols: dict[str, list[np.ndarray]] = {
            k: [] for k in ("uid", "game", "team", "slot", "type_id")
        }
        for start, stop, team in blocks:
            agents = game.team_agents(team)
            gs = np.arange(start, stop)
            cols["uid"].append((gs[:, None] * n + agents[None, :]).reshape(-1))
            cols["game"].append(np.repeat(gs, len(agents)))
            cols["team"].append(np.full(len(gs) * len(agents), team))
            cols["slot"].append(np.tile(np.arange(len(agents)), len(gs)))
            types = [vocab.index(game.type_keys[a]) for a in agents]
            cols["type_id"].append(np.tile(types, len(gs)))
        out = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
        total = len(out["uid"])
        out["pos"] = np.arange(total)
        lo, hi = games if games is not None else (0, np.inf)
        keep = (out["game"] >= lo) & (out["game"] < hi)
        out = {k: v[keep] for k, v in out.items()}
        out["game"] = out["game"] - int(lo)
        out["index"] = out["uid"] - int(lo) * n
        tensors = {k: torch.as_tensor(v, dtype=torch.int64, device=device) for k, v in out.items()}
        index = out["index"]
        span = None
        if len(index) and np.array_equal(index, np.arange(index[0], index[0] + len(index))):
            span = (int(index[0]), int(index[0]) + len(index))
        return Rows(**tensors, total=total, span=span)

    def __len__(self) -> int:
        return int(self.index.shape[0])


@dataclass(frozen=True)
class Slice:
    """Games [start, stop) and who plays each team there."""

    start: int
    stop: int
    label: str
    """The opponent kind, for win rates (win_rate/<label>)."""
    team: int
    """The team whose result the win rate counts (the learner's)."""
    players: tuple[str, str]
    """Controller of team 0 and of team 1: learner0, learner1, frozen<i>, or scripted:<name>."""


def _counts(weights, total: int, minimum: int = 1) -> list[int]:
    """Integer shares of `total` by weight (largest remainder), each >= `minimum`."""
    weights = np.asarray(weights, np.float64)
    raw = weights / weights.sum() * total
    counts = np.maximum(np.floor(raw).astype(int), minimum)
    while counts.sum() > total:
        counts[np.argmax(counts)] -= 1
    order = np.argsort(-(raw - np.floor(raw)), kind="stable")
    i = 0
    while counts.sum() < total:
        counts[order[i % len(order)]] += 1
        i += 1
    return counts.tolist()


class MatchPlan:
    """The slices of the batch (see the module doc) and the frozen players they need."""

    def __init__(self, slices: list[Slice], frozen: list[tuple[str, OpponentSpec]], num_envs):
        self.slices = slices
        self.frozen = frozen
        """(name, spec) of each frozen player, in the order of `frozen<i>`."""
        self.num_envs = num_envs
        self.labels = list(dict.fromkeys(s.label for s in slices))
        self.game_label = np.zeros(num_envs, np.int64)
        self.game_team = np.zeros(num_envs, np.int64)
        for s in slices:
            self.game_label[s.start : s.stop] = self.labels.index(s.label)
            self.game_team[s.start : s.stop] = s.team

    def blocks(self, controller: str) -> list[tuple[int, int, int]]:
        """(start, stop, team) of every slice team played by `controller`."""
        return [
            (s.start, s.stop, t) for s in self.slices for t in (0, 1) if s.players[t] == controller
        ]

    def scripted(self, games=None):
        """The `ScriptedTeam`s of the plan for `TorchVecEnv(scripted=...)`, restricted to the
        games [lo, hi) of `games` (numbered from lo) when given."""
        from gigastep.adapters.torch import ScriptedTeam

        lo, hi = games if games is not None else (0, self.num_envs)
        out = []
        for s in self.slices:
            start, stop = max(s.start, lo), min(s.stop, hi)
            for t in (0, 1):
                if start < stop and s.players[t].startswith("scripted:"):
                    name = s.players[t].split(":", 1)[1]
                    out.append(ScriptedTeam(start - lo, stop - lo, t, name))
        return tuple(out)


def make_plan(config: PPOConfig, game: GameSpec) -> MatchPlan:
    """The match plan of a run (see the module doc).

    Raises:
        ValueError: the opponent mix does not fit the scenario or the batch size.
    """
    b = config.num_envs
    if config.train_both:
        if config.opponent not in ("auto", "learner"):
            raise ValueError(
                "--train-both plays the two learners against each other in every "
                f"game; --opponent {config.opponent!r} cannot be used with it"
            )
        if 0 in game.team_sizes:
            raise ValueError("--train-both needs agents in both teams")
        return MatchPlan([Slice(0, b, "learner", 0, ("learner0", "learner1"))], [], b)
    t, other = config.team, 1 - config.team
    if game.team_sizes[t] == 0:
        raise ValueError(f"--team {t} has no agents in {game.name}")
    if game.team_sizes[other] == 0:  # a game without an opponent team (e.g. a probe)
        return MatchPlan([Slice(0, b, "none", t, _pair(t, "learner0", "none"))], [], b)
    specs = parse_opponents(config.opponent, game.symmetric)
    minimum = [config.pool_players if s.kind == "pool" else 1 for s in specs]
    if b < sum(minimum):
        raise ValueError(
            f"--num-envs {b} is too small for the opponent mix {config.opponent!r} "
            f"(it needs at least {sum(minimum)} games)"
        )
    counts = _counts([s.weight for s in specs], b)
    for s, c, lo in zip(specs, counts, minimum, strict=True):
        if c < lo:
            raise ValueError(
                f"the {s.label!r} share of --num-envs {b} is {c} games, fewer "
                f"than its {lo} players; raise --num-envs"
            )
    slices: list[Slice] = []
    frozen: list[tuple[str, OpponentSpec]] = []
    start = 0
    for s, c in zip(specs, counts, strict=True):
        if s.kind == "self":
            slices.append(Slice(start, start + c, "self", t, ("learner0", "learner0")))
        elif s.kind in ("pool", "file"):
            parts = _counts([1.0] * config.pool_players, c) if s.kind == "pool" else [c]
            lo = start
            for part in parts:
                name = f"frozen{len(frozen)}"
                frozen.append((name, s))
                slices.append(Slice(lo, lo + part, s.label, t, _pair(t, "learner0", name)))
                lo += part
        else:
            slices.append(
                Slice(start, start + c, s.label, t, _pair(t, "learner0", f"scripted:{s.kind}"))
            )
        start += c
    return MatchPlan(slices, frozen, b)


# What a frozen checkpoint must share with the run to play in its games: the observations it
# reads and the actions it writes. Its architecture is its own (the frozen player is built from
# the file's spec), so a pool may mix cores, widths and action heads.
_GAME_FIELDS = ("obs_type", "vector_size", "image_shape", "n_types", "discrete")


def check_file_opponent(path, theirs: PolicySpec, mine: PolicySpec) -> None:
    """Raise unless the policy of checkpoint `path` (`theirs`) can play in a run of policy
    `mine`: the same observations and actions (`_GAME_FIELDS`; with entity observations the
    row count may differ, the entity encoder reads any number of rows). Its architecture may
    differ.

    Raises:
        ValueError: naming each differing field, with the file's and the run's values.
    """
    fields = [f for f in _GAME_FIELDS if not (f == "vector_size" and mine.obs_type == "entity")]
    a, b = mine.to_dict(), theirs.to_dict()
    diff = {k: (b.get(k), a[k]) for k in fields if b.get(k) != a[k]}
    if diff:
        raise ValueError(
            f"opponent {path} cannot play here: its observations or actions differ from this "
            f"run's in {diff} (file vs run; a checkpoint opponent must have been trained on "
            "this run's observations and actions)"
        )


def _pair(team: int, mine: str, theirs: str) -> tuple[str, str]:
    return (mine, theirs) if team == 0 else (theirs, mine)


# ------------------------------------------------------------------------------------------
# Frozen players and the pool
# ------------------------------------------------------------------------------------------


class FrozenPlayer:
    """A policy that plays without learning (pool snapshot or checkpoint file) on its rows."""

    def __init__(
        self, name: str, spec: PolicySpec, rows: Rows, types: torch.Tensor, device, norm_obs: bool
    ):
        self.name = name
        self.net = ActorCritic(spec).to(device)
        self.net.requires_grad_(False)
        self.normalizer = ObsNormalizer(spec.obs_norm_size, device, norm_obs)
        self.rows = rows
        self.types = types
        self.h = self.net.initial_state(len(rows), device)
        self.source = None
        """What it plays now: the pool snapshot's update, or the checkpoint path."""

    def load(self, model: dict, obs_norm: dict | None, source) -> None:
        """Take the weights (and observation statistics) of a snapshot; restart the state."""
        self.net.load_state_dict(model)
        if obs_norm is not None:
            self.normalizer.load_state_dict(obs_norm)
        self.h = self.net.initial_state(len(self.rows), self.h.device)
        self.source = source

    def state_dict(self) -> dict:
        """What a checkpoint keeps of it (shared by every process)."""
        return {
            "name": self.name,
            "model": self.net.state_dict(),
            "obs_norm": self.normalizer.state_dict(),
            "source": None if self.source is None else str(self.source),
        }

    def load_state_dict(self, state: dict) -> None:
        self.load(state["model"], state["obs_norm"], state["source"])

    def local_state(self) -> dict:
        """What this process holds for its rows."""
        return {"h": self.h}

    def load_local_state(self, local: dict) -> None:
        self.h = local["h"].to(self.h.device)


def _normalized(normalizer: ObsNormalizer, raw):
    """Raw observations as a frozen policy's statistics normalise them (vectors only)."""
    if isinstance(raw, tuple):
        return (raw[0], normalizer(raw[1]))
    return raw if raw.dtype == torch.uint8 else normalizer(raw)


class _Unchanged:
    """The normaliser a `PoolPlayer` shows its caller: each snapshot normalises its own."""

    def __call__(self, x):
        return x


class PoolPlayer:
    """Pool snapshots playing a part of the pool slice, each game's episode by one snapshot.

    The player holds several loaded snapshots ("seats" of weights and observation
    statistics) and, per row, the seat playing it. At each rollout's start (`begin_rollout`)
    it loads that rollout's drawn snapshot into a seat no unfinished episode uses; a row
    whose episode starts (`first`) during the rollout moves to that seat, every other row
    keeps its seat and its recurrent state, so an opponent never changes mid-episode. Each
    step runs the seats in use on all the player's rows and keeps each row's own seat's
    outputs (a cost of one forward pass per seat in use, typically two or three).

    It has the `FrozenPlayer` interface the rollout uses (`net.act`, `net.noise_width`,
    `normalizer`, `rows`, `types`, `h`); its `normalizer` passes observations through, as
    each seat normalises with its own snapshot's statistics.
    """

    def __init__(
        self, name: str, spec: PolicySpec, rows: Rows, types: torch.Tensor, device, norm_obs: bool
    ):
        self.name, self.spec, self.rows, self.types = name, spec, rows, types
        self.device, self.norm_obs = device, norm_obs
        self.seats: list[FrozenPlayer] = []
        self.incoming = -1
        """The seat of the episodes that start during this rollout (-1: none yet)."""
        self.active: list[int] = []
        self.seat = torch.full((len(rows),), -1, dtype=torch.int64, device=device)
        """[N] int64: the seat playing each row's episode."""
        self.net = self
        self.normalizer = _Unchanged()
        self.h = ActorCritic(spec).initial_state(len(rows), device)

    @property
    def noise_width(self) -> int:
        return 1 if self.spec.discrete else 6

    @property
    def source(self) -> list:
        """The snapshot update of each seat."""
        return [p.source for p in self.seats]

    def _new_seat(self) -> FrozenPlayer:
        seat = FrozenPlayer(
            f"{self.name}.{len(self.seats)}",
            self.spec,
            self.rows,
            self.types,
            self.device,
            self.norm_obs,
        )
        self.seats.append(seat)
        return seat

    def begin_rollout(self, snapshot: dict, first: torch.Tensor) -> None:
        """Load the rollout's snapshot into a seat no unfinished episode uses (`first` [N]
        bool: the rows whose episode starts at the rollout's first step); fix the seats run
        this rollout."""
        used = set(self.seat[~first].tolist())  # one read per rollout
        free = [i for i in range(len(self.seats)) if i not in used]
        self.incoming = free[0] if free else len(self.seats)
        seat = self.seats[self.incoming] if free else self._new_seat()
        seat.load(snapshot["model"], snapshot["obs_norm"], snapshot["update"])
        self.active = sorted((used - {-1}) | {self.incoming})

    @torch.no_grad()
    def step_cache(self) -> list:
        """Each seat's `ActorCritic.step_cache()`, for the rollout (the seats are fixed
        by then: `begin_rollout` runs first)."""
        return [seat.net.step_cache() for seat in self.seats]

    def act(self, obs, types, first, h, critic_in=None, uniforms=None, cache=None):
        """One step of the player's rows (the `ActorCritic.act` interface, on raw
        observations: each seat normalises them with its snapshot's statistics)."""
        self.seat = torch.where(first, self.incoming, self.seat)
        out = None
        for i in self.active:
            p = self.seats[i]
            seat_cache = None if cache is None else cache[i]
            step = p.net.act(
                _normalized(p.normalizer, obs), types, first, h, None, uniforms, cache=seat_cache
            )
            if out is None:
                out = list(step)
                continue
            mine = self.seat == i
            for k, (old, new) in enumerate(zip(out, step, strict=True)):
                if new is None:  # a central critic's values: an opponent has no state vector
                    continue
                dim = p.net.core.batch_dim if k == 3 else 0
                shape = [1] * new.ndim
                shape[dim] = -1
                out[k] = torch.where(mine.view(shape), new, old)
        return tuple(out)

    def state_dict(self) -> dict:
        """Nothing is shared: the seats depend on this process's games (`local_state`)."""
        return {"name": self.name}

    def load_state_dict(self, state: dict) -> None:
        if "seats" not in state and "model" in state:
            raise ValueError(
                "this checkpoint was written before pool opponents kept their episodes; "
                "it cannot be resumed by this version (start a new run)"
            )

    def local_state(self) -> dict:
        """This process's rows: their seats, the seats' snapshots and the states."""
        return {
            "h": self.h,
            "seat": self.seat,
            "seats": [p.state_dict() for p in self.seats],
            "incoming": self.incoming,
            "active": list(self.active),
        }

    def load_local_state(self, local: dict) -> None:
        self.h = local["h"].to(self.h.device)
        self.seat = local["seat"].to(self.device)
        self.seats = []
        for seat_state in local["seats"]:
            self._new_seat().load_state_dict(seat_state)
        self.incoming = int(local["incoming"])
        self.active = [int(i) for i in local["active"]]


class OpponentPool:
    """Past snapshots of the learner (model and observation statistics), oldest dropped."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.snapshots: list[dict] = []

    def add(self, update: int, net: torch.nn.Module, normalizer: ObsNormalizer) -> None:
        model = {k: v.detach().clone() for k, v in net.state_dict().items()}
        self.snapshots.append(
            {"update": update, "model": model, "obs_norm": normalizer.state_dict()}
        )
        del self.snapshots[: max(0, len(self.snapshots) - self.capacity)]

    def sample(self, rng: np.random.Generator, k: int) -> list[dict]:
        """k snapshots drawn uniformly with replacement."""
        return [self.snapshots[i] for i in rng.integers(0, len(self.snapshots), size=k)]

    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "snapshots": self.snapshots}

    def load_state_dict(self, state: dict) -> None:
        self.capacity = int(state["capacity"])
        self.snapshots = list(state["snapshots"])
