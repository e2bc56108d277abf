"""Pictures of games for people: video frames, GIF and MP4 files.

`render_episode(env, players, steps, seed, agents)` plays one episode and returns its frames:
a legend panel (scenario, step counter, each team's colour, player and agents alive, and one
health bar per agent), the global view with a health bar over every alive agent, and the ego
views (RGB observations) of the chosen agents, side by side, each upscaled by `scale` and
captioned. Team 0 is blue and team 1 red, as in the global view itself.

The pictures of a whole game are computed on the device in one call (the global views of the
stacked states, `GigastepEnv.v_global_view`), copied to the host once, and composed and
encoded there (Pillow; text in Pillow's default font). `save_video` writes a GIF (Pillow,
always) or an MP4 (imageio with ffmpeg: the optional extra `gigastep[video]`), atomically.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from gigastep._util.checks import check_positive_int
from gigastep._util.files import atomic_path

if TYPE_CHECKING:
    from PIL import ImageDraw, ImageFont

    from gigastep.env import GigastepEnv
    from gigastep.eval.matches import Device, PlayerLike
    from gigastep.game.types import AgentState, EnvConfig, EnvState, Observation
    from gigastep.viz.replay import Recording, StrPath

__all__ = [
    "HEALTH_EMPTY",
    "HEALTH_FULL",
    "TEAM_RGB",
    "FrameRenderer",
    "frame",
    "recording_frames",
    "render_episode",
    "save_gif",
    "save_mp4",
    "save_video",
    "tile",
    "upscale",
]

TEAM_RGB = ((0, 0, 255), (255, 0, 0))
"""Colours of team 0 and team 1 (the global view draws agents in these, green = altitude)."""
HEALTH_FULL = (0, 220, 0)
HEALTH_EMPTY = (90, 90, 90)
BACKGROUND = (32, 32, 32)
TEXT = (235, 235, 235)
PANEL_WIDTH = 210
CAPTION = 18
GAP = 4


def upscale(image: npt.ArrayLike, scale: int) -> np.ndarray:
    """Nearest-neighbour upscaling of an (X, Y, 3) uint8 image by an integer factor."""
    check_positive_int(scale, "scale")
    image = np.asarray(image)
    return image.repeat(scale, axis=0).repeat(scale, axis=1)


def tile(images: Iterable[npt.ArrayLike], columns: int = 6, gap: int = 2) -> np.ndarray:
    """Lay out equally sized (X, Y, 3) images in a grid, row by row, with grey gaps."""
    arrays = [np.asarray(i) for i in images]
    if not arrays:
        raise ValueError("tile needs at least one image")
    shape = arrays[0].shape
    if any(i.shape != shape for i in arrays):
        raise ValueError(f"all images must have one shape, got {sorted({i.shape for i in arrays})}")
    cols = min(columns, len(arrays))
    rows = -(-len(arrays) // cols)
    h, w = shape[0] + gap, shape[1] + gap
    out = np.full((rows * h - gap, cols * w - gap, 3), 64, np.uint8)
    for k, image in enumerate(arrays):
        r, c = divmod(k, cols)
        out[r * h : r * h + shape[0], c * w : c * w + shape[1]] = image
    return out


def frame(
    env: GigastepEnv,
    state: EnvState,
    obs: Observation | None = None,
    agents: int = 0,
    scale: int = 4,
) -> np.ndarray:
    """One picture of a game: the global view, then the RGB views of the first `agents` agents
    (dead agents' tiles are blank). Returned transposed to (height, width, 3) for display,
    i.e. world y down the rows."""
    views = [np.asarray(env.global_view(state))]
    if agents:
        if obs is None or env.obs_type not in ("rgb", "rgb_vector"):
            raise ValueError("ego views need the RGB observation of the state (obs_type rgb)")
        rgb = obs[0] if isinstance(obs, tuple) else obs
        views += [np.asarray(rgb[i]) for i in range(min(agents, env.n_agents))]
    return tile([upscale(v, scale).transpose(1, 0, 2) for v in views])


# ------------------------------------------------------------------------------------------
# Video frames
# ------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=12)
    except TypeError:  # Pillow < 10.1: the fixed bitmap font
        return ImageFont.load_default()


@lru_cache(maxsize=32)
def _pixels_fn(config: EnvConfig) -> Callable[[AgentState], tuple[jax.Array, jax.Array]]:
    from gigastep.game.observations.rgb import pixel_coords

    return jax.jit(jax.vmap(lambda agents: pixel_coords(config, agents)[:2]))


def _bucket(n: int) -> int:
    """Batch sizes are rounded up to a power of two so that few compiled views serve all."""
    return 1 << max(0, (n - 1).bit_length())


class FrameRenderer:
    """Composes the video frames of one game (see the module docstring for the layout).

    Args:
        env: the game's `GigastepEnv`.
        agents: agents whose ego views are shown (needs RGB observations).
        names: labels of team 0's and team 1's players.
        scale: integer upscaling of every view.
        title: the first line of the legend (e.g. the scenario name).
    """

    def __init__(
        self,
        env: GigastepEnv,
        agents: Iterable[int] = (),
        names: Iterable[str] = ("team 0", "team 1"),
        scale: int = 4,
        title: str = "",
    ) -> None:
        check_positive_int(scale, "scale")
        from gigastep.viz.replay import check_agents

        self.env, self.config = env, env.config
        self.agents = check_agents(env, agents)
        self.names, self.scale, self.title = tuple(names), scale, title
        rx, ry = self.config.resolution
        self.view_w, self.view_h = rx * scale, ry * scale
        views = 1 + len(self.agents)
        width = PANEL_WIDTH + views * (self.view_w + GAP)
        height = max(CAPTION + self.view_h + GAP, 96 + 7 * self.config.n_agents)
        self.shape = (height + height % 2, width + width % 2, 3)  # even sizes for H.264

    def view_origin(self, view: int) -> tuple[int, int]:
        """(row, column) of the top-left pixel of view `view` (0 = global, k = k-th agent)."""
        return (CAPTION, PANEL_WIDTH + view * (self.view_w + GAP))

    def frames(
        self,
        states: EnvState,
        ego: npt.ArrayLike | None = None,
        first_step: int = 0,
        total_steps: int | None = None,
    ) -> list[np.ndarray]:
        """Frames of a batch of states (leading axis T, on the device); `ego` (T, k, X, Y, 3)."""
        t = jax.tree_util.tree_leaves(states)[0].shape[0]
        pad = _bucket(t) - t
        padded = jax.tree_util.tree_map(
            lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, 0)]) if pad else x, states
        )
        views = np.asarray(self.env.v_global_view(padded))[:t]
        px, py = (np.asarray(v)[:t] for v in _pixels_fn(self.config)(padded.agents))
        health = np.asarray(states.agents.health) / np.asarray(self.config.max_health)
        alive = np.asarray(states.agents.alive)
        ego = None if ego is None else np.asarray(ego)
        return [
            self._compose(
                views[i],
                px[i],
                py[i],
                health[i],
                alive[i],
                None if ego is None else ego[i],
                first_step + i,
                total_steps,
            )
            for i in range(t)
        ]

    def _compose(
        self,
        view: np.ndarray,
        px: np.ndarray,
        py: np.ndarray,
        health: np.ndarray,
        alive: np.ndarray,
        ego: np.ndarray | None,
        step: int,
        total: int | None,
    ) -> np.ndarray:
        out = np.full(self.shape, BACKGROUND, np.uint8)
        s = self.scale
        big = upscale(view, s).transpose(1, 0, 2).copy()
        self._health_bars(big, px, py, health, alive)
        r0, c0 = self.view_origin(0)
        out[r0 : r0 + self.view_h, c0 : c0 + self.view_w] = big
        for k, _ in enumerate(self.agents):
            r, c = self.view_origin(k + 1)
            assert ego is not None  # ego views come with the agents they show
            out[r : r + self.view_h, c : c + self.view_w] = upscale(ego[k], s).transpose(1, 0, 2)
        return self._text(out, step, total, health, alive)

    def _health_bars(
        self, big: np.ndarray, px: np.ndarray, py: np.ndarray, health: np.ndarray, alive: np.ndarray
    ) -> None:
        """A bar 3 pixels (of the unscaled view) wide over each alive agent's sprite."""
        s = self.scale
        height, width = max(2, s // 2), 3 * s
        for i in np.flatnonzero(alive):
            top = py[i] * s - s - 1 - height  # above the sprite's top row (py - 1)
            left = px[i] * s + s // 2 - width // 2
            cut = left + int(round(width * float(np.clip(health[i], 0.0, 1.0))))
            for lo, hi, colour in ((left, cut, HEALTH_FULL), (cut, left + width, HEALTH_EMPTY)):
                lo, hi = max(lo, 0), min(hi, big.shape[1])
                rows = slice(max(top, 0), max(min(top + height, big.shape[0]), 0))
                if hi > lo:
                    big[rows, lo:hi] = colour

    def _text(
        self, out: np.ndarray, step: int, total: int | None, health: np.ndarray, alive: np.ndarray
    ) -> np.ndarray:
        from PIL import Image, ImageDraw

        image = Image.fromarray(out)
        draw = ImageDraw.Draw(image)
        font = _font()
        counter = f"step {step}" + (f" / {total}" if total is not None else "")
        draw.text((8, 4), self.title[:30], fill=TEXT, font=font)
        draw.text((8, 20), counter, fill=TEXT, font=font)
        teams = np.asarray(self.config.teams)
        for team in (0, 1):
            y = 40 + 18 * team
            draw.rectangle((8, y, 20, y + 12), fill=TEAM_RGB[team])
            left = int(np.sum(alive[teams == team]))
            label = f"{self.names[team][:15]}  {left}/{int(np.sum(teams == team))} alive"
            draw.text((26, y), label, fill=TEXT, font=font)
        self._agent_rows(draw, teams, health, alive, font)
        captions = ["global view"] + [f"agent {a} (team {teams[a]})" for a in self.agents]
        for v, caption in enumerate(captions):
            _, c = self.view_origin(v)
            draw.text((c + 2, 2), caption, fill=TEXT, font=font)
        return np.asarray(image)

    def _agent_rows(
        self,
        draw: ImageDraw.ImageDraw,
        teams: np.ndarray,
        health: np.ndarray,
        alive: np.ndarray,
        font: ImageFont.FreeTypeFont | ImageFont.ImageFont,
    ) -> None:
        """One row per agent: team swatch, index (when rows are tall enough) and health bar."""
        n = len(teams)
        top = 82
        row = max(4, min(14, (self.shape[0] - top - 4) // n))
        for i in range(n):
            y = top + i * row
            draw.rectangle((8, y, 14, y + row - 3), fill=TEAM_RGB[teams[i]])
            if row >= 12:
                draw.text((18, y - 2), str(i), fill=TEXT, font=font)
            x0, x1 = 40, PANEL_WIDTH - 12
            cut = x0 + int(round((x1 - x0) * float(np.clip(health[i], 0, 1)))) if alive[i] else x0
            draw.rectangle((x0, y, x1, y + row - 3), fill=HEALTH_EMPTY)
            if cut > x0:
                draw.rectangle((x0, y, cut - 1, y + row - 3), fill=HEALTH_FULL)


def recording_frames(recording: Recording, scale: int = 4) -> list[np.ndarray]:
    """The frames of a `gigastep.viz.replay.Recording` (its T + 1 states)."""
    title = recording.scenario or (recording.env.spec.name if recording.env.spec else "")
    renderer = FrameRenderer(recording.env, recording.agents, recording.players, scale, title)
    return renderer.frames(recording.states, recording.ego, 0, recording.steps)


def render_episode(
    env: str | GigastepEnv,
    policies: Sequence[PlayerLike],
    steps: int = 200,
    seed: int = 0,
    agents: Iterable[int] = (),
    scale: int = 4,
    overrides: dict[str, Any] | None = None,
    device: Device = "cpu",
    progress: Callable[[int], object] | None = None,
) -> list[np.ndarray]:
    """Play one episode and return its video frames.

    Args:
        env: a scenario name or `GigastepEnv`.
        policies: (team 0's player, team 1's player): scripted names, policy callables,
            TorchPlayers or checkpoint paths (`gigastep.eval.matches`).
        steps: at most this many steps (the episode may end sooner).
        seed: the game's seed (`gigastep.viz.replay` says how keys derive from it).
        agents: agents whose ego views (RGB observations) are shown beside the global view.
        scale: integer upscaling of every view.

    Returns:
        T + 1 frames (the start, then one per step), each (H, W, 3) uint8, H and W even.
    """
    from gigastep.viz.replay import record_game

    rec = record_game(env, policies, steps, seed, agents, overrides, device, progress)
    return recording_frames(rec, scale)


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------


def _check_frames(frames: Iterable[npt.ArrayLike]) -> list[np.ndarray]:
    arrays = [np.asarray(f) for f in frames]
    if not arrays:
        raise ValueError("a video needs at least one frame")
    shape = arrays[0].shape
    if len(shape) != 3 or shape[2] != 3 or any(f.shape != shape for f in arrays):
        raise ValueError(
            f"frames must be (H, W, 3) uint8 of one shape, got {sorted({f.shape for f in arrays})}"
        )
    return [f.astype(np.uint8, copy=False) for f in arrays]


def save_gif(frames: Iterable[npt.ArrayLike], path: StrPath, fps: int = 10) -> None:
    """Write (H, W, 3) uint8 frames as an animated GIF, atomically (temp file, then rename)."""
    from PIL import Image

    images = [Image.fromarray(f) for f in _check_frames(frames)]
    with atomic_path(path, suffix=".gif") as tmp:
        images[0].save(
            tmp,
            format="GIF",
            save_all=True,
            append_images=images[1:],
            duration=max(1, round(1000 / fps)),
            loop=0,
        )


def save_mp4(frames: Iterable[npt.ArrayLike], path: StrPath, fps: int = 10) -> None:
    """Write frames as an H.264 MP4 (imageio + ffmpeg: `pip install 'gigastep[video]'`)."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the ffmpeg binary)
    except ImportError:
        raise ImportError(
            "MP4 files need imageio with ffmpeg: pip install 'gigastep[video]' (or write a .gif)"
        ) from None
    arrays = _check_frames(frames)
    h, w = arrays[0].shape[:2]
    if h % 2 or w % 2:  # H.264 in yuv420p needs even sizes
        arrays = [np.pad(f, ((0, h % 2), (0, w % 2), (0, 0))) for f in arrays]
    with atomic_path(path, suffix=".mp4") as tmp, warnings.catch_warnings():
        # ffmpeg runs as a subprocess (fork, then exec at once), which JAX's fork warning
        # does not concern.
        warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
        writer = imageio.get_writer(
            tmp,
            format="FFMPEG",
            fps=fps,
            codec="libx264",
            macro_block_size=1,
            pixelformat="yuv420p",
        )
        try:
            for f in arrays:
                writer.append_data(f)
        finally:
            writer.close()


def save_video(frames: Iterable[npt.ArrayLike], path: StrPath, fps: int = 10) -> None:
    """Write frames as a GIF or an MP4, chosen by the file name's extension."""
    ext = str(path).lower().rsplit(".", 1)[-1] if "." in str(path) else ""
    if ext == "gif":
        save_gif(frames, path, fps)
    elif ext == "mp4":
        save_mp4(frames, path, fps)
    else:
        raise ValueError(f"cannot write video {str(path)!r}: the name must end in .gif or .mp4")
