r"""Actor-critic policies: encoders, recurrent cores, action heads, critics.

One `ActorCritic` serves every agent of a team (parameter sharing); the agent type is a
one-hot input, so heterogeneous teams share weights. A policy is

    encoder (MLP on vectors, small CNN on RGB, both for rgb_vector, the entity encoder on
             entity observations (`EntityEncoder`); + type one-hot)
      -> core (S5 block, GRU, or an MLP layer without memory)
      -> actor head (27-way categorical, three 3-way categoricals (turn, dive, throttle)
         with `action_head="factored"`, or a 3-d Gaussian) and value head,

or, with `separate_critic`, the actor above and a value head on a second encoder and core of
the same kinds (the recurrent state is then the two cores' states concatenated on the last
axis), or, with a centralised critic (MAPPO), the actor above and a separate MLP critic on
the game's global state vector (`gigastep.game.observations.global_state`), the agent's slot in
its team and its type. With `value_norm` the value head predicts standardised returns and
every value it returns is mapped back to the return scale (`baselines.valuenorm`).

Two modes that give the same numbers (tested):
    `act`      one step for N agents while acting (S5 `step`, a GRU cell), recurrent state in
               and out;
    `evaluate` a whole rollout [T, N] at once in the update (S5's parallel scan, torch's
               GRU kernel between episode starts, the MLP batched over time), from the state
               at the rollout's start.
`first[t, i]` means "agent i's episode started at step t": the recurrent state restarts from
zero before that step takes its input, in both modes, so a replayed rollout reproduces the
acting-time states exactly.

Continuous actions: a Gaussian with a learned, state-independent log-std per action
dimension. The sampled action is sent to the environment unclipped and unsquashed; the
environment clips it to [-1, 1] (`gigastep.game.dynamics.decode_actions`). The log-probability is
that of the unclipped sample under the Gaussian: the clipping is part of the environment's
dynamics, so the ratio of two policies' log-probabilities stays exact.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gigastep.game.types import ENTITY_FEATURES

from . import noise
from .s5 import S5Block
from .valuenorm import ValueNorm

__all__ = [
    "ENTITY_FEATURES",
    "FACTOR_INDEX",
    "OBS_TYPES",
    "ActorCritic",
    "Core",
    "EntityEncoder",
    "PolicySpec",
    "build_policy",
    "joint_log_probs",
]

OBS_TYPES = ("vector", "rgb", "rgb_vector", "entity")
"""The observation kinds a policy reads."""


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

_Weighted = TypeVar("_Weighted", nn.Linear, nn.Conv2d)


@dataclass(frozen=True)
class PolicySpec:
    """Everything that decides a policy's architecture (saved in checkpoints)."""

    obs_type: str
    """vector, rgb, rgb_vector or entity."""
    vector_size: int
    """Length L of the vector observation (0 without one); with entity observations the
    training game's `entity_size` (the encoder's weights do not depend on it)."""
    image_shape: tuple[int, int, int] | None
    """(res_x, res_y, 3) of the RGB observation (None without one)."""
    n_types: int
    """Length K of the agent-type one-hot."""
    discrete: bool
    """27-way categorical actions (else 3-d continuous)."""
    core: str = "s5"
    """s5, gru or mlp."""
    hidden: int = 64
    s5_state_dim: int = 32
    s5_layers: int = 1
    central_critic: bool = False
    """MAPPO: a critic on the state vector instead of a value head on the core."""
    state_size: int = 0
    """Length S of the state vector (central critic)."""
    n_slots: int = 1
    """Length of the agent-slot one-hot of the central critic (the team size)."""
    critic_hidden: int = 128
    separate_critic: bool = False
    """The value comes from its own encoder and core instead of the actor's (IPPO)."""
    value_norm: bool = False
    """The value head predicts standardised returns (`baselines.valuenorm`)."""
    action_head: str = "joint"
    """Discrete actions: "joint" (27 logits) or "factored" (3 x 3 logits: turn, dive,
    throttle, three categoricals whose log-probabilities add; `joint_log_probs`)."""

    def __post_init__(self):
        if self.action_head not in ("joint", "factored"):
            raise ValueError(f"action_head must be joint or factored, got {self.action_head!r}")
        if self.action_head == "factored" and not self.discrete:
            raise ValueError(
                "the factored action head is for discrete actions (turn, dive, throttle "
                "levels); continuous actions take the joint 3-d Gaussian"
            )
        if self.obs_type not in OBS_TYPES:
            raise ValueError(f"obs_type must be one of {list(OBS_TYPES)}, got {self.obs_type!r}")
        if self.core not in ("s5", "gru", "mlp"):
            raise ValueError(f"core must be s5, gru or mlp, got {self.core!r}")
        if self.image_shape is not None:
            object.__setattr__(self, "image_shape", tuple(int(v) for v in self.image_shape))
        if "rgb" in self.obs_type and self.image_shape is None:
            raise ValueError(f"obs_type {self.obs_type!r} needs image_shape")
        if "rgb" in self.obs_type and min(self.image_shape[:2]) < 20:
            raise ValueError(
                f"the CNN encoder (8x8 stride 4, then 4x4 stride 2) needs images of at least "
                f"20 x 20 pixels, got {self.image_shape[0]} x {self.image_shape[1]}"
            )
        if "vector" in self.obs_type and self.vector_size < 1:
            raise ValueError(f"obs_type {self.obs_type!r} needs vector_size >= 1")
        if self.obs_type == "entity" and (
            self.vector_size < ENTITY_FEATURES or self.vector_size % ENTITY_FEATURES
        ):
            raise ValueError(
                f"entity observations are rows of {ENTITY_FEATURES} features; vector_size "
                f"{self.vector_size} is not a positive multiple of {ENTITY_FEATURES}"
            )
        if self.central_critic and self.state_size < 1:
            raise ValueError("a central critic needs state_size >= 1")
        if self.central_critic and self.separate_critic:
            raise ValueError("separate_critic is for a value head on the observation (ippo)")

    @property
    def obs_norm_size(self) -> int:
        """Length of the running observation normaliser: the vector part's, 0 (none) for rgb
        and entity observations (entity rows are scaled by the game, and their presence
        column must stay 0/1 for the encoder's mask)."""
        return self.vector_size if "vector" in self.obs_type else 0

    @property
    def n_action_outputs(self) -> int:
        """Width of the actor head: 27 (joint), 9 (factored) or 3 (continuous means)."""
        if not self.discrete:
            return 3
        return 9 if self.action_head == "factored" else 27

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> PolicySpec:
        return cls(**values)


