"""Did a change move `make bench`? Its targets' ratios from several runs before the change and several after,
side by side.

One run's ratio moves by several percent on a shared machine with nothing changed, so a single before/after
pair cannot tell a 5% change from noise. Make the runs in alternating order (before, after, before, ...), so
a drift in the machine's speed hits both sides alike, and compare the medians; each side's spread (its
largest over its smallest run) says how much a run of one tree moves by itself.

    .venv/bin/python -m bench.compare_runs --before b1/summary.json b2/summary.json \
        --after a1/summary.json a2/summary.json [--tolerance 0.05]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def ratios(summary: Path) -> dict[str, float]:
    """Target text -> measured ratio, for the targets the run measured."""
    rows = json.loads(summary.read_text())["targets"]
    return {row["target"]: row["ratio"] for row in rows if row.get("ratio") is not None}


def compare(before: list[dict[str, float]], after: list[dict[str, float]], tolerance: float) -> list[dict]:
    """One row per target measured on both sides: each side's runs, median and spread, after / before."""
    rows = []
    for target in dict.fromkeys(t for run in before + after for t in run):
        b = [run[target] for run in before if target in run]
        a = [run[target] for run in after if target in run]
        if not (a and b):
            continue
        median_b, median_a = statistics.median(b), statistics.median(a)
        change = median_a / median_b
        rows.append({"target": target, "before": b, "after": a, "median_before": median_b, "median_after": median_a,
                     "change": change,
                     "spread_before": max(b) / min(b) - 1, "spread_after": max(a) / min(a) - 1,
                     "within": abs(change - 1) <= tolerance})
    return rows


def table(rows: list[dict], tolerance: float) -> str:
    def runs(values: list[float]) -> str:
        return " / ".join(f"{v:.3f}" for v in values)

    head = ("| target | before runs | after runs | median before | median after | after / before "
            "| spread before, after | within ±" + f"{tolerance:.0%} |\n|---|---|---|---:|---:|---:|---:|---|\n")
    return head + "".join(
        f"| {r['target']} | {runs(r['before'])} | {runs(r['after'])} | {r['median_before']:.3f} "
        f"| {r['median_after']:.3f} | {r['change']:.3f} | {r['spread_before']:.1%}, "
        f"{r['spread_after']:.1%} | {'yes' if r['within'] else '**no**'} |\n" for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, nargs="+", required=True, help="summary.json of runs before the change")
    ap.add_argument("--after", type=Path, nargs="+", required=True, help="summary.json of runs after it")
    ap.add_argument("--tolerance", type=float, default=0.05, help="largest |after / before - 1| that counts as unmoved")
    args = ap.parse_args(argv)
    rows = compare([ratios(p) for p in args.before], [ratios(p) for p in args.after], args.tolerance)
    print(table(rows, args.tolerance))
    inside = sum(r["within"] for r in rows)
    print(f"{inside} of {len(rows)} ratios within ±{args.tolerance:.0%} "
          f"({len(args.before)} runs before, {len(args.after)} after; medians compared)")
    return 0 if inside == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
