"""Draw the documentation's figures with the library itself: `PYTHONPATH=. python docs/figures.py`.

Writes into docs/assets/: an RGB ego observation and the global view of one game (PNG) after a
few steps, the front page's GIF of a short game (pursuit against evade), and the global views
of fresh games on procedural maps (`procmaps.png`) and with drawn teams (`drawn_teams.png`).
The images are
the library's own output, upscaled with nearest-neighbour sampling; nothing is drawn by hand.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
from PIL import Image

import gigastep
import gigastep.game.procmaps
from gigastep.opponents import get_policy
from gigastep.viz.render import render_episode, save_gif, upscale

ASSETS = Path(__file__).resolve().parent / "assets"
SCENARIO = "identical_5_vs_5_fobs_rgb_maps_cont"


def _png(image: np.ndarray, name: str, scale: int = 4) -> None:
    # Images are indexed [x, y]; a picture has rows along y.
    Image.fromarray(upscale(np.asarray(image), scale).transpose(1, 0, 2)).save(ASSETS / name)


def still_images(steps: int = 12, seed: int = 3) -> None:
    """An ego view of agent 0 and the global view, `steps` steps into a game on a room map."""
    env = gigastep.make(SCENARIO, map_set="four_rooms")
    key = jax.random.key(seed)
    obs, state = env.reset(key)
    policy = get_policy("pursuit")
    for t in range(steps):
        k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
        obs, state, *_ = env.step(state, policy(env.config, state, k_act), k_step)
    _png(obs[0], "rgb_observation.png")
    _png(env.global_view(state), "global_view.png")


def procmaps_figure(seeds: int = 4) -> None:
    """One row per named map generator: the global views of `seeds` fresh games (x to the
    right, y down), each drawn on its own map."""
    rows = []
    for name in gigastep.game.procmaps.generator_names():
        env = gigastep.make(SCENARIO, map_set=name)
        views = []
        for seed in range(seeds):
            _, state = env.reset(jax.random.key(seed))
            views.append(upscale(np.asarray(env.global_view(state)), 2).transpose(1, 0, 2))
        gap = np.full((views[0].shape[0], 6, 3), 255, np.uint8)
        rows.append(np.concatenate([v for view in views for v in (view, gap)][:-1], axis=1))
    gap = np.full((6, rows[0].shape[1], 3), 255, np.uint8)
    picture = np.concatenate([r for row in rows for r in (row, gap)][:-1], axis=0)
    Image.fromarray(picture).save(ASSETS / "procmaps.png")


def drawn_teams_figure(seeds: int = 4) -> None:
    """Fresh games of two distributions on procedural maps (`drawn_teams.png`): each game
    draws its team sizes (5-8 a side) and, in the second row, its type mix (sprites by type);
    absent agents are not drawn."""
    rows = []
    for name in (
        "identical_5-8_vs_5-8_fobs_rgb_maps_cont",
        "special_5-8_vs_5-8_fobs_rgb_maps_cont",
    ):
        env = gigastep.make(name, map_set="procgen_sparse")
        views = []
        for seed in range(seeds):
            _, state = env.reset(jax.random.key(100 + seed))
            views.append(upscale(np.asarray(env.global_view(state)), 2).transpose(1, 0, 2))
        gap = np.full((views[0].shape[0], 6, 3), 255, np.uint8)
        rows.append(np.concatenate([v for view in views for v in (view, gap)][:-1], axis=1))
    gap = np.full((6, rows[0].shape[1], 3), 255, np.uint8)
    picture = np.concatenate([r for row in rows for r in (row, gap)][:-1], axis=0)
    Image.fromarray(picture).save(ASSETS / "drawn_teams.png")


def game_gif(steps: int = 120, seed: int = 0) -> None:
    """The front page's game, to its end: pursuit (team 0, blue) against evade (team 1, red),
    with agent 0's ego view beside the global view."""
    frames = render_episode(
        SCENARIO.replace("fobs", "pobs"),
        ("pursuit", "evade"),
        steps=steps,
        seed=seed,
        agents=(0,),
        scale=3,
    )
    save_gif(frames, ASSETS / "game.gif", fps=8)


if __name__ == "__main__":
    ASSETS.mkdir(exist_ok=True)
    still_images()
    game_gif()
    procmaps_figure()
    drawn_teams_figure()
    for path in sorted(ASSETS.iterdir()):
        print(path.name, path.stat().st_size, "bytes")
