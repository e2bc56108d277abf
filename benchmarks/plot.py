"""Plot benchmark JSON rows for a paper: throughput against batch size.

    python -m benchmarks.plot results/throughput.json --out results/throughput.png

One line per (scenario, observation type, policy); log-log axes; agent-steps/s (median, with
the min-max range as a band) against the number of parallel games.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def plot_throughput(rows: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = defaultdict(list)
    for row in rows:
        if row.get("kind", "env") != "env" or "agent_steps_per_s" not in row:
            continue
        lines[(row["scenario"], row["obs_type"], row.get("policy", "none"))].append(row)
    if not lines:
        raise ValueError("no throughput rows (with 'agent_steps_per_s') in the input")
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    for (scenario, obs, policy), group in sorted(lines.items()):
        group.sort(key=lambda r: r["batch"])
        batch = [r["batch"] for r in group]
        median = [r["agent_steps_per_s"] for r in group]
        label = f"{scenario} ({obs}" + ("" if policy == "none" else f", {policy} policy") + ")"
        (line,) = ax.plot(batch, median, marker="o", label=label)
        low = [r.get("agent_steps_per_s_min", m) for r, m in zip(group, median, strict=True)]
        high = [r.get("agent_steps_per_s_max", m) for r, m in zip(group, median, strict=True)]
        ax.fill_between(batch, low, high, color=line.get_color(), alpha=0.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parallel games (batch)")
    ax.set_ylabel("agent-steps per second")
    ax.grid(True, which="both", alpha=0.3)
    # Below the axes: inside, it would cover some of the lines.
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="a JSON list written by benchmarks.throughput")
    parser.add_argument("--out", type=Path, default=Path("throughput.png"), help="image path")
    args = parser.parse_args(argv)
    rows = json.loads(args.json.read_text())
    print(f"wrote {plot_throughput(rows, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