FACTOR_INDEX = np.array([[(r // 3) % 3, 3 + r % 3, 6 + r // 9] for r in range(27)])
"""[27, 3]: the factored head's outputs (turn 0-2, dive 3-5, throttle 6-8) that joint
action r takes: the levels of `gigastep.game.dynamics.ACTION_TABLE` (heading (r // 3) % 3,
dive r % 3, throttle r // 9)."""


def joint_log_probs(out: torch.Tensor) -> torch.Tensor:
    """A factored head's outputs [..., 9] -> the log-probabilities [..., 27] of the joint
    actions: log p(r) = log p_turn + log p_dive + log p_throttle, each a 3-way log-softmax
    (a normalised distribution over the same 27 actions as the joint head's)."""
    parts = [F.log_softmax(out[..., 3 * k : 3 * k + 3], dim=-1) for k in range(3)]
    lp = torch.cat(parts, dim=-1)
    idx = torch.as_tensor(FACTOR_INDEX, device=out.device)
    return lp[..., idx[:, 0]] + lp[..., idx[:, 1]] + lp[..., idx[:, 2]]


def _layer(layer: _Weighted, std: float = math.sqrt(2)) -> _Weighted:
    """Orthogonal weights with gain `std` and zero bias (the PPO convention)."""
    nn.init.orthogonal_(layer.weight, std)
    if layer.bias is not None:  # every layer here has one; a Conv2d's is Optional
        nn.init.zeros_(layer.bias)
    return layer


# ------------------------------------------------------------------------------------------
# Encoders
# ------------------------------------------------------------------------------------------


class Encoder(nn.Module):
    """Observation (+ type one-hot) -> features [N, hidden].

    Vector observations and the type one-hot pass one linear + ReLU layer together. RGB
    images (uint8, converted to float in [0, 1] here) pass two strided convolutions (16 8x8/4,
    32 4x4/2) and a linear + ReLU layer, whose features, with the vector part's (rgb_vector)
    and the type one-hot, are fused by a linear + ReLU layer.
    """

    def __init__(self, spec: PolicySpec):
        super().__init__()
        h, k = spec.hidden, spec.n_types
        self.vector: nn.Sequential | None = None
        self.image: nn.Sequential | None = None
        self.fuse: nn.Sequential | None = None
        if spec.obs_type == "vector":
            self.vector = nn.Sequential(
                _layer(nn.Linear(spec.vector_size + k, h)), nn.ReLU(inplace=True)
            )
            return
        assert spec.image_shape is not None  # PolicySpec requires it for rgb observations
        x, y, c = spec.image_shape
        conv = nn.Sequential(
            _layer(nn.Conv2d(c, 16, 8, stride=4)),
            nn.ReLU(inplace=True),
            _layer(nn.Conv2d(16, 32, 4, stride=2)),
            nn.ReLU(inplace=True),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = conv(torch.zeros(1, c, x, y)).shape[-1]
        self.image = nn.Sequential(conv, _layer(nn.Linear(flat, h)), nn.ReLU(inplace=True))
        width = h + k
        if spec.obs_type == "rgb_vector":
            self.vector = nn.Sequential(
                _layer(nn.Linear(spec.vector_size, h)), nn.ReLU(inplace=True)
            )
            width += h
        self.fuse = nn.Sequential(_layer(nn.Linear(width, h)), nn.ReLU(inplace=True))

    def forward(self, obs, types: torch.Tensor) -> torch.Tensor:
        """obs: [N, L] float32, [N, X, Y, 3] uint8, or the pair (rgb, vector); types [N, K]."""
        if self.image is None:
            assert self.vector is not None  # a vector-only encoder
            return self.vector(torch.cat([obs, types], dim=-1))
        assert self.fuse is not None  # every encoder with an image part fuses
        image = obs[0] if isinstance(obs, tuple) else obs
        parts = [self.image(image.permute(0, 3, 1, 2).float().div_(255.0))]
        if self.vector is not None:
            parts.append(self.vector(obs[1]))
        parts.append(types)
        return self.fuse(torch.cat(parts, dim=-1))


class EntityEncoder(nn.Module):
    """Entity observation (+ type one-hot) -> features [N, hidden], for any number of rows.

    The flat observation [N, G * F] is read as G rows of F = 25 features (`gigastep.game.
    observations.entity`): row 0 is the ego, the others its allies, enemies, boxes (and
    waypoint), each row carrying its group's one-hot and, in column 0, its presence flag.
    Every row passes one shared embedding (linear + ReLU, F -> H); the ego's embedding
    (with the type one-hot) is the query of one masked attention head over the other rows
    (keys and values linear in their embeddings, scaled dot products), and the other rows'
    embeddings are also mean-pooled over the present ones. [ego, attention, mean pool,
    type one-hot] pass a linear + ReLU layer to H features.

    Absent rows (presence 0: empty slots, padding) take no part: their scores are the lowest
    float and their pooling weight 0; where no row is present (a dead ego, nobody in sight)
    the attention and the pool give zeros, never NaN. No weight depends on G, so one policy
    reads the observations of any slot counts and team sizes.
    """

    def __init__(self, spec: PolicySpec):
        super().__init__()
        h, k = spec.hidden, spec.n_types
        self.embed = nn.Sequential(_layer(nn.Linear(ENTITY_FEATURES, h)), nn.ReLU(inplace=True))
        self.query = _layer(nn.Linear(h + k, h), std=1.0)
        self.key = _layer(nn.Linear(h, h), std=1.0)
        self.value = _layer(nn.Linear(h, h), std=1.0)
        self.fuse = nn.Sequential(_layer(nn.Linear(3 * h + k, h)), nn.ReLU(inplace=True))
        self.scale = 1.0 / math.sqrt(h)

    def forward(self, obs: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """obs [N, G * F] float32 (G >= 1), types [N, K]."""
        n = obs.shape[0]
        rows = obs.reshape(n, -1, ENTITY_FEATURES)
        # the ego and the others embedded apart: slicing the input, which needs no gradient,
        # rather than the embeddings
        ego, others = self.embed(rows[:, 0]), self.embed(rows[:, 1:])  # [N, H], [N, G - 1, H]
        present = rows[:, 1:, 0] > 0.5  # [N, G - 1]
        weight = present.to(ego.dtype)
        count = weight.sum(-1, keepdim=True)
        any_present = (count > 0).to(ego.dtype)
        q = self.query(torch.cat([ego, types], dim=-1))  # [N, H]
        # One query per agent, so the key and value layers fold into it rather than run on
        # every row: q . (Wk e + bk) = (Wk^T q) . e + q . bk, and as the weights sum to 1,
        # sum_g w_g (Wv e_g + bv) = Wv (sum_g w_g e_g) + bv. The same function as the
        # per-row layers, with two H x H products per agent instead of per row.
        qk = q @ self.key.weight  # [N, H]
        bias = (q * self.key.bias).sum(-1, keepdim=True)  # a shift: keeps bk in the graph
        scores = (torch.bmm(others, qk.unsqueeze(-1)).squeeze(-1) + bias) * self.scale
        scores = scores.masked_fill(~present, torch.finfo(scores.dtype).min)
        # with no row present the softmax is uniform over absent rows: zeroed below
        mix = torch.stack([torch.softmax(scores, dim=-1), weight / count.clamp(min=1.0)], 1)
        mixed, pooled = torch.bmm(mix, others).unbind(1)  # attention and mean pool: [N, H]
        attn = self.value(mixed) * any_present
        return self.fuse(torch.cat([ego, attn, pooled, types], dim=-1))


def _encoder(spec: PolicySpec) -> nn.Module:
    return EntityEncoder(spec) if spec.obs_type == "entity" else Encoder(spec)


# ------------------------------------------------------------------------------------------
# Cores: a recurrent state per agent, restarted where `first`
# ------------------------------------------------------------------------------------------


class Core(nn.Module, abc.ABC):
    """Interface of the cores. States are tensors whose agent axis is `batch_dim`.

    `step_cache()` is what `step` needs of the parameters, computed once while they stay
    fixed (a rollout) and passed to every `step` (None: nothing to precompute).
    """

    batch_dim = 0

    @abc.abstractmethod
    def initial_state(self, n: int, device) -> torch.Tensor:
        """The zero state of n agents."""

    @abc.abstractmethod
    def step(self, x, first, h, cache=None):
        """x [N, H], first [N] bool, h -> (y [N, H], h)."""

    @abc.abstractmethod
    def sequence(self, x, first, h0):
        """x [T, N, H], first [T, N] bool, h0 -> (y [T, N, H], h after the last step)."""

    def step_cache(self):
        return None

    def rows(self, h: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """The states of agents `index`."""
        return h.index_select(self.batch_dim, index)

    def where(self, mask: torch.Tensor, h: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """The state of `h` for agents where mask [N] is set, else of `other`."""
        shape = [1] * h.dim()
        shape[self.batch_dim] = -1
        return torch.where(mask.view(shape), h, other)


class S5Core(Core):
    """`S5Block`: parallel scan over a rollout, `step` while acting; state complex
    [layers, N, P / 2]."""

    batch_dim = 1

    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.block = S5Block(spec.hidden, spec.s5_state_dim, n_layers=spec.s5_layers)

    def initial_state(self, n, device):
        return self.block.initial_state(n).to(device)

    def step(self, x, first, h, cache=None):
        return self.block.step(x, first, h, cache)

    def step_cache(self):
        return self.block.step_weights()

    def sequence(self, x, first, h0):
        return self.block(x, first, h0)


class GRUCore(Core):
    """A GRU cell while acting; in the update, torch's GRU kernel over the spans of steps
    in which no agent's episode starts (the state of the agents whose episode starts at a
    span's first step restarts from zero); state [N, H]."""

    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.cell = nn.GRUCell(spec.hidden, spec.hidden)
        self.hidden = spec.hidden

    def initial_state(self, n, device):
        return torch.zeros(n, self.hidden, device=device)

    def step(self, x, first, h, cache=None):
        h = self.cell(x, torch.where(first.unsqueeze(-1), 0.0, h))
        return h, h

    def sequence(self, x, first, h0):
        t = x.shape[0]
        # one host read per replay (the update, not the acting path): where spans begin
        starts = (first[1:].any(-1).nonzero().squeeze(-1) + 1).tolist()
        c = self.cell
        params = [c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh]
        ys, h = [], h0
        for a, b in zip([0, *starts], [*starts, t], strict=True):
            h = torch.where(first[a].unsqueeze(-1), 0.0, h)
            # torch.nn.GRU's kernel (one layer, unidirectional) with the cell's parameters
            y, h = torch.gru(x[a:b], h[None], params, True, 1, 0.0, self.training, False, False)
            ys.append(y)
            h = h[0]
        return torch.cat(ys), h


class MLPCore(Core):
    """No memory: one linear + ReLU layer; an empty state [N, 0]."""

    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.layer = nn.Sequential(
            _layer(nn.Linear(spec.hidden, spec.hidden)), nn.ReLU(inplace=True)
        )

    def initial_state(self, n, device):
        return torch.zeros(n, 0, device=device)

    def step(self, x, first, h, cache=None):
        return self.layer(x), h

    def sequence(self, x, first, h0):
        return self.layer(x), h0


_CORES: dict[str, Callable[[PolicySpec], Core]] = {"s5": S5Core, "gru": GRUCore, "mlp": MLPCore}


# ------------------------------------------------------------------------------------------
# The policy
# ------------------------------------------------------------------------------------------


class ActorCritic(nn.Module):
    """Encoder, core, actor head and a value head (or a central critic). See module doc.

    Shapes: N agents, T steps, K types, S state-vector length.
    """

    def __init__(self, spec: PolicySpec):
        super().__init__()
        self.spec = spec
        self.encoder = _encoder(spec)
        self.core = _CORES[spec.core](spec)
        a = spec.n_action_outputs
        # One layer for the action outputs and, without a central critic, the value: rows
        # 0..a-1 are the actor's (gain 0.01: a near-uniform start), row a the value's (gain 1).
        shared = not (spec.central_critic or spec.separate_critic)
        self.heads = nn.Linear(spec.hidden, a + 1 if shared else a)
        nn.init.zeros_(self.heads.bias)
        nn.init.orthogonal_(self.heads.weight[:a], 0.01)
        if shared:
            nn.init.orthogonal_(self.heads.weight[a:], 1.0)
        self.value_norm = ValueNorm() if spec.value_norm else None
        if spec.separate_critic:
            self.critic_encoder = _encoder(spec)
            self.critic_core = _CORES[spec.core](spec)
            self.critic_head = _layer(nn.Linear(spec.hidden, 1), std=1.0)
        if not spec.discrete:
            self.log_std = nn.Parameter(torch.full((3,), -0.5))
        if spec.central_critic:
            width = spec.state_size + spec.n_slots + spec.n_types
            c = spec.critic_hidden
            self.critic = nn.Sequential(
                _layer(nn.Linear(width, c)),
                nn.ReLU(inplace=True),
                _layer(nn.Linear(c, c)),
                nn.ReLU(inplace=True),
                _layer(nn.Linear(c, 1), std=1.0),
            )

    # --- pieces -----------------------------------------------------------------------------
    def initial_state(self, n: int, device=None) -> torch.Tensor:
        """Zero recurrent state of n agents."""
        device = device if device is not None else self.heads.weight.device
        h = self.core.initial_state(n, device)
        if self.spec.separate_critic:
            h = torch.cat([h, self.critic_core.initial_state(n, device)], dim=-1)
        return h

    def _split(self, h):
        """(actor state, critic state) of a separate critic's concatenated state."""
        k = h.shape[-1] // 2
        return h[..., :k], h[..., k:]

    def _step(self, obs, types, first, h, cache=None):
        """(actor core output [N, H], critic core output or None, new state) of one step;
        `cache` as `step_cache()` returns it (None: computed by the cores)."""
        x = self.encoder(obs, types)
        if not self.spec.separate_critic:
            y, h = self.core.step(x, first, h, cache)
            return y, None, h
        ha, hc = self._split(h)
        actor_cache, critic_cache = (None, None) if cache is None else cache
        y, ha = self.core.step(x, first, ha, actor_cache)
        yc, hc = self.critic_core.step(self.critic_encoder(obs, types), first, hc, critic_cache)
        return y, yc, torch.cat([ha, hc], dim=-1)

    def _critic(self, yc, critic_in):
        """[...] values on the return scale from the critic's input."""
        if self.spec.central_critic:
            if critic_in is None:
                raise ValueError("a central critic needs critic_in (state vector, slot, type)")
            v = self.critic(critic_in).squeeze(-1)
        else:
            v = self.critic_head(yc).squeeze(-1)
        return v if self.value_norm is None else self.value_norm.denormalize(v)

    def _outputs(self, y, critic_in, yc=None):
        """(action outputs [..., A], values [...]) of core outputs y [..., H] (and the
        separate critic's core outputs yc)."""
        out = self.heads(y)
        a = self.spec.n_action_outputs
        if self.spec.central_critic or self.spec.separate_critic:
            return self._joint(out), self._critic(yc, critic_in)
        v = out[..., a]
        v = v if self.value_norm is None else self.value_norm.denormalize(v)
        return self._joint(out[..., :a]), v

    def _joint(self, out):
        """Action outputs as the actions' logits: the factored head's as joint log-probs."""
        return joint_log_probs(out) if self.spec.action_head == "factored" else out

    def _log_prob(self, out, actions):
        if self.spec.discrete:
            logp = F.log_softmax(out, dim=-1)
            return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), logp
        z = (actions - out) * torch.exp(-self.log_std)
        return (-0.5 * z * z - self.log_std - _LOG_SQRT_2PI).sum(-1), None

    def _entropy(self, logp_all):
        if self.spec.discrete:
            return -(logp_all.exp() * logp_all).sum(-1)
        return (0.5 + _LOG_SQRT_2PI + self.log_std).sum()

    @property
    def noise_width(self) -> int:
        """Uniforms one agent's sample consumes: 1 (discrete), 6 (continuous)."""
        return 1 if self.spec.discrete else 6

    def _sample(self, out, uniforms, deterministic):
        """(actions, log-probs) of one step's action outputs."""
        if self.spec.discrete:
            logp_all = F.log_softmax(out, dim=-1)
            if deterministic:
                actions = out.argmax(-1)
            else:
                u = self._uniforms(out, uniforms)
                actions = noise.categorical(logp_all, u[:, 0])
            return actions, logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        if deterministic:
            actions = out
        else:
            actions = out + torch.exp(self.log_std) * noise.normal(self._uniforms(out, uniforms))
        return actions, self._log_prob(out, actions)[0]

    def _uniforms(self, out, uniforms):
        if uniforms is None:
            return torch.rand(out.shape[0], self.noise_width, device=out.device)
        return uniforms

    def step_cache(self):
        """What `act` and `value` need of the core's parameters, computed once: pass it to
        every step while the parameters do not change (a rollout), or None. With a separate
        critic: (the actor core's, the critic core's)."""
        if self.spec.separate_critic:
            return self.core.step_cache(), self.critic_core.step_cache()
        return self.core.step_cache()

    def act(
        self,
        obs,
        types,
        first,
        h,
        critic_in=None,
        uniforms=None,
        deterministic: bool = False,
        cache=None,
    ):
        """One step of N agents.

        Args:
            obs: [N, L] float32 (normalised), [N, X, Y, 3] uint8, or (rgb, vector).
            types: [N, K] float32 one-hot.
            first: [N] bool, an episode starts at this step (the state restarts first).
            h: recurrent state of the N agents.
            critic_in: [N, S + slots + K] float32 for a central critic, else None. A central
                critic's player that only acts (a frozen or pool opponent, an evaluation) passes
                None and gets None for the values.
            uniforms: [N, noise_width] float32 in (0, 1), the sampling noise (e.g.
                `baselines.noise.uniforms`); drawn with torch.rand when None. Discrete
                actions invert the softmax's CDF at the uniform; continuous ones add
                exp(log_std) times Box-Muller normals to the mean.
            deterministic: the mode (argmax / mean) instead of a sample.
            cache: `step_cache()` of the current parameters (computed here when None).

        Returns:
            (actions [N] int64 or [N, 3] float32, log-prob [N], value [N] (None: a central
            critic without `critic_in`), new state).
        """
        y, yc, h = self._step(obs, types, first, h, cache)
        if self.spec.central_critic and critic_in is None:
            out, value = self._joint(self.heads(y)), None
        else:
            out, value = self._outputs(y, critic_in, yc)
        actions, logp = self._sample(out, uniforms, deterministic)
        return actions, logp, value, h

    def value(self, obs, types, first, h, critic_in=None, cache=None):
        """[N] values of one step (as `act`, without sampling)."""
        if self.spec.central_critic:
            return self._critic(None, critic_in)
        if self.spec.separate_critic:
            x = self.critic_encoder(obs, types)
            critic_cache = None if cache is None else cache[1]
            yc, _ = self.critic_core.step(x, first, self._split(h)[1], critic_cache)
            return self._critic(yc, None)
        y, _ = self.core.step(self.encoder(obs, types), first, h, cache)
        return self._outputs(y, None)[1]

    def evaluate(self, obs, types, first, h0, actions, critic_in=None):
        """A whole rollout of N agents at once (the update's pass).

        Args:
            obs: [T, N, ...] as in `act`, stacked over time.
            types: [N, K].
            first: [T, N] bool.
            h0: the state before step 0, for N agents.
            actions: [T, N] or [T, N, 3], the actions taken.
            critic_in: [T, N, S + slots + K] for a central critic.

        Returns:
            (log-prob [T, N], entropy [T, N], value [T, N]).
        """
        t, n = first.shape
        flat = _flatten(obs, t * n)
        types = types.repeat(t, 1)
        x = self.encoder(flat, types).view(t, n, -1)
        yc = None
        if self.spec.separate_critic:
            h0, hc = self._split(h0)
            xc = self.critic_encoder(flat, types).view(t, n, -1)
            yc, _ = self.critic_core.sequence(xc, first, hc)
        y, _ = self.core.sequence(x, first, h0)
        out, value = self._outputs(y, critic_in, yc)
        logp, logp_all = self._log_prob(out, actions)
        entropy = self._entropy(logp_all)
        if not self.spec.discrete:
            entropy = entropy.expand(t, n)
        return logp, entropy, value


def _flatten(obs, rows: int):
    if isinstance(obs, tuple):
        return tuple(o.reshape(rows, *o.shape[2:]) for o in obs)
    return obs.reshape(rows, *obs.shape[2:])


def build_policy(spec: PolicySpec) -> ActorCritic:
    """The policy of a spec, freshly initialised (seed torch first for reproducibility)."""
    return ActorCritic(spec)
