"""A live window on a game (pygame, the optional extra `gigastep[viewer]`), with human play.

`Viewer(GameRunner(...), human=agent)` lets a person fly one agent while the players fly the
others; `Viewer.for_replay(replay)` watches a recorded game. The window shows the same
pictures as the videos (`gigastep.viz.render.FrameRenderer`) with a line of key help below.

Keys:
    arrows left / right   turn (as seen on the screen)
    arrows up / down      climb / dive
    W / S                 throttle up / down (else hold speed)
    space or P            pause / resume
    N or .                one step (while paused)
    + / -                 faster / slower (frames per second x2 / /2)
    R                     restart the game (the same start: the seed decides it)
    Q or Escape           quit
A joystick, if one is connected, also flies the agent: stick x turns, stick y climbs
(forward dives), the second stick's y (or axis 2) is the throttle, button 0 pauses.

In a discrete-action game the controls are mapped to the action whose (heading, dive,
throttle) signs match (`gigastep.opponents.to_discrete`). On screen, world y grows downward,
so a positive (counter-clockwise in the world) heading input turns right on the screen.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from gigastep.viz.render import BACKGROUND, TEXT, FrameRenderer, _font
from gigastep.viz.replay import GameRunner, Replay

if TYPE_CHECKING:
    import pygame

    from gigastep.game.types import EnvState

__all__ = ["KEY_HELP", "Viewer"]

KEY_HELP = "arrows fly  W/S throttle  space pause  N step  +/- speed  R restart  Q quit"
HELP_HEIGHT = 20
DEADZONE = 0.15
MAX_FPS = 120


def _pygame() -> types.ModuleType:
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import pygame
    except ImportError:
        raise ImportError("the viewer needs pygame: pip install 'gigastep[viewer]'") from None
    return pygame


class Viewer:
    """A pygame window that plays a game live.

    Args:
        game: the `GameRunner` to show (its players fly every agent but the human's).
        human: the agent a person flies (None: only watch).
        replay_actions: (T, n, ...) actions to play back instead of the players' (a replay).
        fps: steps per second to start with.
        scale: integer upscaling of the views.
        agents: agents whose ego views are shown (RGB scenarios); default the human's.
        title: the first line of the legend.
    """

    def __init__(
        self,
        game: GameRunner,
        human: int | None = None,
        replay_actions: npt.ArrayLike | None = None,
        fps: float = 10.0,
        scale: int = 3,
        agents: Iterable[int] | None = None,
        title: str = "",
        names: Sequence[str] | None = None,
    ) -> None:
        n = game.config.n_agents
        if human is not None and not (isinstance(human, int) and 0 <= human < n):
            raise ValueError(f"the human's agent must be one of 0..{n - 1}, got {human!r}")
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps!r}")
        if agents is None:
            agents = (
                (human,) if human is not None and game.env.obs_type in ("rgb", "rgb_vector") else ()
            )
        self.game, self.human = game, human
        self.replay_actions = None if replay_actions is None else np.asarray(replay_actions)
        names = list(game.names if names is None else names)
        if human is not None:
            team = game.config.teams[human]
            names[team] = f"you + {names[team]}"
        self.renderer = FrameRenderer(game.env, agents, names, scale, title)
        self.fps, self.paused, self.running = float(fps), False, True
        self._held: set[int] = set()
        self._step_once = False
        self._joystick: pygame.joystick.JoystickType | None = None
        self.frames_shown = 0
        self.last_human_action: np.ndarray | np.int32 | None = None

    @classmethod
    def for_replay(cls, replay: Replay, **kwargs: Any) -> Viewer:
        """Watch a recorded game (kwargs as for `Viewer`, without `human`)."""
        # The runner's players never act: every step takes the replay's actions.
        game = GameRunner(replay.env(), ("random", "random"), replay.seed)
        kwargs.setdefault("agents", replay.agents)
        kwargs.setdefault("title", replay.scenario)
        kwargs.setdefault("names", replay.players)
        return cls(game, None, replay.actions, **kwargs)

    # --- controls -----------------------------------------------------------------------
    def human_controls(self) -> np.ndarray:
        """(3,) float32 heading, dive, throttle from the held keys and the joystick."""
        pg = _pygame()
        held = self._held
        heading = float(pg.K_RIGHT in held) - float(pg.K_LEFT in held)
        dive = float(pg.K_UP in held) - float(pg.K_DOWN in held)
        throttle = float(pg.K_w in held) - float(pg.K_s in held)
        if self._joystick is not None:
            axes = [self._joystick.get_axis(i) for i in range(self._joystick.get_numaxes())]
            dead = [0.0 if abs(a) < DEADZONE else a for a in axes]
            if len(dead) > 1:
                heading, dive = heading + dead[0], dive - dead[1]
            if len(dead) > 3:
                throttle -= dead[3]
            elif len(dead) > 2:
                throttle -= dead[2]
        return np.clip(np.asarray([heading, dive, throttle], np.float32), -1.0, 1.0)

    def _human_action(self) -> np.ndarray | np.int32:
        controls = self.human_controls()
        if not self.game.config.discrete_actions:
            return controls
        from gigastep.opponents import to_discrete

        return np.int32(to_discrete(controls[None])[0])

    def handle(self, event: pygame.event.Event) -> None:
        """React to one pygame event."""
        pg = _pygame()
        if event.type == pg.QUIT:
            self.running = False
        elif event.type == pg.KEYDOWN:
            self._held.add(event.key)
            self._key(event.key, getattr(event, "unicode", ""))
        elif event.type == pg.KEYUP:
            self._held.discard(event.key)
        elif event.type == pg.JOYDEVICEADDED and self._joystick is None:
            self._joystick = pg.joystick.Joystick(event.device_index)
        elif event.type == pg.JOYBUTTONDOWN and event.button == 0:
            self.paused = not self.paused

    def _key(self, key: int, char: str) -> None:
        pg = _pygame()
        if key in (pg.K_q, pg.K_ESCAPE):
            self.running = False
        elif key in (pg.K_SPACE, pg.K_p):
            self.paused = not self.paused
        elif key in (pg.K_n, pg.K_PERIOD):
            self._step_once = True
        elif key in (pg.K_PLUS, pg.K_EQUALS, pg.K_KP_PLUS) or char == "+":
            self.fps = min(self.fps * 2, MAX_FPS)
        elif key in (pg.K_MINUS, pg.K_KP_MINUS) or char == "-":
            self.fps = max(self.fps / 2, 0.5)
        elif key == pg.K_r:
            self.game.reset()

    # --- loop ---------------------------------------------------------------------------
    def advance(self) -> None:
        """One step of the game (the replay's actions, or the players' and the human's)."""
        game = self.game
        if game.done:
            return
        if self.replay_actions is not None:
            if game.t >= len(self.replay_actions):
                game.done = True
                return
            game.step(actions=self.replay_actions[game.t])
            return
        overrides = None
        if self.human is not None:
            self.last_human_action = self._human_action()
            overrides = {self.human: self.last_human_action}
        game.step(overrides=overrides)

    def picture(self) -> np.ndarray:
        """The current frame with the help line: (H + HELP_HEIGHT, W, 3) uint8."""
        from PIL import Image, ImageDraw

        game = self.game
        states = _batch_of_one(game.state)
        ego = None
        if self.renderer.agents:
            rgb = game.obs[0] if isinstance(game.obs, tuple) else game.obs
            ego = np.asarray(rgb)[list(self.renderer.agents)][None]
        total = None if self.replay_actions is None else len(self.replay_actions)
        frame = self.renderer.frames(states, ego, game.t, total)[0]
        strip = Image.new("RGB", (frame.shape[1], HELP_HEIGHT), BACKGROUND)
        draw = ImageDraw.Draw(strip)
        status = "paused" if self.paused else f"{self.fps:g} steps/s"
        if game.done:
            status = "episode over: R restarts, Q quits"
        draw.text((8, 3), f"{KEY_HELP}    [{status}]", fill=TEXT, font=_font())
        return np.concatenate([frame, np.asarray(strip)], axis=0)

    def run(
        self,
        max_frames: int | None = None,
        on_frame: Callable[[Viewer, int], object] | None = None,
    ) -> int:
        """Open the window and play until the quit key (or `max_frames` frames).

        Args:
            max_frames: stop after this many frames (for scripts and tests).
            on_frame: optional callable `on_frame(viewer, frames_shown)` after every frame.

        Returns:
            The number of frames shown.
        """
        pg = _pygame()
        pg.display.init()
        pg.joystick.init()
        if pg.joystick.get_count() > 0:
            self._joystick = pg.joystick.Joystick(0)
        try:
            first = self.picture()
            screen = pg.display.set_mode((first.shape[1], first.shape[0]))
            pg.display.set_caption(f"Gigastep - {self.renderer.title}")
            clock = pg.time.Clock()
            picture = first
            while self.running:
                for event in pg.event.get():
                    self.handle(event)
                if not self.running:
                    break
                if not self.paused or self._step_once:
                    self.advance()
                    self._step_once = False
                    picture = self.picture()
                elif self.frames_shown:
                    picture = self.picture()  # the status line changes while paused
                screen.blit(pg.surfarray.make_surface(picture.transpose(1, 0, 2)), (0, 0))
                pg.display.flip()
                self.frames_shown += 1
                if on_frame is not None:
                    on_frame(self, self.frames_shown)
                if max_frames is not None and self.frames_shown >= max_frames:
                    break
                clock.tick(self.fps)
        finally:
            pg.display.quit()
        return self.frames_shown


def _batch_of_one(state: EnvState) -> EnvState:
    import jax

    return jax.tree_util.tree_map(lambda x: x[None], state)
