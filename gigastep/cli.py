"""The `gigastep` command.

gigastep list [--all]                 base scenarios with their teams (--all: all 432 names)
gigastep info NAME                    one scenario in detail (NAME may be a .toml file)
gigastep render NAME --out F.gif|mp4  play one episode and write a video (--save-replay R)
gigastep replay R --out F.gif|mp4     re-simulate a replay and write its video
gigastep eval A B --games N           play A against B (scripted names or checkpoints)
gigastep league A B C ... --out DIR   every pair: matrix, ratings, JSON, heat map
gigastep play NAME                    fly one agent yourself (pygame window)
gigastep view NAME|R                  watch a game or a replay (pygame window)
gigastep bench ...                    python -m benchmarks.report ... (in a checkout only)
gigastep train ...                    python -m gigastep_baselines.ppo ... (installed), or
                                      python -m baselines.ppo ... (in a checkout)

Every command validates its arguments before any compute and fails with one line that names
the bad value and the closest valid ones (exit status 2), never a traceback (set
GIGASTEP_DEBUG=1 to see one). That includes files: every input file is read and checked
(a truncated replay, missing metadata) and every output path is checked (its folder exists
and takes a file, it is not a folder or a device, the disk is not full, a video fits in
memory) before any game is played; a write that fails anyway later (the disk filled up
meanwhile) is one line too, and leaves no partial file. Heavy modules (JAX included) are
imported only by the commands that need them.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from gigastep._util.environ import flag
from gigastep._util.repository import BASELINE_PACKAGES, locate
from gigastep.game.types import PER_AGENT_FIELDS

if TYPE_CHECKING:
    from gigastep.env import GigastepEnv
    from gigastep.eval.matches import Player
    from gigastep.game.types import EnvConfig
    from gigastep.viz.replay import Replay

_T = TypeVar("_T")

__all__ = ["main"]

DEFAULT_STEPS = 200
MIN_FREE = 1 << 20
"""Bytes an output folder must have free: with less, the disk is called full before any
compute (a write that fails later for want of space is still one line)."""
FORWARD = {
    "bench": ("benchmarks.report",),
    "train": tuple(f"{package}.ppo" for package in BASELINE_PACKAGES),
}
"""Commands that run another module of the repository, and the modules they may run, in the
order they are tried: the PPO trainer is `gigastep_baselines.ppo` in the installed wheel and
`baselines.ppo` in a checkout; the benchmarks are in a checkout only
(`gigastep._util.repository`)."""


class CommandError(Exception):
    """A bad argument found by a command (printed as one line, exit status 2)."""


# ------------------------------------------------------------------------------------------
# Arguments shared by several commands
# ------------------------------------------------------------------------------------------


def _overrides(pairs: Iterable[str] | None) -> dict[str, Any]:
    """EnvConfig overrides from --set FIELD=VALUE (VALUE read as JSON, else as a string)."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        field, sep, value = pair.partition("=")
        if not sep or not field:
            raise CommandError(
                f"--set takes FIELD=VALUE (e.g. max_episode_length=100), got {pair!r}"
            )
        try:
            out[field] = json.loads(value)
        except json.JSONDecodeError:
            out[field] = value
        if isinstance(out[field], list):
            out[field] = tuple(out[field])
    return out


def _check_name(name: str) -> None:
    """Fail early, with the closest names, for a catalogue name that does not exist."""
    from gigastep import scenarios

    if name.endswith(".toml") or ".toml#" in name:
        path = name.split("#", 1)[0]
        if not os.path.isfile(path):
            raise CommandError(f"no scenario file {path!r}")
        return
    bases = [*scenarios.base_scenarios(), *scenarios.list_distributions()]
    if scenarios.parse_name(name).base not in bases:
        choices = [*bases, *scenarios.list_scenarios()]
        close = difflib.get_close_matches(name, choices, n=3, cutoff=0.0)
        raise CommandError(
            f"unknown scenario {name!r}; closest: {', '.join(close)}. "
            f"`gigastep list --all` lists all {len(scenarios.list_scenarios())} names"
        )


def _env(name: str, pairs: Iterable[str] | None = None) -> GigastepEnv:
    from gigastep.registry import make

    _check_name(name)
    return make(name, **_overrides(pairs))


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


FPS_RANGE = (0.01, 1000.0)
"""Frames per second a video or window takes: a frame lasts between 1 ms and 100 s (GIF frame
times are whole milliseconds; an infinite or tiny rate has no frame time)."""


