"""The programs a GPU user runs, lowered for CUDA on this (CPU-only) machine: no CPU-only
custom call (the native kernels of `gigastep.game._native`), no host callback and no
data-dependent control flow, which XLA:GPU would run from the host (it reads a conditional's
index and a `while` loop's predicate there at every one).

What counts (`Lowered.compiler_ir("stablehlo")`, walked from `main` through the functions it
calls):

- A `stablehlo.case` / `stablehlo.if` whose index (predicate) is a constant is a platform
  choice (`jax.lax.platform_dependent` lowers, even for one platform, to a case on a constant
  platform index and a case on its result): XLA folds it. Only the branch it takes is walked,
  so the CPU forms inside the untaken branches are not counted. Any other case / if counts.
- A `stablehlo.while` is a counted loop (a `lax.scan`, a `fori_loop` with static bounds)
  when its condition is `counter < constant` with the counter initialised from a constant
  and incremented by a constant in the body: XLA knows its trip count and runs it without
  reading the predicate. Any other while counts.

The lowered texts are asserted to come from the CUDA lowering (no native kernel), and the same
analysis of the CPU lowering finds the CPU forms' conditionals and loops (the analysis can
fail). Lowering only: nothing is compiled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.mlir import ir

import gigastep
from gigastep import env as genv
from gigastep import rollout as grollout
from tests.exact_runs import TINY_JAX_PPO

B = 4
# vector / RGB / both, void / maps / map sets, discrete / continuous, with and without noise
SCENARIOS = [
    "identical_5_vs_5",
    "identical_20_vs_20_pobs_vec_maps_disc",
    "hide_and_seek_5_vs_5_fobs_rgb_maps_cont",
    "waypoint_5_vs_3_pobs_rgb_void_disc",
]
SLOW = pytest.mark.slow


@dataclass
class Control:
    """What remains of a lowered module once its platform choices are made."""

    data_dependent: list[str] = field(default_factory=list)
    counted_loops: int = 0
    constant_choices: int = 0
    custom_calls: set[str] = field(default_factory=set)
    host_ops: list[str] = field(default_factory=list)


def _constant(value: Any) -> int | None:
    """The integer a scalar SSA value always holds, or None (not known without running)."""
    owner = value.owner
    if isinstance(owner, ir.Block):  # a block argument
        return None
    op = owner.operation
    name = op.name
    if name == "stablehlo.constant":
        m = re.match(r"dense<(-?\d+|true|false)>", str(op.attributes["value"]))
        if m is None:  # not a scalar splat
            return None
        token = m.group(1)
        return 1 if token == "true" else 0 if token == "false" else int(token)
    if name in ("stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reshape"):
        return _constant(op.operands[0])
    if name == "stablehlo.case":
        index = _constant(op.operands[0])
        if index is None:
            return None
        ret = _taken(op, index).operations
        terminator = list(ret)[-1]
        return _constant(terminator.operands[ir.OpResult(value).result_number])
    return None


def _taken(case: Any, index: int) -> Any:
    """The block of `case`'s branch `index` (out of range: the last, as XLA runs it)."""
    regions = list(case.regions)
    return regions[index if 0 <= index < len(regions) else len(regions) - 1].blocks[0]


def _counted(loop: Any) -> bool:
    """Whether a stablehlo.while is `counter < constant` with a constant start and step."""
    cond = list(loop.regions[0].blocks[0].operations)
    compare = cond[-1].operands[0].owner
    if isinstance(compare, ir.Block) or compare.operation.name != "stablehlo.compare":
        return False
    if "LT" not in str(compare.operation.attributes["comparison_direction"]):
        return False
    counter, bound = compare.operation.operands
    if not isinstance(counter.owner, ir.Block) or _constant(bound) is None:
        return False
    k = ir.BlockArgument(counter).arg_number
    if _constant(loop.operands[k]) is None:
        return False
    body = list(loop.regions[1].blocks[0].operations)
    step = body[-1].operands[k].owner
    if isinstance(step, ir.Block) or step.operation.name != "stablehlo.add":
        return False
    a, b = step.operation.operands
    return (
        isinstance(a.owner, ir.Block)
        and ir.BlockArgument(a).arg_number == k
        and _constant(b) is not None
    ) or (
        isinstance(b.owner, ir.Block)
        and ir.BlockArgument(b).arg_number == k
        and _constant(a) is not None
    )


def analyse(lowered: Any) -> Control:
    """The control flow of a lowered program (see the module doc)."""
    module = lowered.compiler_ir("stablehlo")
    funcs = {
        str(op.attributes["sym_name"]).strip('"'): op
        for op in module.body.operations
        if op.operation.name == "func.func"
    }
    out = Control()
    seen: set[str] = set()

    def walk_block(block: Any) -> None:
        for op in block.operations:
            walk(op.operation)

    def walk(op: Any) -> None:
        name = op.name
        if name in ("stablehlo.case", "stablehlo.if"):
            index = _constant(op.operands[0])
            if index is None:
                out.data_dependent.append(f"{name} at {op.location}")
            else:
                out.constant_choices += 1
                if name == "stablehlo.if":
                    index = 0 if index else 1
                walk_block(_taken(op, index))
                return
        elif name == "stablehlo.while":
            if _counted(op):
                out.counted_loops += 1
            else:
                out.data_dependent.append(f"{name} at {op.location}")
        elif name == "stablehlo.custom_call":
            out.custom_calls.add(str(op.attributes["call_target_name"]).strip('"'))
        elif name in ("stablehlo.send", "stablehlo.recv", "stablehlo.outfeed", "stablehlo.infeed"):
            out.host_ops.append(name)
        elif name == "func.call":
            callee = str(op.attributes["callee"]).lstrip("@")
            if callee not in seen:
                seen.add(callee)
                walk(funcs[callee].operation)
            return
        for region in op.regions:
            for block in region.blocks:
                walk_block(block)

    walk(funcs["main"].operation)
    return out


