"""Frames for people: tiled global and ego views, upscaled, saved as an animated GIF (Pillow)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np

__all__ = ["frame", "save_gif", "tile", "upscale"]


def upscale(image, scale: int) -> np.ndarray:
    """Nearest-neighbour upscaling of an (X, Y, 3) uint8 image by an integer factor."""
    if not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be a positive integer, got {scale!r}")
    image = np.asarray(image)
    return image.repeat(scale, axis=0).repeat(scale, axis=1)


def tile(images: Sequence, columns: int = 6, gap: int = 2) -> np.ndarray:
    """Lay out equally sized (X, Y, 3) images in a grid, row by row, with grey gaps."""
    images = [np.asarray(i) for i in images]
    if not images:
        raise ValueError("tile needs at least one image")
    shape = images[0].shape
    if any(i.shape != shape for i in images):
        raise ValueError(f"all images must have one shape, got {sorted({i.shape for i in images})}")
    cols = min(columns, len(images))
    rows = -(-len(images) // cols)
    h, w = shape[0] + gap, shape[1] + gap
    out = np.full((rows * h - gap, cols * w - gap, 3), 64, np.uint8)
    for k, image in enumerate(images):
        r, c = divmod(k, cols)
        out[r * h : r * h + shape[0], c * w : c * w + shape[1]] = image
    return out


def frame(env, state, obs=None, agents: int = 0, scale: int = 4) -> np.ndarray:
    """One picture of a game: the global view, then the RGB views of the first `agents` agents
    (dead agents' tiles are blank). Returned transposed to (height, width, 3) for display,
    i.e. world y down the rows."""
    views = [np.asarray(env.global_view(state))]
    if agents:
        if obs is None or env.obs_type == "vector":
            raise ValueError("ego views need the RGB observation of the state (obs_type rgb)")
        rgb = obs[0] if isinstance(obs, tuple) else obs
        views += [np.asarray(rgb[i]) for i in range(min(agents, env.n_agents))]
    return tile([upscale(v, scale).transpose(1, 0, 2) for v in views])


def save_gif(frames: Sequence, path, fps: int = 10) -> None:
    """Write (H, W, 3) uint8 frames as an animated GIF, atomically (temp file, then rename)."""
    from PIL import Image

    if not frames:
        raise ValueError("save_gif needs at least one frame")
    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".gif", dir=folder)
    os.close(fd)
    try:
        images[0].save(tmp, save_all=True, append_images=images[1:],
                       duration=max(1, round(1000 / fps)), loop=0)  # fmt: skip
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
