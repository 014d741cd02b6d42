"""Draw the docs site's benchmark plots from docs/benchmarks.json (issue 33: plots made from the
numbers, never by hand). `mkdocs build` runs this first (scripts/docs_hooks.py); by hand:

    .venv/bin/python scripts/plot_benchmarks.py [--out DIR]

Each chart is grouped horizontal bars: a bar ends at the middle of the measured range and its
whisker spans the range [low, high] over separate runs. SVG, with a fixed hash salt and no
date, so the same data always gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "benchmarks.json"
OUT = ROOT / "docs" / "img"


def plot(chart: dict, out: Path) -> Path:
    groups = chart["groups"]
    names = list(dict.fromkeys(name for g in groups for name in g["series"]))
    height = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * len(groups) * len(names)))
    for k, name in enumerate(names):
        ys, mids, errs = [], [], [[], []]
        for i, group in enumerate(groups):
            if name not in group["series"]:
                continue
            low, high = group["series"][name]
            mid = (low + high) / 2
            ys.append(i + (k - (len(names) - 1) / 2) * height)
            mids.append(mid)
            errs[0].append(mid - low)
            errs[1].append(high - mid)
        ax.barh(ys, mids, height=height * 0.9, xerr=errs, capsize=3, label=name)
    ax.set_yticks(range(len(groups)), [g["label"] for g in groups])
    ax.invert_yaxis()
    ax.set_xlabel(chart["unit"])
    ax.set_title(chart["title"], fontsize=10)
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = out / f"bench_{chart['id']}.svg"
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    plt.rcParams["svg.hashsalt"] = "streamfold"
    for chart in json.loads(args.data.read_text(encoding="utf-8"))["charts"]:
        plot(chart, args.out)


if __name__ == "__main__":
    main()
