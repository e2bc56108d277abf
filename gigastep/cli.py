"""The `gigastep` command: browse the scenario catalogue.

gigastep list              base scenarios with their teams (--all: all 288 names)
gigastep info NAME         one scenario in detail (NAME may be a .toml file, file.toml#name)
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys

from gigastep import scenarios
from gigastep.types import EnvConfig

__all__ = ["main"]

_PER_AGENT = ("sprites", "max_health", "detection_range", "damage_range", "thrust", "idle_reward")
_NOT_SETTINGS = {"teams", "type_names", "maps", "map_set", "limit_x", "limit_y", *_PER_AGENT}


def _composition(config: EnvConfig, team: int) -> str:
    """'more_health x3, faster, default x2' for the agents of one team, in agent order."""
    names = config.type_names or ("custom",) * config.n_agents
    members = [t for t, k in zip(names, config.teams, strict=True) if k == team]
    runs = [(name, len(list(group))) for name, group in itertools.groupby(members)]
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in runs) or "-"


def _cmd_list(args) -> int:
    bases = scenarios.base_scenarios()
    names = scenarios.list_scenarios()
    if args.all:
        print("\n".join(names))
        return 0
    rows = []
    for base in bases:
        config = scenarios.make_config(base)
        size = f"{config.limit_x:g}x{config.limit_y:g}"
        rows.append((base, str(config.n_agents), _composition(config, 0),
                     _composition(config, 1), size))  # fmt: skip
    header = ("scenario", "agents", "team 0", "team 1", "world")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(
        f"\n{len(bases)} base scenarios, {len(names)} named variants "
        "<base>_<fobs|pobs>_<rgb|vec>_<maps|void>_<cont|disc> (gigastep list --all)"
    )
    return 0


def _cmd_info(args) -> int:
    env = scenarios.make(args.name)
    spec, config = env.spec, env.config
    n0, n1 = config.team_sizes
    print(f"scenario      {spec.name}")
    print(f"version       {spec.version}")
    print(f"hash          {spec.hash}")
    print(f"agents        {config.n_agents} (team 0: {n0}, team 1: {n1})")
    print(f"team 0        {_composition(config, 0)}")
    print(f"team 1        {_composition(config, 1)}")
    print(f"world         {config.limit_x:g} x {config.limit_y:g}")
    print(
        f"maps          {config.map_set} ({len(config.maps)} map"
        f"{'s' if len(config.maps) != 1 else ''}: "
        f"{', '.join(m.name for m in config.maps)}; up to {config.max_boxes} boxes)"
    )
    print(f"observation   {config.obs_type}: {env.observation_space} per agent")
    print(f"action        {'discrete' if config.discrete_actions else 'continuous'}: "
          f"{env.action_space} per agent")  # fmt: skip
    defaults = EnvConfig()
    changed = [
        f"{f.name}={getattr(config, f.name)!r}"
        for f in dataclasses.fields(EnvConfig)
        if f.name not in _NOT_SETTINGS and getattr(config, f.name) != getattr(defaults, f.name)
    ]
    print(f"settings      {', '.join(changed) if changed else '(all EnvConfig defaults)'}")
    print("\nagent  team  type          " + "  ".join(_PER_AGENT))
    for i in range(config.n_agents):
        values = [getattr(config, name)[i] for name in _PER_AGENT]
        cells = [f"{v:g}".ljust(len(name)) for v, name in zip(values, _PER_AGENT, strict=True)]
        kind = config.type_names[i] if config.type_names else "-"
        print(f"{i:<5}  {config.teams[i]:<4}  {kind:<12}  " + "  ".join(cells).rstrip())
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gigastep", description="Browse Gigastep's scenario catalogue."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    lister = commands.add_parser("list", help="list the base scenarios (--all: every name)")
    lister.add_argument("--all", action="store_true", help="print all 288 scenario names")
    lister.set_defaults(run=_cmd_list)
    info = commands.add_parser("info", help="describe one scenario")
    info.add_argument("name", help="a scenario name, a .toml file, or file.toml#name")
    info.set_defaults(run=_cmd_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `gigastep` command; returns the exit status (2 for a bad name or argument)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse exits on --help and on usage errors
        return int(exit_.code or 0)
    try:
        return args.run(args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"gigastep: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