def lower(fn: Any, *args: Any, platform: str = "cuda") -> Control:
    return analyse(fn.trace(*args).lower(lowering_platforms=(platform,)))


def assert_gpu_clean(control: Control) -> None:
    assert control.data_dependent == []
    assert not any(t.startswith("gigastep") for t in control.custom_calls), control.custom_calls
    assert not any("callback" in t for t in control.custom_calls), control.custom_calls
    assert control.host_ops == []


def _batch(name: str) -> tuple[Any, Any, Any, Any]:
    env = gigastep.make_scenario(name)
    keys = jax.random.split(jax.random.PRNGKey(0), B)
    # shapes only: the programs are lowered, never run
    _, states = jax.eval_shape(partial(genv.batched_reset, env.config), keys)
    if env.config.discrete_actions:
        actions = jnp.zeros((B, env.n_agents), jnp.int32)
    else:
        actions = jnp.zeros((B, env.n_agents, 3), jnp.float32)
    return env, states, actions, keys


@pytest.mark.parametrize(
    "name", [SCENARIOS[0], *(pytest.param(name, marks=SLOW) for name in SCENARIOS[1:])]
)
def test_env_programs_have_no_data_dependent_control_flow_on_gpu(name):
    env, states, actions, keys = _batch(name)
    cfg = env.config
    programs = {
        "v_reset": (genv._v_reset, (cfg, keys)),
        "v_step": (genv._v_step, (cfg, states, actions, keys)),
        "v_step_autoreset": (genv._v_step_autoreset, (cfg, states, actions, keys, True)),
        "v_step_autoreset(final_obs=False)": (
            genv._v_step_autoreset,
            (cfg, states, actions, keys, False),
        ),
    }
    for label, (fn, args) in programs.items():
        gpu = lower(fn, *args)
        assert_gpu_clean(gpu), label
        # the platform choices (native kernels, these forms) are cases on constants, followed
        assert gpu.constant_choices > 0, label
        if label != "v_step":
            # the reset's placement rounds: one counted loop, the GPU form
            assert gpu.counted_loops >= 1, label
    # The CPU lowering keeps the CPU forms, which the analysis finds: the placement `while`
    # (and, in the auto-resetting step, the conditionals on the count of finished games).
    cpu = lower(genv._v_step_autoreset, cfg, states, actions, keys, True, platform="cpu")
    assert len([d for d in cpu.data_dependent if d.startswith("stablehlo.while")]) >= 1
    assert len([d for d in cpu.data_dependent if d.startswith("stablehlo.case")]) == 2
    if name in ("identical_5_vs_5", "identical_20_vs_20_pobs_vec_maps_disc"):
        assert any(t.startswith("gigastep") for t in cpu.custom_calls)  # the native kernels


def test_entity_observation_has_no_data_dependent_control_flow_on_gpu():
    # the entity observation (pure JAX, sorts by masks) on a map set with boxes, stochastic
    env, states, actions, keys = _batch("identical_5_vs_5_pobs_ent_maps_disc")
    cfg = env.config
    for label, (fn, args) in {
        "v_reset": (genv._v_reset, (cfg, keys)),
        "v_step": (genv._v_step, (cfg, states, actions, keys)),
    }.items():
        assert_gpu_clean(lower(fn, *args)), label


@pytest.mark.parametrize(
    "name, reset_finished_only",
    [
        (SCENARIOS[0], False),
        pytest.param(SCENARIOS[0], True, marks=SLOW),
        pytest.param(SCENARIOS[2], False, marks=SLOW),
    ],
)
def test_torch_vec_env_step_has_no_data_dependent_control_flow_on_gpu(name, reset_finished_only):
    """`TorchVecEnv`'s compiled step (`gigastep.adapters.torch._compiled_step`): on a GPU device it
    is built with reset_finished_only=False; both are checked."""
    torch_bridge = pytest.importorskip("gigastep.adapters.torch")
    env, states, actions, _ = _batch(name)
    step = torch_bridge._compiled_step(env.config, True, reset_finished_only)
    leaves = jax.tree_util.tree_leaves(states)
    assert_gpu_clean(lower(step, leaves, jax.random.PRNGKey(1), actions))


def test_rollout_has_no_data_dependent_control_flow_on_gpu():
    """`gigastep.rollout` as `jax.default_backend() == "gpu"` compiles it."""
    env, num_envs, num_steps, data, impl, policy, trajectory = grollout.check_arguments(
        SCENARIOS[0], B, 5, jax.random.PRNGKey(0), None, False
    )
    run = grollout._compiled(env.config, policy, num_envs, num_steps, trajectory, impl, "gpu")
    control = lower(run, data)
    assert_gpu_clean(control)
    assert control.counted_loops >= 2  # the steps' scan and the placement rounds


@pytest.mark.slow
def test_jax_ppo_update_has_no_data_dependent_control_flow_on_gpu():
    from baselines.config import PPOConfig
    from baselines.jax_ppo.trainer import make_setup
    from baselines.jax_ppo.update import initial_state, make_update

    config = PPOConfig(**TINY_JAX_PPO)
    setup = make_setup(config)
    state = initial_state(setup, 0)
    control = lower(jax.jit(make_update(setup)), state, np.float32(1e-3))
    assert_gpu_clean(control)
    assert control.counted_loops >= 1  # the rollout's scan over steps
