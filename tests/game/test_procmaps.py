"""Procedural obstacle maps (`gigastep.game.procmaps`, rules §6.1): one rule per test.

Layouts are drawn once per generator for N_SEEDS keys with one compiled, vmapped
`draw_layout`; the rule tests read those batches. Expected values come from the parameters
(ranges, regions) and from independent references: reachability is checked with
`scipy.ndimage.label` on a grid five times finer than the generator's, the RGB background
against `arena.prerender` of a fixed map holding the same boxes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import ndimage

import gigastep
from gigastep import EnvConfig, EnvState, MapSpec, ProcMaps
from gigastep import env as genv
from gigastep.game import arena
from gigastep.game import reset as game_reset
from gigastep.game.procmaps import builtin_generators, draw_layout, generate, mirror
from gigastep.scenarios import ScenarioBuilder, make_config, scenario_hash
from gigastep.spaces import vector_bounds
from tests.exact_runs import leaf_mismatches

N_SEEDS = 256
TOL = 1e-5
LEFT, RIGHT = (0.5, 2.5, 2.5, 7.5), (7.5, 2.5, 9.5, 7.5)

GENERATORS = {
    **builtin_generators(),
    "point_odd_slots": ProcMaps(
        name="point_odd_slots",
        slots=9,
        count=(2, 8),
        box_width=(0.3, 3.0),
        box_height=(0.3, 3.0),
        symmetry="point",
        start_team0=(0.5, 0.5, 3.0, 3.0),
        start_team1=(7.0, 7.0, 9.5, 9.5),
    ),
    "mirror_y_walls": ProcMaps(
        name="mirror_y_walls",
        slots=8,
        count=(2, 8),
        box_width=(2.0, 6.0),
        box_height=(0.3, 0.6),
        symmetry="mirror_y",
        start_team0=(2.0, 0.5, 8.0, 2.0),
        start_team1=(2.0, 8.0, 8.0, 9.5),
        margin=0.75,
    ),
    "long_walls": ProcMaps(
        name="long_walls",
        slots=6,
        count=(6, 6),
        box_width=(0.3, 0.6),
        box_height=(4.0, 9.5),
        start_team0=LEFT,
        start_team1=RIGHT,
    ),
}


def _draw_many(params: ProcMaps, n: int):
    keys = jax.random.split(jax.random.PRNGKey(7), n)
    layout = jax.jit(jax.vmap(functools.partial(draw_layout, params)))(keys)
    return jax.tree.map(np.asarray, layout)


@functools.cache
def _layouts(name: str):
    params = GENERATORS[name]
    return params, _draw_many(params, N_SEEDS)


NAMES = list(GENERATORS)


# --- the draw ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_drawn_box_count_is_uniform_over_the_count_range(name):
    params, layout = _layouts(name)
    drawn = layout.drawn.sum(1)
    lo, hi = params.count
    step = 1 if params.symmetry == "none" else 2
    assert set(np.unique(drawn)) == set(range(lo, hi + 1, step))  # each value, none outside
    assert (layout.box_valid <= layout.placed).all() and (layout.placed <= layout.drawn).all()


@pytest.mark.parametrize("name", NAMES)
def test_box_sizes_lie_within_their_ranges(name):
    params, layout = _layouts(name)
    boxes = layout.boxes[layout.box_valid]
    width, height = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert len(boxes) > 0
    assert (width >= params.box_width[0] - TOL).all() and (width <= params.box_width[1] + TOL).all()
    assert (height >= params.box_height[0] - TOL).all()
    assert (height <= params.box_height[1] + TOL).all()


@pytest.mark.parametrize("name", NAMES)
def test_boxes_lie_inside_the_world(name):
    _, layout = _layouts(name)
    boxes = layout.boxes[layout.box_valid]
    assert (boxes >= 0).all() and (boxes <= 10).all()


@pytest.mark.parametrize("name", NAMES)
def test_start_regions_are_clear_of_boxes_by_the_margin(name):
    params, layout = _layouts(name)
    m = params.margin
    for region in (params.start_team0, params.start_team1):
        x1, y1, x2, y2 = region[0] - m, region[1] - m, region[2] + m, region[3] + m
        b = layout.boxes
        meets = (b[..., 0] < x2) & (b[..., 2] > x1) & (b[..., 1] < y2) & (b[..., 3] > y1)
        assert not (meets & layout.box_valid).any()


def _connected(boxes: np.ndarray, region0, region1, cells: int = 100) -> bool:
    """Whether a path of free cells (no box interior meets the cell) joins the regions on a
    `cells` x `cells` grid of the 10 x 10 world, by connected-component labelling."""
    lo = np.arange(cells) * (10.0 / cells)
    hi = lo + 10.0 / cells
    blocked = np.zeros((cells, cells), bool)
    for x1, y1, x2, y2 in boxes:
        blocked |= ((x1 < hi) & (x2 > lo))[:, None] & ((y1 < hi) & (y2 > lo))[None, :]
    labels, _ = ndimage.label(~blocked)  # 4-connectivity

    def inside(r):
        cx, cy = (lo + hi) / 2, (lo + hi) / 2
        return ((cx > r[0]) & (cx < r[2]))[:, None] & ((cy > r[1]) & (cy < r[3]))[None, :]

    a, b = set(labels[inside(region0)].ravel()), set(labels[inside(region1)].ravel())
    return bool((a & b) - {0})


@pytest.mark.parametrize("name", NAMES)
def test_every_layout_connects_the_start_regions(name):
    params, layout = _layouts(name)
    assert N_SEEDS >= 200
    for i in range(N_SEEDS):
        boxes = layout.boxes[i][layout.box_valid[i]]
        assert _connected(boxes, params.start_team0, params.start_team1), i


def test_a_wall_sealing_a_team_in_is_removed():
    # one 0.5 x 10 wall, which must stand between the regions (x in [3, 7]) to clear them
    wall = ProcMaps(
        name="wall",
        slots=1,
        count=(1, 1),
        box_width=(0.5, 0.5),
        box_height=(10, 10),
        start_team0=LEFT,
        start_team1=RIGHT,
        tries=64,
    )
    layout = _draw_many(wall, 20)
    assert layout.placed[:, 0].all() and not layout.box_valid[:, 0].any()


def test_a_wall_leaving_a_gap_is_kept():
    # a 0.5 x 9 wall leaves 1.0 of height free; y1 in [0, 1) leaves a whole 0.5 cell free at
    # the bottom (y1 >= 0.5) or the top (y1 + 9 <= 9.5), so the regions stay connected
    wall = ProcMaps(
        name="gap",
        slots=1,
        count=(1, 1),
        box_width=(0.5, 0.5),
        box_height=(9, 9),
        start_team0=LEFT,
        start_team1=RIGHT,
        tries=64,
    )
    layout = _draw_many(wall, 20)
    assert layout.placed[:, 0].all() and layout.box_valid[:, 0].all()


def test_long_walls_are_removed_only_as_needed():
    params, layout = _layouts("long_walls")
    removed = (layout.placed & ~layout.box_valid).sum(1)
    assert removed.max() > 0  # the rule was exercised
    assert (layout.box_valid.sum(1) > 0).mean() > 0.5  # and most layouts keep some walls


@pytest.mark.parametrize("name", ["procgen_mirror", "point_odd_slots", "mirror_y_walls"])
def test_symmetric_layouts_map_onto_themselves(name):
    params, layout = _layouts(name)
    p = params.slots // 2
    np.testing.assert_array_equal(layout.box_valid[:, :p], layout.box_valid[:, p : 2 * p])
    images = np.asarray(mirror(jnp.asarray(layout.boxes[:, :p]), params.symmetry))
    valid = layout.box_valid[:, :p]
    np.testing.assert_allclose(images[valid], layout.boxes[:, p : 2 * p][valid], atol=TOL)
    assert not layout.box_valid[:, 2 * p :].any()  # an odd last slot stays padding


@pytest.mark.parametrize("name", NAMES)
def test_padding_keeps_the_shape_and_is_zero(name):
    params, layout = _layouts(name)
    assert layout.boxes.shape == (N_SEEDS, params.slots, 4)
    assert layout.box_valid.shape == (N_SEEDS, params.slots)
    assert (layout.boxes[~layout.box_valid] == 0).all()


def test_the_layout_is_a_pure_function_of_the_key():
    params = GENERATORS["procgen_dense"]
    key = jax.random.PRNGKey(11)
    eager = draw_layout(params, key)
    jitted = jax.jit(functools.partial(draw_layout, params))(key)
    batched = jax.jit(jax.vmap(functools.partial(draw_layout, params)))(key[None])
    assert leaf_mismatches(jitted, eager, strict=True) == []  # bit for bit
    assert leaf_mismatches(jax.tree.map(lambda v: v[0], batched), eager, strict=True) == []
    boxes = generate(params, 11)
    np.testing.assert_array_equal(boxes, np.asarray(eager.boxes)[np.asarray(eager.box_valid)])
    assert not np.array_equal(boxes, generate(params, 12))


# --- parameters and names ------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"count": (4, 2)}, "lo <= hi"),
        ({"count": (2, 9)}, "hi <= slots"),
        ({"box_width": (2.0, 1.0)}, "box_width"),
        ({"box_height": (0.0, 1.0)}, "0 < lo"),
        ({"start_team0": (1.0, 1.0, 11.0, 4.0)}, "outside the world"),
        ({"start_team1": (5.0, 1.0, 4.0, 4.0)}, "x1 < x2"),
        ({"symmetry": "mirorr_x"}, "closest: 'mirror_x'"),
        ({"symmetry": "point", "count": (1, 4)}, "even"),
        ({"margin": 0.1}, "margin"),
        ({"slots": 0}, "slots"),
    ],
)
def test_bad_generator_parameters_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        ProcMaps(name="bad", **fields)


def test_an_unknown_map_name_lists_the_closest_generators():
    with pytest.raises(ValueError, match="procgen_dense"):
        EnvConfig(map_set="procgen_dnse")
    with pytest.raises(ValueError, match="procgen_dense"):
        ScenarioBuilder("x").set_map("procgen_dnse")


def test_a_generator_is_chosen_by_name_in_a_scenario_file(tmp_path):
    path = tmp_path / "duel.toml"
    path.write_text(
        '[scenarios.duel]\nteam0 = ["default"]\nteam1 = ["default"]\nmap = "procgen_sparse"\n'
    )
    config = make_config(str(path))
    assert config.map_generator == builtin_generators()["procgen_sparse"]
    assert config.max_boxes == config.map_generator.slots
    built = ScenarioBuilder("b").add_type(0, "default").add_type(1, "default")
    assert built.set_map("procgen_mirror").config().map_set == "procgen_mirror"


def test_a_scenario_file_defines_its_own_generator(tmp_path):
    path = tmp_path / "walls.toml"
    path.write_text(
        "[generators.walls]\nslots = 4\ncount = [2, 4]\nbox_width = [0.3, 0.5]\n"
        'box_height = [2, 4]\nsymmetry = "point"\n'
        "start_team0 = [0.5, 0.5, 2.5, 2.5]\nstart_team1 = [7.5, 7.5, 9.5, 9.5]\n"
        '[scenarios.duel]\nteam0 = ["default"]\nteam1 = ["default"]\nmap = "walls"\n'
    )
    config = make_config(str(path))
    assert config.map_generator.name == "walls" and config.map_generator.symmetry == "point"
    assert config.max_boxes == 4 and config.map_set == "walls"


@pytest.mark.parametrize(
    "table, map_choice, message",
    [
        ("[generators.procgen_dense]\nslots = 4\n", '"procgen_dense"', "built in"),
        ("[generators.g]\nslots = 4\ncount = [5, 6]\n", '"g"', "hi <= slots"),
        ("[generators.g]\nslot = 4\n", '"g"', "closest: 'slots'"),
        ("", '["empty", "procgen_dense"]', "choose it alone"),
    ],
)
def test_a_bad_generator_in_a_scenario_file_is_refused(tmp_path, table, map_choice, message):
    path = tmp_path / "bad.toml"
    path.write_text(
        f'{table}[scenarios.duel]\nteam0 = ["default"]\nteam1 = ["default"]\nmap = {map_choice}\n'
    )
    with pytest.raises(ValueError, match=message):
        make_config(str(path))


def test_a_map_set_change_replaces_the_generator_and_back():
    config = EnvConfig(teams=(0, 1), map_set="procgen_dense")
    fixed = config.replace(map_set="all")
    assert fixed.map_generator is None and len(fixed.maps) == 8
    assert fixed.replace(map_set="procgen_dense") == config
    assert config.replace(map_generator=None).map_generator is None


def test_configs_without_a_generator_keep_their_hash_form():
    config = make_config("identical_5_vs_5")
    from gigastep.scenarios.hashing import _canonical

    assert "map_generator" not in _canonical(config)
    with_gen = config.replace(map_generator=GENERATORS["procgen_dense"])
    assert scenario_hash(with_gen) != scenario_hash(config)


# --- in the game ---------------------------------------------------------------------------

SMALL = dict(teams=(0, 0, 1, 1), resolution_x=32, resolution_y=32, limit_x=12.0, limit_y=8.0)


@functools.cache
def _batch(obs_type: str, name: str = "procgen_dense"):
    config = EnvConfig(obs_type=obs_type, map_set=name, **SMALL)
    keys = jax.random.split(jax.random.PRNGKey(3), 8)
    obs, states = jax.jit(functools.partial(genv.batched_reset, config))(keys)
    return config, keys, obs, states


def test_a_reset_stores_the_boxes_the_generator_draws_from_the_map_key():
    config, keys, _, states = _batch("vector")
    for i, key in enumerate(keys):
        k_map = game_reset.reset_keys(key)[0]
        boxes, valid = arena.generated_boxes(config, jax.random.fold_in(k_map, 1))
        np.testing.assert_array_equal(states.episode.boxes[i], boxes)
        np.testing.assert_array_equal(states.episode.box_valid[i], valid)
    assert states.episode.boxes.shape == (8, config.max_boxes, 4)


def test_agents_start_in_their_regions_clear_of_the_drawn_boxes():
    config, _, _, states = _batch("vector")
    a, ep = states.agents, states.episode
    boxes, valid = np.asarray(ep.boxes), np.asarray(ep.box_valid)
    x, y = np.asarray(a.x)[:, :, None], np.asarray(a.y)[:, :, None]
    inside = (x > boxes[:, None, :, 0]) & (x < boxes[:, None, :, 2])
    inside &= (y > boxes[:, None, :, 1]) & (y < boxes[:, None, :, 3])
    assert not (inside & valid[:, None, :]).any()
    sx = config.limit_x / 10
    team0 = np.asarray(config.teams) == 0
    assert (np.asarray(a.x)[:, team0] < 2.5 * sx + TOL).all()


def test_an_agent_inside_a_drawn_box_dies():
    config, _, _, states = _batch("vector")
    one = jax.tree.map(lambda v: v[0], states)
    b = np.asarray(one.episode.boxes)[np.asarray(one.episode.box_valid)][0]
    cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
    agents = one.agents.replace(
        x=one.agents.x.at[0].set(cx), y=one.agents.y.at[0].set(cy), v=one.agents.v.at[0].set(0.0)
    )
    state = one.replace(agents=agents)
    actions = jnp.zeros((config.n_agents, 3), jnp.float32)
    step = jax.jit(functools.partial(genv.step, config))
    _, after, *_ = step(state, actions, jax.random.PRNGKey(0))
    assert not bool(after.agents.alive[0])


def test_the_vector_observation_shows_the_drawn_boxes():
    config, _, obs, states = _batch("vector")
    boxes = np.asarray(states.episode.boxes)
    scale = np.asarray([config.limit_x, config.limit_y] * 2, np.float32)
    want = (boxes / scale).reshape(8, -1)
    tail = np.asarray(obs)[:, 0, -4 * config.max_boxes :]
    np.testing.assert_allclose(tail, want, rtol=1e-6)  # x / limit may be x * (1 / limit)
    low, high = vector_bounds(config)
    assert (np.asarray(obs) >= low).all() and (np.asarray(obs) <= high).all()


def test_rgb_draws_the_drawn_boxes_as_the_prerender_does():
    # in a 10 x 10 world the scale is 1: the prerender of a fixed map holding the same boxes
    # sees the same float32 corners, so the images must agree pixel for pixel
    unit = EnvConfig(obs_type="rgb", teams=(0, 1), resolution_x=37, resolution_y=29)
    for seed in range(6):
        boxes = generate(GENERATORS["procgen_dense"], seed)
        spec = MapSpec(name="same", boxes=tuple(map(tuple, boxes.tolist())))
        want = arena.prerender(unit.replace(maps=(spec,)))[0]
        got = arena.draw_boxes(unit, jnp.asarray(boxes), jnp.ones(len(boxes), bool))
        np.testing.assert_array_equal(np.asarray(got), want)


def test_rgb_images_of_a_drawn_map_equal_those_of_the_same_fixed_map():
    config, _, obs, states = _batch("rgb")
    unit = dict(SMALL, limit_x=10.0, limit_y=10.0, obs_type="rgb")
    gen_config = EnvConfig(map_set="procgen_dense", **unit)
    ep = jax.tree.map(lambda v: v[0], states.episode)
    ref = np.asarray([config.limit_x, config.limit_y] * 2) / 10.0
    boxes = np.asarray(ep.boxes) / ref  # the same boxes in a 10 x 10 world (scale 1)
    spec = MapSpec(name="same", boxes=tuple(map(tuple, boxes[np.asarray(ep.box_valid)].tolist())))
    fixed_config = EnvConfig(maps=(spec,), **unit)
    state = EnvState.create(
        fixed_config, x=[1.0, 1.5, 8.5, 9.0], y=[3.0, 6.0, 4.0, 7.0], heading=[0.0, 0.3, 3.0, 2.5]
    )
    b = (
        jnp.zeros((gen_config.max_boxes, 4), jnp.float32)
        .at[: len(spec.boxes)]
        .set(jnp.asarray(spec.boxes, jnp.float32))
    )
    v = jnp.arange(gen_config.max_boxes) < len(spec.boxes)
    drawn = state.replace(episode=state.episode.replace(boxes=b, box_valid=v))
    comm = jnp.zeros((4, 4))
    from gigastep.game.observations import first_observation, global_view

    np.testing.assert_array_equal(
        first_observation(gen_config, drawn, comm), first_observation(fixed_config, state, comm)
    )
    np.testing.assert_array_equal(global_view(gen_config, drawn), global_view(fixed_config, state))


@pytest.mark.slow
def test_native_and_jax_paths_give_identical_episodes_on_a_drawn_map(monkeypatch):
    config, keys, _, states = _batch("rgb_vector")
    actions = jax.random.uniform(jax.random.PRNGKey(4), (8, 4, 3), minval=-1, maxval=1)

    def run(keys, actions):
        obs, s = genv.batched_reset(config, keys)
        for t in range(3):
            ks = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, t)
            obs, s, *_ = genv.batched_step(config, s, actions, ks)
        return obs, s

    native = jax.jit(lambda *a: run(*a))(keys, actions)
    monkeypatch.setenv("GIGASTEP_NATIVE", "0")
    pure = jax.jit(lambda *a: run(*a))(keys, actions)
    assert leaf_mismatches(native, pure, strict=False) == []


def test_a_hand_made_state_of_a_generator_config_has_the_reset_state_leaves():
    config, _, _, states = _batch("vector")
    made = EnvState.create(config, x=[1.0, 1.0, 9.0, 9.0], y=[3.0, 6.0, 3.0, 6.0])
    one = jax.tree.map(lambda v: v[0], states)
    assert jax.tree.structure(made) == jax.tree.structure(one)
    assert [v.shape for v in jax.tree.leaves(made)] == [v.shape for v in jax.tree.leaves(one)]
    assert not bool(made.episode.box_valid.any())


def test_a_state_with_a_drawn_map_saves_and_loads(tmp_path):
    from gigastep.viz.replay import load_state, save_state

    _, _, _, states = _batch("vector")
    save_state(states, tmp_path / "s.npz")
    back = load_state(tmp_path / "s.npz")
    assert leaf_mismatches(back, states, strict=True) == []


def test_fixed_maps_keep_their_state_leaves():
    config = EnvConfig(teams=(0, 1), obs_type="vector", map_set="all")
    _, state = genv.reset(config, jax.random.PRNGKey(0))
    assert state.episode.boxes is None and state.episode.box_valid is None
    assert len(jax.tree.leaves(state.episode)) == 6


def test_the_reset_and_step_lower_for_gpus_without_data_dependent_control_flow():
    from tests.game.test_gpu_lowering import assert_gpu_clean, lower

    config = EnvConfig(obs_type="rgb_vector", map_set="procgen_mirror", **SMALL)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    control = lower(genv._v_reset, config, keys)
    assert_gpu_clean(control)
    assert control.counted_loops >= 2  # the flood fill and the placement rounds
    _, states = jax.eval_shape(functools.partial(genv.batched_reset, config), keys)
    actions = jnp.zeros((4, config.n_agents, 3), jnp.float32)
    step = lower(genv._v_step_autoreset, config, states, actions, keys, True)
    assert_gpu_clean(step)  # the reset inside, and the images painted from the drawn boxes


def test_the_entity_observation_of_a_drawn_map_stays_within_its_bounds():
    from gigastep.spaces import entity_bounds

    config, keys, _, _ = _batch("entity")
    low, high = entity_bounds(config)
    obs, states = jax.jit(functools.partial(genv.batched_reset, config))(keys)
    actions = jax.random.uniform(jax.random.PRNGKey(2), (8, 4, 3), minval=-1, maxval=1)
    step = jax.jit(functools.partial(genv.batched_step, config))
    for t in range(3):
        assert (np.asarray(obs) >= low).all() and (np.asarray(obs) <= high).all(), t
        obs, states, *_ = step(states, actions, jax.vmap(jax.random.fold_in, (0, None))(keys, t))


# --- level seeds ------------------------------------------------------------------------


def _drawn_layouts(env, keys):
    _, states = env.v_reset(keys)
    scale = 10.0 / env.config.limit_x
    out = []
    boxes, valid = np.asarray(states.episode.boxes), np.asarray(states.episode.box_valid)
    for b, v in zip(boxes, valid, strict=True):
        out.append((b[v] * scale).tobytes())
    return out


def test_a_single_level_seed_plays_the_layout_generate_draws_from_it():
    env = gigastep.make(
        "identical_2_vs_2_fobs_vec_void_disc",
        map_generator={"base": "procgen_dense", "seeds": [5, 6]},
    )
    want = generate(env.config.map_generator, 5).tobytes()
    assert set(_drawn_layouts(env, jax.random.split(jax.random.PRNGKey(0), 8))) == {want}


def test_a_seed_range_plays_exactly_its_levels():
    env = gigastep.make(
        "identical_2_vs_2_fobs_vec_void_disc",
        map_generator={"base": "procgen_dense", "seeds": [0, 4]},
    )
    levels = {generate(env.config.map_generator, s).tobytes() for s in range(4)}
    assert len(levels) == 4  # four different layouts
    # 64 resets miss one of 4 levels with probability 4 * (3/4)^64 < 1e-7
    assert set(_drawn_layouts(env, jax.random.split(jax.random.PRNGKey(1), 64))) == levels


@pytest.mark.parametrize(
    "table, error",
    [
        ({"seeds": [3, 3]}, "0 <= lo < hi"),
        ({"seeds": [-1, 2]}, "0 <= lo < hi"),
        ({"seeds": "0-4"}, "two integers"),
        ({"base": "procgen_dens"}, "unknown base generator 'procgen_dens'.*procgen_dense"),
        ({"seed": [0, 4]}, "unknown field 'seed'.*seeds"),
    ],
)
def test_bad_level_seeds_and_generator_tables_are_named(table, error):
    with pytest.raises((TypeError, ValueError), match=error):
        gigastep.make("identical_2_vs_2_fobs_vec_void_disc", map_generator=table)
