"""RGB observations and the global view (rules §5.3, §5.4, §13.4 with §15 rows 12, 14-20).

Both renderers, the JAX drawing (`rgb_observations`, what GPUs run) and the CPU kernel
(`native_rgb_observations`, what a CPU step runs), are called directly on hand-built states
(`EnvState.create`) with a hand-chosen `seen` matrix and `took_damage` flags. Expected images
are built by hand from the rules below; the randomised test compares with `_reference_*`, a
plain per-pixel NumPy transcription of §5.3 / §5.4 written from the rules, not from the code
under test.

Conventions (rules §0): img[px, py, c], first axis world x; px = round(x * (res_x / limit_x))
(round half to even, the scale one float32 constant), pz = round(z * 255 / z_max).
Colours: W = white, R_ = the damaged border (255, 0, 0), G_ = a green health-bar pixel.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.game.arena import prerender
from gigastep.game.observations.rgb import global_view, native_rgb_observations, rgb_observations
from gigastep.types import EnvConfig, EnvState, MapSpec

W = (255, 255, 255)
R_ = (255, 0, 0)
G_ = (0, 255, 0)
BLACK = (0, 0, 0)
HALF_PI = math.pi / 2


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------


def _config(**fields) -> EnvConfig:
    base = dict(teams=(0, 1), map_set="empty", resolution_x=12, resolution_y=12)
    base.update(fields)
    return EnvConfig(**base)


def _ego_renderer(name: str, request):
    """The ego-image renderer called `name` ("jax" or "native"); skips where the native
    kernels are switched off or cannot be built (the `native` fixture)."""
    if name == "jax":
        return rgb_observations
    request.getfixturevalue("native")
    return native_rgb_observations


RENDERERS = ["jax", "native"]


class _Renderer:
    """jit-compiled renderers, one compilation per config (configs are hashable)."""

    def __init__(self, ego_fn=rgb_observations):
        self._cache = {}
        self._ego_fn = ego_fn

    def _fns(self, config):
        if config not in self._cache:
            bg = jnp.asarray(prerender(config))
            draw = self._ego_fn
            ego = jax.jit(lambda a, e, s, d: draw(config, bg, a, e, s, d))
            top = jax.jit(lambda a, e: global_view(config, bg, a, e))
            self._cache[config] = (ego, top)
        return self._cache[config]

    def ego(self, config, state, seen, took_damage=None) -> np.ndarray:
        n = config.n_agents
        dmg = np.zeros(n, bool) if took_damage is None else np.asarray(took_damage, bool)
        out = self._fns(config)[0](state.agents, state.episode, jnp.asarray(seen, bool), dmg)
        return np.asarray(out)

    def top(self, config, state) -> np.ndarray:
        return np.asarray(self._fns(config)[1](state.agents, state.episode))


@pytest.fixture(scope="module", params=RENDERERS)
def render(request) -> _Renderer:
    return _Renderer(_ego_renderer(request.param, request))


def _ego_frame(rx, ry, damaged=False, cut=None) -> np.ndarray:
    """By hand: black map, border on px = 0, px = rx - 1, py = 0 (white, or red if damaged),
    health bar on py = ry - 1: green for px < cut, white from cut on (cut None: all green)."""
    img = np.zeros((rx, ry, 3), np.uint8)
    edge = R_ if damaged else W
    img[:, 0] = edge
    img[0, :] = edge
    img[rx - 1, :] = edge
    cut = rx if cut is None else cut
    img[:cut, ry - 1] = G_
    img[cut:, ry - 1] = W
    return img


def _top_frame(rx, ry) -> np.ndarray:
    """By hand: black map with all four edges white."""
    img = np.zeros((rx, ry, 3), np.uint8)
    img[:, 0] = img[:, ry - 1] = img[0, :] = img[rx - 1, :] = W
    return img


def _paint(img, pixels: dict) -> np.ndarray:
    img = img.copy()
    for colour, points in pixels.items():
        for p in points:
            img[p] = colour
    return img


def _assert_image(actual, expected):
    diff = np.argwhere(np.any(actual != expected, axis=-1))
    detail = [(tuple(p), tuple(actual[tuple(p)]), tuple(expected[tuple(p)])) for p in diff[:8]]
    assert diff.size == 0, f"{len(diff)} pixels differ, (pixel, actual, expected): {detail}"


# ------------------------------------------------------------------------------------------
# §13.4: the 12 x 12 example (unchanged by §15 except the health bar length, = res_x here)
# ------------------------------------------------------------------------------------------

CFG_134 = _config(sprites=(3, 5), max_health=(2.0, 1.0))


def _state_134(**fields):
    # Agent 0 at pixel (6, 6), pz = round(127.5) = 128; agent 1 at (round(7.8), 6) = (8, 6),
    # pz = 255, heading pi / 2 (tails along -y).
    base = dict(
        x=[5.0, 6.5], y=[5.0, 5.0], z=[5.0, 10.0], heading=[0.0, HALF_PI], health=[1.5, 1.0]
    )
    base.update(fields)
    return EnvState.create(CFG_134, **base)


SEEN_134 = [[True, True], [False, True]]  # agent 0 detects agent 1; ego 1 does not see agent 0


def test_example_13_4_undamaged_ego_sees_both(render):
    # cut = trunc(12 * 1.5 / 2) = 9. Ego 0's tails k = 1..4 at (6 - k, 6): blue add I_k then
    # max I_k -> grey I_k; (5, 6) is also a plus arm: max((204,204,204), (127,255,127)).
    # Agent 1 (enemy, seen): tails (8, 6 - k) red I_k; x sprite colour (255, 255, 0).
    expected = _paint(
        _ego_frame(12, 12, cut=9),
        {
            (51, 51, 51): [(2, 6)],
            (102, 102, 102): [(3, 6)],
            (153, 153, 153): [(4, 6)],
            (204, 255, 204): [(5, 6)],
            (127, 255, 127): [(6, 5), (6, 6), (6, 7), (7, 6)],
            (255, 255, 0): [(7, 5), (7, 7), (8, 6), (9, 5), (9, 7)],
            (204, 0, 0): [(8, 5)],
            (153, 0, 0): [(8, 4)],
            (102, 0, 0): [(8, 3)],
            (51, 0, 0): [(8, 2)],
        },
    )
    obs = render.ego(CFG_134, _state_134(), SEEN_134, [False, True])
    _assert_image(obs[0], expected)


def test_example_13_4_damaged_ego_has_red_border_and_own_colour(render):
    # Ego 1: full health (cut 12, all green); own x sprite (255 - 255, 255, 255 - 255); own
    # tails grey at (8, 6 - k); agent 0 unseen: not drawn.
    expected = _paint(
        _ego_frame(12, 12, damaged=True),
        {
            (0, 255, 0): [(7, 5), (7, 7), (8, 6), (9, 5), (9, 7)],
            (204, 204, 204): [(8, 5)],
            (153, 153, 153): [(8, 4)],
            (102, 102, 102): [(8, 3)],
            (51, 51, 51): [(8, 2)],
        },
    )
    obs = render.ego(CFG_134, _state_134(), SEEN_134, [False, True])
    _assert_image(obs[1], expected)


def test_example_13_4_global_view(render):
    # Team 0 blue tails and colour (0, 128, 255); team 1 red tails and (255, 255, 0).
    expected = _paint(
        _top_frame(12, 12),
        {
            (0, 0, 51): [(2, 6)],
            (0, 0, 102): [(3, 6)],
            (0, 0, 153): [(4, 6)],
            (0, 128, 255): [(5, 6), (6, 5), (6, 6), (6, 7), (7, 6)],
            (255, 255, 0): [(7, 5), (7, 7), (8, 6), (9, 5), (9, 7)],
            (204, 0, 0): [(8, 5)],
            (153, 0, 0): [(8, 4)],
            (102, 0, 0): [(8, 3)],
            (51, 0, 0): [(8, 2)],
        },
    )
    _assert_image(render.top(CFG_134, _state_134()), expected)


# ------------------------------------------------------------------------------------------
# One rule per test
# ------------------------------------------------------------------------------------------


def test_unseen_agent_is_not_drawn(render):
    # The §13.4 state, but ego 0 does not see agent 1: neither its sprite nor its tails appear.
    expected = _paint(
        _ego_frame(12, 12, cut=9),
        {
            (51, 51, 51): [(2, 6)],
            (102, 102, 102): [(3, 6)],
            (153, 153, 153): [(4, 6)],
            (204, 255, 204): [(5, 6)],
            (127, 255, 127): [(6, 5), (6, 6), (6, 7), (7, 6)],
        },
    )
    obs = render.ego(CFG_134, _state_134(), [[True, False], [False, True]])
    _assert_image(obs[0], expected)


def test_dead_ego_image_is_all_zeros(render):
    state = _state_134(alive=[False, True])
    obs = render.ego(CFG_134, state, [[False, False], [False, True]])
    assert not obs[0].any()
    assert obs[1].any()


def test_dead_agent_is_invisible_in_global_view(render):
    # Agent 1 dead: no sprite, no tail; agent 0 drawn as in §13.4.
    expected = _paint(
        _top_frame(12, 12),
        {
            (0, 0, 51): [(2, 6)],
            (0, 0, 102): [(3, 6)],
            (0, 0, 153): [(4, 6)],
            (0, 128, 255): [(5, 6), (6, 5), (6, 6), (6, 7), (7, 6)],
        },
    )
    _assert_image(render.top(CFG_134, _state_134(alive=[True, False])), expected)


def test_red_border_shows_the_map_in_green_and_blue(render):
    # A box over [0, 2) x [0, 2) pixels (grey 127): on the damaged border those pixels read
    # (255, 127, 127); undamaged they are white. Agents far away in the interior.
    corner = MapSpec(name="corner", boxes=((0.0, 0.0, 2.0, 2.0),))
    cfg = _config(maps=(corner,))
    state = EnvState.create(cfg, x=[5.0, 7.5], y=[5.0, 5.0])
    obs = render.ego(cfg, state, [[True, False], [False, True]], took_damage=[True, False])
    for p in [(0, 0), (1, 0), (0, 1)]:
        assert tuple(obs[1][p]) == W, p
    # Ego 0 in full (a single-map set): its own grey tails (6 - k, 6) and white dot (6, 6).
    expected = _paint(
        _ego_frame(12, 12, damaged=True),
        {
            (255, 127, 127): [(0, 0), (1, 0), (0, 1)],
            (127, 127, 127): [(1, 1)],
            (51, 51, 51): [(2, 6)],
            (102, 102, 102): [(3, 6)],
            (153, 153, 153): [(4, 6)],
            (204, 204, 204): [(5, 6)],
            W: [(6, 6)],
        },
    )
    _assert_image(obs[0], expected)


def test_border_is_on_three_edges_and_health_bar_on_the_fourth(render):
    # Non-square 12 x 16: the bar runs along py = 15 over px = 0..11 (§15 rows 15, 17).
    # Agent 0: max health 3, health 1 -> cut = trunc(1 * 12 / 3) = 4.
    cfg = _config(resolution_y=16, max_health=(3.0, 1.0))
    state = EnvState.create(cfg, x=[5.0, 7.5], y=[5.0, 5.0], health=[1.0, 1.0])
    obs = render.ego(cfg, state, [[True, False], [False, True]])
    assert obs.shape == (2, 12, 16, 3) and obs.dtype == np.uint8
    img = obs[0]
    assert all(tuple(img[px, 0]) == W for px in range(12))
    assert all(tuple(img[0, py]) == W and tuple(img[11, py]) == W for py in range(15))
    assert [tuple(img[px, 15]) for px in range(12)] == [G_] * 4 + [W] * 8


def test_tails_clip_each_axis_to_its_own_resolution(render):
    # 12 x 16. Enemy (agent 1, seen) at (6, 14) heading pi/2: tails (6, 14 - k) = (6, 13..10),
    # which clipping y to res_x - 1 = 11 would merge (§15 row 15).
    cfg = _config(resolution_y=16)
    state = EnvState.create(cfg, x=[7.5, 5.0], y=[5.0, 8.75], heading=[0.0, HALF_PI])
    img = render.ego(cfg, state, [[True, True], [False, True]])[0]
    assert [tuple(img[6, py]) for py in (13, 12, 11, 10)] == [
        (204, 0, 0),
        (153, 0, 0),
        (102, 0, 0),
        (51, 0, 0),
    ]


@pytest.mark.parametrize(
    "sprite, offsets",
    [
        (1, {(0, 0)}),
        (3, {(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)}),
        (5, {(0, 0), (1, 1), (1, -1), (-1, 1), (-1, -1)}),
        (6, {(1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1), (-1, -1)}),
        (7, {(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1)}),
    ],
)
def test_sprite_masks_light_their_pixels(render, sprite, offsets):
    # Global view, 20 x 20 (scale 2): one team-1 agent at pixel (10, 10), z = 10 (pz = 255).
    # Its colour (255, 255, 0) is the only source of green; tails only touch R.
    cfg = _config(teams=(1,), sprites=(sprite,), resolution_x=20, resolution_y=20)
    state = EnvState.create(cfg, x=[5.0], y=[5.0], z=[10.0], heading=[HALF_PI])
    img = render.top(cfg, state)[1:19, 1:19]  # interior
    lit = {(int(px) + 1 - 10, int(py) + 1 - 10) for px, py in np.argwhere(img[..., 1] > 0)}
    assert lit == offsets


def test_sprite_at_pixel_0_0_is_dropped_not_wrapped(render):
    # Damaged ego (red border, full health: green bar) with sprite 7 at pixel (0, 0), z = 0:
    # colour (255, 255, 255) on (0..1, 0..1) only. Wrapped arms would whiten (11, 0), (11, 1),
    # (0, 11), (1, 11) and (11, 11).
    cfg = _config(teams=(0,), sprites=(7,))
    state = EnvState.create(cfg, x=[0.0], y=[0.0])
    img = render.ego(cfg, state, [[True]], took_damage=[True])[0]
    expected = _paint(_ego_frame(12, 12, damaged=True), {W: [(0, 0), (1, 0), (0, 1), (1, 1)]})
    _assert_image(img, expected)


def test_agent_left_of_the_image_lights_nothing(render):
    # Global view: agent at x = -1.25 -> px = round(-1.5) = -2, sprite 7 covers px -3..-1:
    # nothing is drawn (no wrap to px 9..11). Its tails are clipped to px = 0 and add red to
    # the white border, which saturates at 255 (§15 row 16): the image is the bare frame.
    cfg = _config(teams=(1,), sprites=(7,))
    state = EnvState.create(cfg, x=[-1.25], y=[5.0], heading=[0.0])
    _assert_image(render.top(cfg, state), _top_frame(12, 12))


def test_tail_on_white_border_saturates(render):
    # Seen enemy at pixel (1, 6), heading 0: tails at px 1 - k, clipped to 0, all on (0, 6)
    # of the white border: 255 + 204 + ... saturates to 255 (the original wrapped to 203).
    cfg = _config(sprites=(1, 1))
    state = EnvState.create(cfg, x=[7.5, 0.8], y=[5.0, 5.0], heading=[0.0, 0.0])
    img = render.ego(cfg, state, [[True, True], [False, True]])[0]
    assert tuple(img[0, 6]) == W


def test_overlapping_tails_saturate(render):
    # Two seen enemies with the same pixel and heading: their tails coincide and add twice:
    # k = 1: 204 + 204 -> 255; k = 2: 153 + 153 -> 255; k = 3: 204; k = 4: 102.
    cfg = _config(teams=(0, 1, 1), sprites=(1, 1, 1))
    state = EnvState.create(cfg, x=[2.5, 7.5, 7.5], y=[2.5, 5.0, 5.0], heading=[0.0, 0.0, 0.0])
    img = render.ego(cfg, state, np.ones((3, 3), bool))[0]
    assert [int(img[9 - k, 6, 0]) for k in (1, 2, 3, 4)] == [255, 255, 204, 102]


def test_green_channel_is_altitude_times_seen(render):
    # §15 row 20: an unseen teammate is not drawn at all (G = pz * seen = 0); a seen one shows
    # its altitude. Teammate at pixel (9, 6) with z = 4 -> pz = round(102.0) = 102, blue.
    cfg = _config(teams=(0, 0), sprites=(1, 1))
    state = EnvState.create(cfg, x=[2.5, 7.5], y=[5.0, 5.0], z=[0.0, 4.0])
    seen_mate = render.ego(cfg, state, [[True, True], [True, True]])[0]
    unseen_mate = render.ego(cfg, state, [[True, False], [True, True]])[0]
    assert tuple(seen_mate[9, 6]) == (0, 102, 255)
    assert tuple(unseen_mate[9, 6]) == BLACK


def test_ego_centre_is_reset_before_sprites(render):
    # Ego with sprite 6 (ring without centre) at pixel (6, 6); a seen teammate at (7, 6) with
    # heading 0 puts its first tail (blue 204) on (6, 6). The centre is set to black after the
    # tails and no sprite covers it, so it stays black.
    cfg = _config(teams=(0, 0), sprites=(6, 1))
    state = EnvState.create(cfg, x=[5.0, 5.0 + 1 / 1.2], y=[5.0, 5.0], heading=[HALF_PI, 0.0])
    img = render.ego(cfg, state, np.ones((2, 2), bool))[0]
    assert tuple(img[6, 6]) == BLACK
    assert tuple(img[6, 6 - 1]) != BLACK  # a ring pixel


WP_CFG = _config(enable_waypoints=True, waypoint_size=2.0, sprites=(1, 1))


def _wp_state(time, waypoint=(2.5, 5.0, 4.5, 7.0)):
    return EnvState.create(
        WP_CFG, x=[7.5, 8.3], y=[2.5, 2.5], waypoint=waypoint, waypoint_time=time
    )


def test_active_waypoint_is_drawn_magenta(render):
    # size n = max(trunc(2 * 12 / 10), 1) = 2; start (round(3.0), round(6.0)) = (3, 6).
    square = [(3, 6), (4, 6), (3, 7), (4, 7)]
    ego = render.ego(WP_CFG, _wp_state(1.0), [[True, False], [False, True]])[0]
    top = render.top(WP_CFG, _wp_state(1.0))
    for img in (ego, top):
        assert all(tuple(img[p]) == (127, 0, 127) for p in square)
        assert tuple(img[5, 6]) == BLACK and tuple(img[3, 8]) == BLACK and tuple(img[2, 6]) == BLACK


def test_inactive_waypoint_is_not_drawn(render):
    # §15 row 12: nothing, not even black (at its last location, or at the origin corner).
    for waypoint in [(2.5, 5.0, 4.5, 7.0), (0.0, 0.0, 0.0, 0.0)]:
        state = _wp_state(0.0, waypoint)
        ego = render.ego(WP_CFG, state, [[True, False], [False, True]])[0]
        top = render.top(WP_CFG, state)
        assert tuple(ego[3, 6]) == BLACK and tuple(top[3, 6]) == BLACK
        assert tuple(ego[0, 0]) == W and tuple(top[0, 0]) == W


def test_small_waypoint_is_one_pixel(render):
    # Default size 0.6: trunc(0.6 * 12 / 10) = 0 -> max(0, 1) = 1 pixel at (3, 6).
    cfg = _config(enable_waypoints=True)
    state = EnvState.create(
        cfg, x=[7.5, 8.3], y=[2.5, 2.5], waypoint=(2.5, 5.0, 3.1, 5.6), waypoint_time=1.0
    )
    img = render.top(cfg, state)
    lit = {tuple(int(v) for v in p) for p in np.argwhere(img[1:11, 1:11].any(-1)) + 1}
    assert (3, 6) in lit and not {(4, 6), (3, 7), (4, 7)} & lit


def test_waypoint_is_under_the_health_bar_and_over_the_border(render):
    # Square (3..4, 10..11) reaches the bar edge py = 11: the ego view shows the bar there, the
    # global view (no bar, white edge drawn first) shows the waypoint.
    state = _wp_state(1.0, waypoint=(2.5, 8.4, 4.5, 10.0))  # sy = round(10.08) = 10
    ego = render.ego(WP_CFG, state, [[True, False], [False, True]])[0]
    top = render.top(WP_CFG, state)
    assert tuple(ego[3, 10]) == (127, 0, 127) and tuple(ego[3, 11]) == G_
    assert tuple(top[3, 10]) == (127, 0, 127) and tuple(top[3, 11]) == (127, 0, 127)


def test_shapes_and_dtypes(render):
    cfg = _config(teams=(0, 0, 1), resolution_x=10, resolution_y=14)
    state = EnvState.create(cfg, x=[2.0, 5.0, 8.0], y=[5.0, 5.0, 5.0])
    obs = render.ego(cfg, state, np.ones((3, 3), bool))
    top = render.top(cfg, state)
    assert obs.shape == (3, 10, 14, 3) and obs.dtype == np.uint8
    assert top.shape == (10, 14, 3) and top.dtype == np.uint8


# ------------------------------------------------------------------------------------------
# Randomised: jit == eager == a plain NumPy transcription of the rules, batched under vmap
# ------------------------------------------------------------------------------------------

TAILS = (204, 153, 102, 51)
OFFSETS = {
    1: [(0, 0)],
    2: [(1, 0), (-1, 0), (0, 1), (0, -1)],
    4: [(1, 1), (1, -1), (-1, 1), (-1, -1)],
}


def _pixels(cfg, s):
    f32 = np.float32
    sx, sy = f32(cfg.resolution_x / cfg.limit_x), f32(cfg.resolution_y / cfg.limit_y)
    px = np.round(s["x"].astype(f32) * sx).astype(int)
    py = np.round(s["y"].astype(f32) * sy).astype(int)
    pz = np.round(s["z"].astype(f32) * f32(255 / cfg.z_max)).astype(int)
    return px, py, pz


def _tail(cfg, px, py, h, k):
    f32 = np.float32
    tx = np.clip(f32(px) - f32(k) * np.cos(f32(h)), 0, cfg.resolution_x - 1)
    ty = np.clip(f32(py) - f32(k) * np.sin(f32(h)), 0, cfg.resolution_y - 1)
    return int(tx), int(ty)


def _inside(cfg, x, y):
    return 0 <= x < cfg.resolution_x and 0 <= y < cfg.resolution_y


def _waypoint(cfg, s, img):
    if cfg.enable_waypoints and s["waypoint_time"] > 0:
        f32 = np.float32
        n = max(int(cfg.waypoint_size * cfg.resolution_x / cfg.limit_x), 1)
        m = max(int(cfg.waypoint_size * cfg.resolution_y / cfg.limit_y), 1)
        x0 = int(np.round(f32(s["waypoint"][0]) * f32(cfg.resolution_x / cfg.limit_x)))
        y0 = int(np.round(f32(s["waypoint"][1]) * f32(cfg.resolution_y / cfg.limit_y)))
        for x in range(x0, x0 + n):
            for y in range(y0, y0 + m):
                if _inside(cfg, x, y):
                    img[x, y] = (127, 0, 127)


def _reference_ego(cfg, bg, s, seen, damaged, e):
    """rules §5.3 with §15, step by step, one pixel at a time."""
    rx, ry = cfg.resolution_x, cfg.resolution_y
    if not s["alive"][e]:
        return np.zeros((rx, ry, 3), np.uint8)
    img = bg[s["map_idx"]].astype(int)
    for x in range(rx):
        for y in range(ry):
            if x in (0, rx - 1) or y == 0:
                img[x, y, 0] = 255
                if not damaged[e]:
                    img[x, y] = 255
    _waypoint(cfg, s, img)
    cut = int(np.float32(s["health"][e]) * np.float32(rx / cfg.max_health[e]))
    for x in range(rx):
        img[x, ry - 1] = (0, 255, 0) if x < cut else (255, 255, 255)
    px, py, pz = _pixels(cfg, s)
    teams, n = cfg.teams, cfg.n_agents
    for k, intensity in enumerate(TAILS, start=1):
        for j in range(n):
            if seen[e, j]:
                tx, ty = _tail(cfg, px[j], py[j], s["heading"][j], k)
                c = 2 if teams[j] == teams[e] else 0
                img[tx, ty, c] = min(255, img[tx, ty, c] + intensity)
        tx, ty = _tail(cfg, px[e], py[e], s["heading"][e], k)
        img[tx, ty] = np.maximum(img[tx, ty], intensity)
    if _inside(cfg, px[e], py[e]):
        img[px[e], py[e]] = 0
    for j in range(n):
        if j == e:
            colour = (255 - pz[e], 255, 255 - pz[e])
        else:
            sj = int(seen[e, j])
            enemy = int(teams[j] != teams[e])
            colour = (255 * enemy * sj, pz[j] * sj, 255 * (1 - enemy) * sj)
        _sprite(cfg, img, px[j], py[j], cfg.sprites[j], colour)
    return img.astype(np.uint8)


def _sprite(cfg, img, px, py, sprite, colour):
    for bit, offsets in OFFSETS.items():
        if sprite & bit:
            for dx, dy in offsets:
                if _inside(cfg, px + dx, py + dy):
                    img[px + dx, py + dy] = np.maximum(img[px + dx, py + dy], colour)


def _reference_top(cfg, bg, s):
    """rules §5.4 with §15, step by step."""
    rx, ry = cfg.resolution_x, cfg.resolution_y
    img = bg[s["map_idx"]].astype(int)
    img[:, 0] = img[:, ry - 1] = img[0, :] = img[rx - 1, :] = 255
    _waypoint(cfg, s, img)
    px, py, pz = _pixels(cfg, s)
    for k, intensity in enumerate(TAILS, start=1):
        for j in range(cfg.n_agents):
            if s["alive"][j]:
                tx, ty = _tail(cfg, px[j], py[j], s["heading"][j], k)
                c = 0 if cfg.teams[j] == 1 else 2
                img[tx, ty, c] = min(255, img[tx, ty, c] + intensity)
    for j in range(cfg.n_agents):
        if s["alive"][j]:
            t1 = cfg.teams[j]
            _sprite(cfg, img, px[j], py[j], cfg.sprites[j], (255 * t1, pz[j], 255 * (1 - t1)))
    return img.astype(np.uint8)


RANDOM_CFG = _config(
    teams=(0, 0, 0, 1, 1, 1),
    sprites=(1, 3, 5, 6, 7, 3),
    max_health=(1.0, 2.0, 1.0, 3.0, 1.0, 0.5),
    map_set="all",
    resolution_x=16,
    resolution_y=20,
    enable_waypoints=True,
    waypoint_size=1.5,
)


def _random_states(cfg, rng, batch):
    """Crowded random games (agents within a 3 x 3 patch, some outside the map) so that
    tails and sprites overlap, hit edges and boxes, and saturate."""
    n = cfg.n_agents
    states = []
    for _ in range(batch):
        cx, cy = rng.uniform(-0.5, 10.5, 2)
        states.append(
            dict(
                x=(cx + rng.uniform(-1.5, 1.5, n)).astype(np.float32),
                y=(cy + rng.uniform(-1.5, 1.5, n)).astype(np.float32),
                z=rng.uniform(0, 10, n).astype(np.float32),
                heading=rng.uniform(-np.pi, np.pi, n).astype(np.float32),
                health=(rng.uniform(0, 1, n) * np.asarray(cfg.max_health)).astype(np.float32),
                alive=rng.uniform(size=n) < 0.8,
                map_idx=int(rng.integers(len(cfg.maps))),
                waypoint=np.concatenate([rng.uniform(0, 9, 2), [0.0, 0.0]]).astype(np.float32),
                waypoint_time=float(rng.uniform() < 0.6),
            )
        )
    seen = rng.uniform(size=(batch, n, n)) < 0.6
    damaged = rng.uniform(size=(batch, n)) < 0.4
    return states, seen, damaged


def _stack(cfg, states):
    built = [EnvState.create(cfg, **s) for s in states]
    return jax.tree.map(lambda *a: jnp.stack(a), *built)


@pytest.mark.parametrize("renderer", RENDERERS)
def test_matches_step_by_step_reference_under_vmap(renderer, request):
    draw = _ego_renderer(renderer, request)
    cfg = RANDOM_CFG
    bg = prerender(cfg)
    states, seen, damaged = _random_states(cfg, np.random.default_rng(0), batch=24)
    batch = _stack(cfg, states)
    bgj = jnp.asarray(bg)
    ego = jax.jit(jax.vmap(lambda a, e, s, d: draw(cfg, bgj, a, e, s, d)))
    top = jax.jit(jax.vmap(lambda a, e: global_view(cfg, bgj, a, e)))
    obs = np.asarray(ego(batch.agents, batch.episode, jnp.asarray(seen), jnp.asarray(damaged)))
    views = np.asarray(top(batch.agents, batch.episode))
    for b, s in enumerate(states):
        for e in range(cfg.n_agents):
            _assert_image(obs[b, e], _reference_ego(cfg, bg, s, seen[b], damaged[b], e))
        _assert_image(views[b], _reference_top(cfg, bg, s))


@pytest.mark.slow  # op-by-op execution compiles ~170 primitives: ~10 s, more on a busy machine
def test_jit_equals_eager():
    # Ego images only: the global view is drawn by the same code.
    cfg = RANDOM_CFG
    bg = jnp.asarray(prerender(cfg))
    states, seen, damaged = _random_states(cfg, np.random.default_rng(1), batch=1)
    st = EnvState.create(cfg, **states[0])
    args = (st.agents, st.episode, jnp.asarray(seen[0]), jnp.asarray(damaged[0]))
    eager = rgb_observations(cfg, bg, *args)
    jitted = jax.jit(lambda a, e, s, d: rgb_observations(cfg, bg, a, e, s, d))(*args)
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))