def _budgets(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers (agent-steps), e.g. 100000,1000000."""
    parts = [p.strip().replace("_", "") for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers (agent-steps), got {text!r}"
        )
    return tuple(int(p) for p in parts)


def _fps(text: str) -> float:
    lo, hi = FPS_RANGE
    expected = f"expected frames per second in [{lo:g}, {hi:g}], got {text!r}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(expected) from None
    if not lo <= value <= hi:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(expected)
    return value


def _device(text: str) -> str:
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(
            f"expected a torch device: cpu, cuda or cuda:K (K a GPU index), got {text!r}"
        )
    return text


def _seed(text: str) -> int:
    from gigastep._util.checks import SEED_MAX

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer seed in 0..{SEED_MAX}, got {text!r}"
        ) from None
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(
            f"expected an integer seed in 0..{SEED_MAX} (a PRNG key keeps 32 bits), got {text!r}"
        )
    return value


def _video_path(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".gif", ".mp4"):
        raise CommandError(f"--out {path!r}: a video file name ends in .gif or .mp4")
    _check_output(path, "--out")
    if ext == ".mp4":
        try:
            import imageio  # noqa: F401
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise CommandError(
                f"--out {path!r}: MP4 needs imageio with ffmpeg (pip install 'gigastep[video]'); "
                "a .gif needs nothing more"
            ) from None
    return path


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # unreachable


def _check_folder_writable(folder: str, option: str, path: str) -> None:
    """`folder` exists, takes a new file (tried: a folder can be read-only, or not ours) and
    has MIN_FREE bytes free."""
    if not os.path.isdir(folder):
        raise CommandError(f"cannot write {option} {path!r}: the folder {folder!r} does not exist")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".gigastep-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise CommandError(
            f"cannot write {option} {path!r}: no file can be created in {folder!r} ({err.strerror})"
        ) from None
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE:
        raise CommandError(
            f"cannot write {option} {path!r}: {folder!r} has {_size(free)} free, "
            f"and at least {_size(MIN_FREE)} are needed"
        )


def _check_output(path: str, option: str) -> None:
    """Fail now, before any compute, if the file `path` (of `option`) cannot be written."""
    if os.path.isdir(path):
        raise CommandError(f"{option} {path!r} is a folder; give a file name")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise CommandError(
            f"{option} {path!r} exists and is not a plain file (a device, socket or broken "
            "link would be replaced); give another name"
        )
    _check_folder_writable(os.path.dirname(os.path.abspath(path)), option, path)


def _check_output_folder(folder: str, option: str, names: Iterable[str]) -> None:
    """Fail now if the files `names` cannot be written into `folder` (created if missing)."""
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise CommandError(f"{option} {folder!r} is a file, not a folder")
    if os.path.isdir(folder):
        for name in names:
            _check_output(os.path.join(folder, name), option)
        return
    parent = os.path.dirname(os.path.abspath(folder))
    while not os.path.lexists(parent):  # the nearest existing folder creates the rest
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise CommandError(f"cannot create {option} {folder!r}: {parent!r} is not a folder")
    _check_folder_writable(parent, option, folder)


def _memory() -> int | None:
    """This machine's physical memory in bytes (None where it cannot be asked)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


GIF_MAX = 65535
"""The largest width and height a GIF can have."""


def _check_video_size(
    env: GigastepEnv, agents: tuple[int, ...], scale: int, steps: int, out: str, what: str
) -> None:
    """Refuse, before playing, a video whose frames cannot be held in memory or written:
    `what` names the options that decide its size (e.g. "--scale 4, --steps 200")."""
    from gigastep.viz.render import FrameRenderer

    limit = env.config.max_episode_length
    frames = 1 + (steps if limit is None else min(steps, limit))
    height, width, _ = FrameRenderer(env, agents, scale=scale).shape
    if out.lower().endswith(".gif") and max(height, width) > GIF_MAX:
        raise CommandError(
            f"{what}: frames of {width}x{height} pixels, and a GIF is at most "
            f"{GIF_MAX}x{GIF_MAX}; choose a smaller scale"
        )
    total = frames * height * width * 3
    memory = _memory()
    if memory is not None and 2 * total > memory:
        raise CommandError(
            f"{what}: {frames} frames of {width}x{height} pixels need {_size(total)} of "
            f"memory, twice that is more than this machine's {_size(memory)}; choose a "
            "smaller scale or fewer steps"
        )


class _Progress:
    """A tqdm bar on stderr (shown on terminals only; nothing without tqdm)."""

    def __init__(self, total: int, desc: str, unit: str) -> None:
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False)
        except ImportError:
            self.bar = None

    def __call__(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(max(0, min(done, self.bar.total) - self.bar.n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _with_progress(total: int, desc: str, unit: str, run: Callable[[_Progress], _T]) -> _T:
    """`run(progress)` with a progress bar that is closed however `run` ends."""
    bar = _Progress(total, desc, unit)
    try:
        return run(bar)
    finally:
        bar.close()


def _default_agents(env: GigastepEnv, agents: Iterable[int] | None) -> tuple[int, ...]:
    """The ego views to show: those asked for, or one agent per team in RGB games."""
    if agents is not None:
        return tuple(agents)
    if env.obs_type not in ("rgb", "rgb_vector"):  # no images to show
        return ()
    teams = list(env.config.teams)
    return tuple(teams.index(t) for t in (0, 1) if t in teams)


# ------------------------------------------------------------------------------------------
# list, info
# ------------------------------------------------------------------------------------------

_NOT_SETTINGS = {
    "teams",
    "type_names",
    "maps",
    "map_set",
    "limit_x",
    "limit_y",
    "team_draw",
    *PER_AGENT_FIELDS,
}


def _composition(config: EnvConfig, team: int) -> str:
    """'more_health x3, faster, default x2' for the agents of one team, in agent order."""
    import itertools

    names = config.type_names or ("custom",) * config.n_agents
    members = [t for t, k in zip(names, config.teams, strict=True) if k == team]
    runs = [(name, len(list(group))) for name, group in itertools.groupby(members)]
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in runs) or "-"


def _cmd_list(args: argparse.Namespace) -> int:
    from gigastep import scenarios

    bases = scenarios.base_scenarios()
    names = scenarios.list_scenarios()
    if args.all:
        print("\n".join(names))
        return 0
    rows = []
    for base in bases:
        config = scenarios.make_config(base)
        size = f"{config.limit_x:g}x{config.limit_y:g}"
        rows.append(
            (base, str(config.n_agents), _composition(config, 0), _composition(config, 1), size)
        )
    header = ("scenario", "agents", "team 0", "team 1", "world")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(
        f"\n{len(bases)} base scenarios, {len(names)} named variants "
        "<base>_<fobs|pobs>_<rgb|vec|ent>_<maps|void>_<cont|disc> (gigastep list --all)"
    )
    distributions = scenarios.list_distributions()
    print(
        f"{len(distributions)} distributions (team sizes drawn per episode, same suffixes; "
        f"gigastep info NAME): {', '.join(distributions)}"
    )
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    import dataclasses

    from gigastep.game.types import EnvConfig

    env = _env(args.name)
    spec, config = env.spec, env.config
    assert spec is not None  # gigastep.make sets it
    n0, n1 = config.team_sizes
    print(f"scenario      {spec.name}")
    print(f"version       {spec.version}")
    print(f"hash          {spec.hash}")
    print(f"agents        {config.n_agents} (team 0: {n0}, team 1: {n1})")
    draw = config.team_draw
    label = "roster" if draw is not None else "team"
    print(f"{label + ' 0':<14}{_composition(config, 0)}")
    print(f"{label + ' 1':<14}{_composition(config, 1)}")
    if draw is not None:
        print(f"draw team 0   {draw.describe(0)} (drawn at every reset; the rest absent)")
        print(f"draw team 1   {draw.describe(1)}")
    print(f"world         {config.limit_x:g} x {config.limit_y:g}")
    gen = config.map_generator
    if gen is not None:
        print(
            f"maps          {gen.name} (procedural: {gen.count[0]}-{gen.count[1]} boxes drawn "
            f"at each reset in {gen.slots} slots, symmetry {gen.symmetry})"
        )
    else:
        print(
            f"maps          {config.map_set} ({len(config.maps)} map"
            f"{'s' if len(config.maps) != 1 else ''}: "
            f"{', '.join(m.name for m in config.maps)}; up to {config.max_boxes} boxes)"
        )
    print(f"observation   {config.obs_type}: {env.observation_space} per agent")
    print(
        f"action        {'discrete' if config.discrete_actions else 'continuous'}: "
        f"{env.action_space} per agent"
    )
    defaults = EnvConfig()
    changed = [
        f"{f.name}={getattr(config, f.name)!r}"
        for f in dataclasses.fields(EnvConfig)
        if f.name not in _NOT_SETTINGS and getattr(config, f.name) != getattr(defaults, f.name)
    ]
    print(f"settings      {', '.join(changed) if changed else '(all EnvConfig defaults)'}")
    print("\nagent  team  type          " + "  ".join(PER_AGENT_FIELDS))
    for i in range(config.n_agents):
        values = [getattr(config, name)[i] for name in PER_AGENT_FIELDS]
        cells = [
            f"{v:g}".ljust(len(name)) for v, name in zip(values, PER_AGENT_FIELDS, strict=True)
        ]
        kind = config.type_names[i] if config.type_names else "-"
        print(f"{i:<5}  {config.teams[i]:<4}  {kind:<12}  " + "  ".join(cells).rstrip())
    return 0


# ------------------------------------------------------------------------------------------
# render, replay
# ------------------------------------------------------------------------------------------


def _cmd_render(args: argparse.Namespace) -> int:
    from gigastep.eval.matches import resolve_player
    from gigastep.viz.render import recording_frames, save_video
    from gigastep.viz.replay import record_game

    out = _video_path(args.out)
    if args.save_replay:
        _check_output(args.save_replay, "--save-replay")
    env = _env(args.name, args.set)
    agents = _default_agents(env, args.agents)
    _check_video_size(
        env, agents, args.scale, args.steps, out, f"--scale {args.scale}, --steps {args.steps}"
    )
    players = (resolve_player(args.policy, args.device), resolve_player(args.opponent, args.device))
    overrides = _overrides(args.set)
    rec = _with_progress(
        args.steps,
        "playing",
        "step",
        lambda bar: record_game(
            args.name, players, args.steps, args.seed, agents, overrides, args.device, bar
        ),
    )
    frames = recording_frames(rec, args.scale)
    save_video(frames, out, args.fps)
    print(
        f"wrote {out}: {len(frames)} frames of {frames[0].shape[1]}x{frames[0].shape[0]}, "
        f"{rec.steps} steps of {rec.players[0]} (team 0) vs {rec.players[1]} (team 1)"
    )
    if args.save_replay:
        replay = rec.replay()
        replay.render_options = {"scale": args.scale, "fps": args.fps}
        replay.save(args.save_replay)
        print(
            f"wrote {args.save_replay}: replay of {replay.steps} steps (gigastep replay "
            f"{args.save_replay} --out FILE.gif)"
        )
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from gigastep.viz.render import recording_frames, save_video
    from gigastep.viz.replay import Replay, check_agents

    out = _video_path(args.out)
    replay = Replay.load(args.file)
    scale = args.scale or _render_option(replay.render_options, "scale", 4, args.file)
    fps = args.fps or _render_option(replay.render_options, "fps", 10.0, args.file)
    env = _replay_env(replay, args.file)
    agents = check_agents(env, replay.agents if args.agents is None else args.agents)
    _check_video_size(env, agents, scale, replay.steps, out, f"{args.file!r} at scale {scale}")
    rec = replay.simulate(agents=agents)
    frames = recording_frames(rec, scale)
    save_video(frames, out, fps)
    print(
        f"wrote {out}: {len(frames)} frames, {rec.steps} steps of {replay.scenario} "
        f"(seed {replay.seed}), re-simulated exactly"
    )
    return 0


def _replay_env(replay: Replay, path: str) -> GigastepEnv:
    """The replay's game (`Replay.env`), its errors naming the file."""
    try:
        return replay.env()
    except (ValueError, TypeError) as err:  # the game changed, an unknown override, ...
        raise CommandError(f"{path!r}: {err}") from None


def _render_option(options: dict[str, Any], key: str, default: float, path: str) -> Any:
    """The replay's recorded scale (a positive integer) or fps (a positive number)."""
    value = options.get(key, default)
    kind = int if key == "scale" else (int, float)
    if not isinstance(value, kind) or isinstance(value, bool) or not value > 0:
        what = "a positive integer" if key == "scale" else "a positive number"
        raise CommandError(
            f"{path!r}: its render option {key} is {value!r}, expected {what} (or give --{key})"
        )
    return value


WINDOW_MAX = 16384
"""The largest window side SDL (pygame) opens on common displays and drivers."""


def _check_window(env: GigastepEnv, agents: tuple[int, ...], scale: int) -> None:
    """Refuse, before building the game, a window larger than a display can open."""
    from gigastep.viz.render import FrameRenderer

    height, width, _ = FrameRenderer(env, agents, scale=scale).shape
    if max(height, width) > WINDOW_MAX:
        raise CommandError(
            f"--scale {scale}: a window of {width}x{height} pixels, and the largest that "
            f"opens is {WINDOW_MAX}x{WINDOW_MAX}; choose a smaller scale"
        )


# ------------------------------------------------------------------------------------------
# eval, league
# ------------------------------------------------------------------------------------------


def _match_scenario(args: argparse.Namespace, players: Sequence[Player]) -> str:
    """--scenario, else the game a checkpoint says it was trained on, else the default."""
    from gigastep.eval.matches import DEFAULT_SCENARIO

    if args.scenario:
        return args.scenario
    trained = [getattr(p, "scenario", None) for p in players]
    named = [s for s in trained if isinstance(s, str)]
    return named[0] if named else DEFAULT_SCENARIO


def _match_options(args: argparse.Namespace) -> dict[str, Any]:
    return dict(
        max_steps=args.max_steps, batch_size=args.batch, device=args.device, **_overrides(args.set)
    )


def _cmd_eval(args: argparse.Namespace) -> int:
    from gigastep._util.files import write_text
    from gigastep.eval.matches import evaluate, resolve_player

    if args.json:
        _check_output(args.json, "--json")
    if args.split is not None:
        return _cmd_eval_split(args)
    if args.b is None:
        raise CommandError("give two players A and B (or --split NAME and one policy)")
    if args.marl_eval or args.few_shot or args.items is not None:
        raise CommandError("--marl-eval, --few-shot and --items go with --split")
    args.games = 256 if args.games is None else args.games
    a, b = (resolve_player(p, args.device) for p in (args.a, args.b))
    scenario = _match_scenario(args, (a, b))
    _check_name(scenario)
    options = dict(seed=args.seed, a_team=args.a_team, **_match_options(args))
    result = _with_progress(
        args.games,
        f"{a.name} vs {b.name}",
        "game",
        lambda bar: evaluate(a, b, scenario, args.games, progress=bar, **options),
    )
    print(result.summary())
    if args.json:
        write_text(args.json, json.dumps(result.to_dict(), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _cmd_eval_split(args: argparse.Namespace) -> int:
    """`gigastep eval --split NAME POLICY`: the split's zero-shot table."""
    from gigastep._util.files import write_text
    from gigastep.eval.splits import evaluate_split, load_split

    if args.b is not None:
        raise CommandError(
            f"--split takes one player (the policy), got two: {args.a!r} and "
            f"{args.b!r}; the opponents are the split's"
        )
    fixed = {
        "--scenario": args.scenario,
        "--a-team": args.a_team,
        "--set": args.set,
        "--max-steps": args.max_steps,
    }
    given = [k for k, v in fixed.items() if v is not None]
    if given or args.seed != 0:
        given += ["--seed"] if args.seed != 0 else []
        raise CommandError(
            f"with --split, {', '.join(given)} cannot be given; the split fixes each "
            f"item's scenario, settings, opponents and seed"
        )
    if args.marl_eval:
        _check_output(args.marl_eval, "--marl-eval")
    split = load_split(args.split)
    roles = tuple(r.strip() for r in args.roles.split(",") if r.strip())
    items = None
    if args.items is not None:
        items = tuple(i.strip() for i in args.items.split(",") if i.strip())
    result = evaluate_split(
        split,
        args.a,
        roles=roles,
        items=items,
        games=args.games,
        few_shot=args.few_shot,
        batch_size=args.batch,
        device=args.device,
        progress=lambda what: print(f"playing {what}", file=sys.stderr),
    )
    print(result.table())
    if args.json:
        write_text(args.json, json.dumps(result.to_json(), indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.marl_eval:
        write_text(args.marl_eval, json.dumps(result.marl_eval(), indent=2) + "\n")
        print(f"wrote {args.marl_eval}")
    return 0


def _cmd_league(args: argparse.Namespace) -> int:
    from gigastep.eval.matches import resolve_player
    from gigastep.eval.ratings import play_league

    if len(args.players) < 2:
        raise CommandError(f"a league needs at least 2 players, got {args.players}")
    from gigastep.eval.ratings import FILES

    _check_output_folder(args.out, "--out", FILES)
    try:  # what writing the ratings and the heat map will need
        import matplotlib  # noqa: F401
        import scipy.optimize  # noqa: F401
    except ImportError as err:
        raise CommandError(
            f"the league's ratings and heat map need scipy and matplotlib ({err}): "
            "pip install 'gigastep[eval]'"
        ) from None
    players = [resolve_player(p, args.device) for p in args.players]
    scenario = _match_scenario(args, players)
    _check_name(scenario)
    k = len(players)
    pairs = k * (k - 1) // 2 + (k if args.self_play else 0)
    options = dict(seed=args.seed, self_play=args.self_play, **_match_options(args))
    league = _with_progress(
        pairs * args.games,
        "league",
        "game",
        lambda bar: play_league(players, scenario, args.games, progress=bar, **options),
    )
    paths = league.write(args.out)
    print(league.summary())
    print(f"wrote {', '.join(os.path.basename(p) for p in paths.values())} to {args.out}")
    return 0


# ------------------------------------------------------------------------------------------
# play, view
# ------------------------------------------------------------------------------------------


def _cmd_play(args: argparse.Namespace) -> int:
    from gigastep.viz.replay import GameRunner
    from gigastep.viz.viewer import Viewer, _pygame

    _pygame()  # the extra is needed: say so before building the game
    if args.save_replay:
        _check_output(args.save_replay, "--save-replay")
    env = _env(args.name, args.set)
    if not 0 <= args.agent < env.n_agents:
        raise CommandError(f"--agent {args.agent}: this game has agents 0..{env.n_agents - 1}")
    _check_window(env, (args.agent,) if env.obs_type in ("rgb", "rgb_vector") else (), args.scale)
    team = env.config.teams[args.agent]
    players = [args.teammates, args.opponent] if team == 0 else [args.opponent, args.teammates]
    game = GameRunner(args.name, players, args.seed, _overrides(args.set), args.device)
    viewer = Viewer(game, human=args.agent, fps=args.fps, scale=args.scale, title=args.name)
    frames = viewer.run(max_frames=args.max_frames)
    print(f"{frames} frames, {game.t} steps played")
    if args.save_replay:
        game.replay(viewer.renderer.agents).save(args.save_replay)
        print(f"wrote {args.save_replay}: replay of {game.t} steps")
    return 0


def _cmd_view(args: argparse.Namespace) -> int:
    from gigastep.viz.replay import GameRunner, Replay
    from gigastep.viz.viewer import Viewer, _pygame

    _pygame()
    if os.path.isfile(args.source) and not args.source.endswith(".toml"):
        replay = Replay.load(args.source)
        _check_window(_replay_env(replay, args.source), replay.agents, args.scale)
        viewer = Viewer.for_replay(replay, fps=args.fps, scale=args.scale)
    else:
        env = _env(args.source, args.set)
        agents = _default_agents(env, args.agents)
        _check_window(env, agents, args.scale)
        game = GameRunner(
            args.source, (args.policy, args.opponent), args.seed, _overrides(args.set), args.device
        )
        viewer = Viewer(
            game, None, fps=args.fps, scale=args.scale, agents=agents, title=args.source
        )
    frames = viewer.run(max_frames=args.max_frames)
    print(f"{frames} frames, {viewer.game.t} steps shown")
    return 0


# ------------------------------------------------------------------------------------------
# bench, train: other modules of the repository
# ------------------------------------------------------------------------------------------


def _forward(command: str, argv: list[str]) -> int:
    """Run `python -m <module> argv` with this Python; its exit status is ours."""
    import importlib.util
    import site
    import subprocess
    import sysconfig

    module, reasons = locate(FORWARD[command])
    if module is None:
        if command == "bench":
            what = (
                "the benchmarks (benchmarks/) are part of the Gigastep repository, not of the "
                "installed package: run `gigastep bench` from a checkout after `pip install -e "
                "'.[bench]'` there, or `python -m benchmarks.report` in its root folder"
            )
        else:
            what = (
                "the PPO trainer is shipped in the gigastep wheel as gigastep_baselines and is "
                "the folder baselines/ of a checkout: reinstall gigastep (pip install "
                "'gigastep[train]'), or run it from a checkout after `pip install -e '.[train]'`"
            )
        tried = " or ".join(f"`python -m {m}`" for m in FORWARD[command])
        none = "neither can" if len(reasons) > 1 else "it cannot"
        print(
            f"gigastep: error: `gigastep {command}` runs {tried}, but {none} be imported "
            f"({'; '.join(reasons)}): {what}",
            file=sys.stderr,
        )
        return 2
    if argv[:1] in (["-h"], ["--help"]):
        print(f"gigastep {command}: forwards its arguments to `python -m {module}`:\n")
        sys.stdout.flush()
    # The folder that holds the package (a checkout) goes on the child's path; an installed
    # package's site-packages does not (the child has it already, after the standard library,
    # which site-packages on PYTHONPATH would come before).
    spec = importlib.util.find_spec(module)
    root = os.path.abspath(spec.origin) if spec is not None and spec.origin else ""
    for _ in range(module.count(".") + 1 if root else 0):
        root = os.path.dirname(root)
    installed = {os.path.abspath(sysconfig.get_path(key)) for key in ("purelib", "platlib")}
    installed.add(os.path.abspath(site.getusersitepackages()))
    env = dict(os.environ)
    if root and root not in installed:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.call([sys.executable, "-m", module, *argv], env=env)


# ------------------------------------------------------------------------------------------
# Parser
# ------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that adds the closest valid choices to an 'invalid choice' error."""

    def error(self, message: str) -> NoReturn:
        if "invalid choice:" in message and "choose from" in message:
            bad = message.split("invalid choice:", 1)[1].split("(", 1)[0].strip(" '\"")
            choices = [c.strip(" '\")") for c in message.split("choose from", 1)[1].split(",")]
            close = difflib.get_close_matches(bad, choices, n=3, cutoff=0.0)
            message += f"; closest: {', '.join(close)}"
        super().error(message)


def _add_game_options(p: argparse.ArgumentParser, steps: bool = False) -> None:
    p.add_argument("--seed", type=_seed, default=0, help="the game's seed (default 0)")
    p.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override an EnvConfig field (repeatable), e.g. max_episode_length=100",
    )
    p.add_argument(
        "--device", type=_device, default="cpu", help="torch device for checkpoint players"
    )
    if steps:
        p.add_argument(
            "--steps",
            type=_positive,
            default=DEFAULT_STEPS,
            help=f"at most this many steps (default {DEFAULT_STEPS})",
        )


def _add_match_options(p: argparse.ArgumentParser, games: int | None) -> None:
    default = "256; with --split, the split's" if games is None else str(games)
    p.add_argument(
        "--games", type=_positive, default=games, help=f"games to count (default {default})"
    )
    p.add_argument(
        "--scenario",
        help="scenario name (default: the checkpoint's game, else "
        "identical_5_vs_5_fobs_vec_void_disc)",
    )
    p.add_argument("--seed", type=_seed, default=0, help="seed of the start positions (default 0)")
    p.add_argument(
        "--max-steps",
        type=_positive,
        help="give up games still running after "
        "this many steps (default: the scenario's time limit)",
    )
    p.add_argument("--batch", type=_positive, default=4096, help="games played at once")
    p.add_argument(
        "--device", type=_device, default="cpu", help="torch device for checkpoint players"
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override an EnvConfig field (repeatable)",
    )


def _add_view_options(p: argparse.ArgumentParser, default_scale: int | None) -> None:
    p.add_argument(
        "--scale",
        type=_positive,
        default=default_scale,
        help="pixels per view pixel" + (f" (default {default_scale})" if default_scale else ""),
    )
    p.add_argument(
        "--fps",
        type=_fps,
        default=None if default_scale is None else 10.0,
        help="frames per second (default 10)",
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gigastep")
    except PackageNotFoundError:  # running from a source tree without an install
        from gigastep import __version__

        return __version__


def _add_catalogue(commands: argparse._SubParsersAction[_Parser]) -> None:
    p = commands.add_parser("list", help="list the base scenarios (--all: every name)")
    p.add_argument("--all", action="store_true", help="print all 432 scenario names")
    p.set_defaults(run=_cmd_list)
    p = commands.add_parser("info", help="describe one scenario")
    p.add_argument("name", help="a scenario name, a .toml file, or file.toml#name")
    p.set_defaults(run=_cmd_info)


def _add_videos(commands: argparse._SubParsersAction[_Parser]) -> None:
    p = commands.add_parser("render", help="play one episode and write a GIF or MP4")
    p.add_argument("name", help="scenario name (gigastep list --all)")
    p.add_argument("--policy", default="pursuit", help="team 0's player (default pursuit)")
    p.add_argument("--opponent", default="random", help="team 1's player (default random)")
    p.add_argument("--out", required=True, help="video file, .gif or .mp4")
    p.add_argument(
        "--agents",
        type=int,
        nargs="*",
        help="agents whose ego views are shown (default: one per team, RGB games)",
    )
    p.add_argument("--save-replay", metavar="FILE", help="also write the game's replay file")
    _add_game_options(p, steps=True)
    _add_view_options(p, 4)
    p.set_defaults(run=_cmd_render)
    p = commands.add_parser("replay", help="re-simulate a replay file and write its video")
    p.add_argument("file", help="a replay file (gigastep render --save-replay)")
    p.add_argument("--out", required=True, help="video file, .gif or .mp4")
    p.add_argument("--agents", type=int, nargs="*", help="ego views (default: as recorded)")
    _add_view_options(p, None)
    p.set_defaults(run=_cmd_replay)


def _add_matches(commands: argparse._SubParsersAction[_Parser]) -> None:
    p = commands.add_parser(
        "eval", help="play A against B and report win rates, or a policy on a split"
    )
    p.add_argument("a", help="player A: random, circle, pursuit, evade or a checkpoint file")
    p.add_argument("b", nargs="?", help="player B (the same kinds); not with --split")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON")
    p.add_argument(
        "--split",
        metavar="NAME",
        help="play A on a generalisation split (a shipped name or a .toml file): every "
        "item against its opponents, beside the split's reference players",
    )
    p.add_argument(
        "--roles",
        default="train,test",
        help="with --split: the items to play, comma-separated (default train,test)",
    )
    p.add_argument(
        "--items",
        metavar="ID,ID",
        help="with --split: only these items of the roles (e.g. the one training item the "
        "policy trained on)",
    )
    p.add_argument(
        "--marl-eval", metavar="PATH", help="with --split: also write marl-eval's JSON layout"
    )
    p.add_argument(
        "--few-shot",
        type=_budgets,
        default=(),
        metavar="K1,K2",
        help="with --split: also fine-tune the policy K agent-steps on each test item and "
        "play it again on fresh games (a checkpoint of a trainer that can fine-tune)",
    )
    p.add_argument(
        "--a-team",
        type=int,
        choices=(0, 1),
        help="A plays only this team (default: both, half the games each, in symmetric scenarios)",
    )
    _add_match_options(p, None)
    p.set_defaults(run=_cmd_eval)
    p = commands.add_parser("league", help="every pair of players: matrix, ratings, heat map")
    p.add_argument("players", nargs="+", help="two or more players (names or checkpoints)")
    p.add_argument(
        "--out",
        required=True,
        help="folder for matrix.csv, results.csv, ratings.csv, league.json, heatmap.png",
    )
    p.add_argument("--self-play", action="store_true", help="also play each against itself")
    _add_match_options(p, 64)
    p.set_defaults(run=_cmd_league)


def _add_windows(commands: argparse._SubParsersAction[_Parser]) -> None:
    p = commands.add_parser("play", help="fly one agent yourself (keyboard or joystick)")
    p.add_argument("name", help="scenario name (gigastep list --all)")
    p.add_argument("--agent", type=int, default=0, help="the agent you fly (default 0)")
    p.add_argument("--teammates", default="pursuit", help="player of your team's other agents")
    p.add_argument("--opponent", default="pursuit", help="the other team's player")
    p.add_argument("--save-replay", metavar="FILE", help="write your game's replay on quitting")
    p.set_defaults(run=_cmd_play)
    v = commands.add_parser("view", help="watch a game or a replay file")
    v.add_argument("source", help="scenario name or replay file")
    v.add_argument("--policy", default="pursuit", help="team 0's player (default pursuit)")
    v.add_argument("--opponent", default="random", help="team 1's player (default random)")
    v.add_argument("--agents", type=int, nargs="*", help="agents whose ego views are shown")
    v.set_defaults(run=_cmd_view)
    for window in (p, v):
        window.add_argument("--max-frames", type=_positive, help="close after this many frames")
        _add_game_options(window)
        _add_view_options(window, 3)


def _parser() -> argparse.ArgumentParser:
    about = "Gigastep: scenarios, games, videos, evaluation and ratings."
    parser = _Parser(prog="gigastep", description=about)
    parser.add_argument("--version", action="version", version=f"gigastep {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_catalogue, _add_videos, _add_matches, _add_windows):
        add(commands)
    for name, modules in FORWARD.items():  # parsed by main: listed here for --help
        module = " or ".join(modules)
        p = commands.add_parser(
            name, help=f"run python -m {module} (arguments passed on)", add_help=False
        )
        p.add_argument("args", nargs=argparse.REMAINDER, help=f"arguments of {module}")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `gigastep` command; returns the exit status (2 for a bad name or argument)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in FORWARD:  # everything after the command belongs to the target
        return _forward(argv[0], argv[1:])
    try:
        debug = flag("GIGASTEP_DEBUG", False)  # developers: the traceback instead of one line
    except ValueError as err:
        print(f"gigastep: error: {err}", file=sys.stderr)
        return 2
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse exits on --help, --version and usage errors
        return int(exit_.code or 0)
    try:
        return args.run(args)
    except (
        CommandError,
        ValueError,
        TypeError,
        OSError,
        ImportError,
        MemoryError,
        RuntimeError,
    ) as err:
        # OSError: a file that could not be read or written (its name is in the message);
        # RuntimeError: XLA's or torch's (out of device memory, say)
        if debug:
            raise
        print(f"gigastep {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gigastep: interrupted", file=sys.stderr)
        return 130


def _one_line(err: BaseException) -> str:
    """The message of `err` on one line (a compiler's or a parser's may have several)."""
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, MemoryError):
        return f"out of memory ({text}); try fewer games at once (--batch) or a smaller scale"
    return text


if __name__ == "__main__":
    sys.exit(main())
