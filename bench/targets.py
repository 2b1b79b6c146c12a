"""The throughput targets `make bench` reads from its run: one table of ratios and the thresholds they must reach.

Each row compares two measured rates (`measured` / `reference`) against a threshold. A rate is named by
its source and the system it belongs to:

- `("streams", system, level)`: part 2's steady decode tok/s of that system at that many streams;
- `("streams-e2e", system, level)`: part 2's end-to-end tok/s (all new tokens over issue to last token);
- `("raw", layout, level)`: part 2's raw loop ("gqa" or "concat") at that batch size;
- `("part1", system)`: the part-1 rounds' decode tok/s (the row is left out unless both systems ran);
- `("genai", rate)`: the onnxruntime-genai folder's rates (`genai_folders.measure`).

A level of `TOP` is the run's most concurrent streams, which `{top}` in a row's text stands for.
"""

from __future__ import annotations

from typing import NamedTuple

TOP = "top"


class Target(NamedTuple):
    group: str  # the first column of the table: what the target compares
    what: str  # `{top}`: the run's most concurrent streams
    measured: tuple  # the ratio's numerator: a rate, see the module docstring
    reference: tuple  # its denominator
    threshold: float
    direction: str = ">="  # met when measured / reference compares so with the threshold


TARGETS: tuple[Target, ...] = (
    Target("vs the raw loop", "{top} streams, in-process engine / raw GQA b{top} loop",
           ("streams", "engine", TOP), ("raw", "gqa", TOP), 0.9),
    Target("vs the raw loop", "{top} streams, in-process engine / raw concat b{top} loop",
           ("streams", "engine", TOP), ("raw", "concat", TOP), 1.1),
    Target("vs the raw loop", "{top} streams, Triton / raw GQA b{top} loop",
           ("streams", "triton", TOP), ("raw", "gqa", TOP), 0.9),
    Target("vs the raw loop", "{top} streams, Triton / raw concat b{top} loop",
           ("streams", "triton", TOP), ("raw", "concat", TOP), 1.1),
    Target("vs the raw loop", "{top} streams, Triton with stream_interval 4 / raw GQA b{top} loop",
           ("streams", "triton-si4", TOP), ("raw", "gqa", TOP), 0.9),
    Target("vs the raw loop", "1 stream, in-process engine / raw GQA b1 loop (past ~500)",
           ("streams", "engine", 1), ("raw", "gqa", 1), 0.9),
    Target("vs the raw loop", "1 stream, Triton / raw GQA b1 loop (past ~500)",
           ("streams", "triton", 1), ("raw", "gqa", 1), 0.9),
    Target("vs the raw loop", "1 stream, Triton / raw GQA b1 loop (part 1 rounds, past ~150)",
           ("part1", "triton"), ("part1", "raw-gqa"), 0.9),
    Target("vs the raw loop", "1 stream, in-process engine / raw GQA b1 loop (part 1 rounds, past ~150)",
           ("part1", "engine"), ("part1", "raw-gqa"), 0.9),
    Target("vs the peers", "1 stream, Triton / raw loop (part 1 rounds)",
           ("part1", "triton"), ("part1", "raw"), 0.9),
    Target("vs the peers", "1 stream, Triton / onnxruntime-genai (part 1 rounds)",
           ("part1", "triton"), ("part1", "ort-genai"), 1.0),
    Target("vs the peers", "{top} streams, Triton / raw loop b{top} (concat)",
           ("streams", "triton", TOP), ("raw", "concat", TOP), 0.8),
    Target("vs the peers", "{top} streams, Triton / onnxruntime-genai static batch of {top}",
           ("streams", "triton", TOP), ("streams", "ort-genai-batch", TOP), 0.9),
    # One Generator per request in threads has no window where all of its streams decode (they finish
    # at different times), so this one compares end-to-end rates: all new tokens / (last token - issue).
    Target("vs the peers", "{top} streams, Triton / onnxruntime-genai one Generator per request (end-to-end tok/s)",
           ("streams-e2e", "triton", TOP), ("streams-e2e", "ort-genai-threads", TOP), 3.0),
    Target("int4 folder", "1 stream, Triton / og.Generator on the genai int4 folder",
           ("genai", "triton-1"), ("genai", "og-generator"), 1.0),
    Target("int4 folder", "16 streams, Triton / og.Engine on the genai int4 folder",
           ("genai", "triton-16"), ("genai", "og-engine"), 1.0),
)


def _rate(source: tuple, data: dict, top: int) -> float | None:
    kind, name, *level = source
    if kind == "genai":
        return data["genai"]["rate"][name]
    if kind == "part1":
        return data["part1"][name].get("tps")
    at = top if level[0] == TOP else level[0]
    if kind == "raw":
        return (data["raws"].get((name, at)) or {}).get("tps")
    fig = data["figs"].get((name, at)) or {}
    return fig.get("wall_tps" if kind == "streams-e2e" else "tps")


def _met(ratio: float, target: Target) -> bool:
    return ratio >= target.threshold if target.direction == ">=" else ratio <= target.threshold


def evaluate(*, figs: dict | None = None, raws: dict | None = None, part1: dict | None = None,
             genai: dict | None = None, levels=(1,)) -> list[tuple[str | int, str, float | None, float, bool | None]]:
    """(group, what, ratio, threshold, met) for every target whose rates come from what is given: part 2's
    figures (`figs`, `raws`, `part1`, `levels`) or the genai folder's report (`genai`), in table order."""
    data = {"figs": figs or {}, "raws": raws or {}, "part1": part1 or {}, "genai": genai}
    top = max(levels)
    rows = []
    for target in TARGETS:
        kind = target.measured[0]
        if (kind == "genai") != (genai is not None):
            continue
        if kind == "part1" and not (data["part1"].get(target.measured[1]) and data["part1"].get(target.reference[1])):
            continue
        a, b = _rate(target.measured, data, top), _rate(target.reference, data, top)
        ratio = a / b if a and b else None
        rows.append((target.group, target.what.format(top=top), ratio, target.threshold,
                     None if ratio is None else _met(ratio, target)))
    return rows


def table(rows) -> str:
    head = "| compares | target | measured | threshold | |\n|---|---|---:|---:|---|\n"
    return head + "\n".join(
        f"| {group} | {what} | {'n/a' if r is None else f'{r:.2f}x'} | {th:g}x | "
        f"{'n/a' if met is None else ('met' if met else '**MISSED**')} |" for group, what, r, th, met in rows) + "\n"
