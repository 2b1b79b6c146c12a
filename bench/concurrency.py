"""Part 2 of `make bench`: concurrent streams, the GroupQueryAttention variant, Poisson arrivals.

Every run uses prompts of exactly `length` tokens (prompts.long_prompts: distinct from their first KV page
on, so no prefix-cache hit between any two of them) and `n` new tokens, so the decode steps run at a past of
about length .. length + n (448 + 96: ~500). Each concurrency level gets its own prompts, the same for every
system at that level; the Poisson run has its own too.

Steady-state decode rate: from the moment the last stream got its first token until the moment the first
stream got its last token, every stream is decoding; the rate is the number of tokens all streams received
inside that window divided by its length. Prefill phases (and the tail where some streams have finished)
are outside it. For a static batch (the raw loops, onnxruntime-genai's batch) every row starts and ends
together, so the window is first token .. last token: batch * (n - 1) / (last - first), as in part 1.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.prompts import long_prompts
from bench.report import NEAR_TIE, save_figure


# What runs, in order within a level. kind: how the worker is driven. model: the ONNX layout it runs.
#   tiled   -> run_tiled(text, ids, n, batch): one prompt, prefilled once, KV repeated into every row
#   streams -> run_streams(items, n): one request per prompt, all issued together
#   batch   -> run_batch(items, n): one static batch of every prompt
@dataclass(frozen=True)
class Setting:
    key: str  # unique per row in the table
    worker: str
    kind: str
    label: str
    model: str  # "concat" or "gqa"
    levels: tuple[int, ...]
    short_from: int | None = None  # from this many streams on, run max SHORT_TOKENS new tokens (see below)


SETTINGS = [
    Setting("raw-gqa", "raw-gqa", "tiled", "raw onnxruntime loop, GQA + shared KV buffer (I/O binding)", "gqa",
            (1, 4, 16)),
    Setting("engine", "engine", "streams", "tritongen engine in-process, as served", "gqa", (1, 4, 16)),
    Setting("triton", "triton", "streams", "tritongen via Triton, gRPC streaming (a stream per client)", "gqa",
            (1, 4, 16)),
    Setting("triton-si4", "triton-si4", "streams",
            "tritongen via Triton, as above with stream_interval 4 per request (4 tokens per response)", "gqa", (16,)),
    Setting("raw", "raw", "tiled", "raw onnxruntime loop, concat past/present", "concat", (1, 4, 16)),
    Setting("ort-genai-batch", "ort-genai", "batch", "onnxruntime-genai, one static batch", "concat", (16,)),
    Setting("ort-genai-gqa-batch", "ort-genai-gqa", "batch", "onnxruntime-genai, one static batch, GQA wrapper",
            "gqa", (1, 16)),
    Setting("ort-genai-threads", "ort-genai", "streams", "onnxruntime-genai, one Generator per request (threads)",
            "concat", (1, 4, 16), short_from=4),
    Setting("onnx-genai-server", "onnx-genai-server", "streams",
            "onnx-genai server (continuous batching, GQA wrapper; derived, no per-token times)", "gqa", (1, 4, 16)),
]

# The key comparisons run PASSES times per level in these levels, on fresh prompts each pass,
# alternating the order (A B C D, D C B A, A B C D, ...: a load that drifts during the level hits every side
# alike); their decode rate is the mean of the passes. The machine is shared: one pass moves by 10% or more.
REPEAT = ("raw-gqa", "engine", "triton", "triton-si4", "raw")
REPEAT_LEVELS = (1, 16)
PASSES = 4
# Rows that share a server with another row get prompts of their own: the same prompts would be prefix-cache
# hits there. Their tokens are not compared with the engine's (tests/test_stream_interval.py does that).
OWN_PROMPTS = ("triton-si4",)
# One Generator per request in threads decodes one sequence per model call: 16 x 96 tokens would take over a
# minute. From `short_from` streams on it generates this many tokens (a past of length .. length + 32, which
# makes its steps cheaper than the others': the comparison favours it).
SHORT_TOKENS = 32
WARM_TOKENS = 4  # per-level warm-up: short prompts at the level's batch size, so no first-shape cost is measured
WARM_LENGTH = 32


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Section:
    length: int
    n: int
    levels: tuple[int, ...]
    runs: dict = field(default_factory=dict)  # (setting key, level) -> record (record["n"]: new tokens)
    repeats: dict = field(default_factory=dict)  # (setting key, level) -> records of the later passes
    loads: dict = field(default_factory=dict)  # (setting key, level) -> load average before the run
    failures: dict = field(default_factory=dict)
    cut: list = field(default_factory=list)
    poisson: dict | None = None
    prompts: dict = field(default_factory=dict)  # (own key or None, pass, level) -> [(text, ids)]; "poisson"


def prompt_sets(tokenizer, length: int, levels, poisson_count: int):
    """Disjoint prompt sets: per level and pass (and per own-prompt row), the Poisson run's, then short warm-ups."""
    sets, used = {}, 0
    for level in levels:
        owners = [None] + [s.key for s in SETTINGS if s.key in OWN_PROMPTS and level in s.levels]
        for p in range(PASSES if level in REPEAT_LEVELS else 1):
            for owner in owners:
                sets[(owner, p, level)] = long_prompts(tokenizer, level, length, skip=used)
                used += level
    sets["poisson"] = long_prompts(tokenizer, poisson_count, length, skip=used)
    used += poisson_count
    for level in levels:
        sets[("warm", level)] = long_prompts(tokenizer, level, WARM_LENGTH, skip=used)
        used += level
    return sets


def _call(worker, setting: Setting, items, n: int):
    if setting.kind == "tiled":
        return worker.call("run_tiled", *items[0], n, len(items))
    if setting.kind == "batch":
        return worker.call("run_batch", items, n)
    return worker.call("run_streams", items, n)


def run(workers: dict, tokenizer, length: int, n: int, levels=(1, 4, 16), poisson_count: int = 20,
        poisson_fraction: float = 0.9, poisson_seed: int = 7, deadline: float | None = None,
        pause_s: float = 0.3) -> Section:
    """Every setting whose worker is loaded, level by level; then Poisson arrivals through Triton."""
    section = Section(length, n, tuple(levels))
    sets = prompt_sets(tokenizer, length, levels, poisson_count)
    section.prompts = {k: v for k, v in sets.items() if k == "poisson" or k[0] != "warm"}
    for level in levels:
        first = [s for s in SETTINGS if level in s.levels and s.worker in workers]
        repeated = [s for s in first if s.key in REPEAT]
        todo = [(s, p) for p in range(PASSES if level in REPEAT_LEVELS else 1)
                for s in (repeated if p % 2 == 0 else repeated[::-1])]
        # The peers' one run each comes after the key passes: on a machine too slow for the budget they are
        # what is left out, not the passes of the key comparisons.
        todo += [(s, 0) for s in first if s.key not in REPEAT]
        for setting, p in todo:
            key = (setting.key, level)
            if key in section.failures:
                continue
            if deadline is not None and time.monotonic() > deadline:
                section.cut.append(f"pass {p + 1} of {setting.key} at {level} stream(s) left out: the time budget for "
                                   "part 2 ran out")
                log("TIME BUDGET: " + section.cut[-1])
                continue
            worker = workers[setting.worker]
            n_used = min(n, SHORT_TOKENS) if setting.short_from and level >= setting.short_from else n
            items = sets[(setting.key if setting.key in OWN_PROMPTS else None, p, level)]
            try:
                if setting.worker != "onnx-genai-server":  # its bursts cost a minute: its own first run warms it
                    _call(worker, setting, sets[("warm", level)], WARM_TOKENS)
                load = os.getloadavg()[0]
                started = time.monotonic()
                rec = _call(worker, setting, items, n_used)
                rec.update(n=n_used, load=load, prompts=(setting.key if setting.key in OWN_PROMPTS else None, p, level))
                if p == 0:
                    section.runs[key] = rec
                else:
                    section.repeats.setdefault(key, []).append(rec)
                section.loads.setdefault(key, load)
                log(f"  {setting.key} x{level}{f' (pass {p + 1})' if p else ''}: {time.monotonic() - started:.0f}s "
                    f"(load average {load:.1f})")
            except Exception as exc:  # noqa: BLE001 - one broken system must not hide the others
                section.failures[key] = str(exc).strip().splitlines()[-1]
                log(f"FAILED {setting.key} x{level}:\n{exc}")
            time.sleep(pause_s)
    if "triton" in workers and poisson_count:
        section.poisson = poisson(workers["triton"], sets["poisson"], n, section, poisson_fraction, poisson_seed,
                                  deadline)
    return section


def poisson(worker, items, n: int, section: Section, fraction: float, seed: int, deadline) -> dict:
    """Requests at exponential inter-arrival times (fixed seed) at `fraction` of the request rate Triton
    sustained with 16 streams in flight in this run."""
    top = max(section.levels)
    rec = section.runs.get(("triton", top))
    if rec is None:
        return {"error": f"no {top}-stream Triton run to derive the saturation rate from"}
    streams = rec["streams"]
    saturated = len(streams) / (max(s["times"][-1] for s in streams) - min(s["issued"] for s in streams))
    rate = fraction * saturated
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(items))
    offsets = np.concatenate([[0.0], np.cumsum(gaps[1:])]).tolist()
    expected = offsets[-1] + (max(s["times"][-1] for s in streams) - min(s["issued"] for s in streams)) / 2
    if deadline is not None and time.monotonic() + expected > deadline + 60:
        msg = f"Poisson run left out: ~{expected:.0f}s would overrun the time budget"
        section.cut.append(msg)
        log("TIME BUDGET: " + msg)
        return {"error": msg}
    log(f"Poisson arrivals through Triton: {len(items)} requests at {rate:.3f}/s ({fraction:g} x the "
        f"{saturated:.3f}/s sustained with {top} streams), seed {seed} ...")
    load = os.getloadavg()[0]
    started = time.monotonic()
    try:
        out = worker.call("run_streams", items, n, offsets)
    except Exception as exc:  # noqa: BLE001
        return {"error": str(exc).strip().splitlines()[-1]}
    log(f"  {time.monotonic() - started:.0f}s")
    out.update(rate=rate, saturated=saturated, fraction=fraction, seed=seed, load=load)
    return out


# ---- figures --------------------------------------------------------------------------------------------

def _pct(values, q):
    return float(np.percentile(values, q)) if len(values) else None


def _window_rate(times: list[float]) -> float | None:
    """One stream's token rate inside the steady window: the tokens after its first one there, over the time
    to its last one there. Summed over streams this is the aggregate rate with no edge error: the tokens of
    one step reach the streams one after another, so counting every stream's tokens between two other
    streams' token times loses up to a step's worth of tokens at the window's ends."""
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    return sum(1 for t in times if t > times[0]) / (times[-1] - times[0])


def figures(rec: dict, n: int, length: int) -> dict:
    streams = rec["streams"]
    count = len(streams)
    if rec.get("derived"):  # onnx-genai's server: end-to-end times only
        ttft = [s["ttft"] for s in streams]
        total = [s["total"] for s in streams]
        decode = float(np.mean(total) - np.mean(ttft))
        return {"streams": count, "tps": count * (n - 1) / decode if decode > 0 else None,
                "ttft_p50_ms": 1e3 * _pct(ttft, 50), "ttft_p99_ms": 1e3 * _pct(ttft, 99), "derived": True,
                "window_s": decode}
    firsts = [s["times"][0] for s in streams]
    lasts = [s["times"][-1] for s in streams]
    start, end = max(firsts), min(lasts)
    inside = [sum(1 for t in s["times"] if start < t <= end) for s in streams]
    rates = [_window_rate([t for t in s["times"] if start <= t <= end]) for s in streams]
    tps = sum(rates) if end > start and all(r is not None for r in rates) else None
    before = [sum(1 for t in s["times"] if t <= start) for s in streams]
    gaps = [g for s in streams for g in np.diff(s["times"]).tolist()]
    out = {"streams": count, "tps": tps, "window_s": max(0.0, end - start), "window_tokens": sum(inside) / count,
           "past": (length + min(before), length + n), "wall_tps": sum(len(s["tokens"]) for s in streams) /
           (max(lasts) - min(s["issued"] for s in streams)),
           "itl_p50_ms": 1e3 * _pct(gaps, 50), "itl_p90_ms": 1e3 * _pct(gaps, 90), "itl_p99_ms": 1e3 * _pct(gaps, 99)}
    if not rec.get("tiled"):
        ttft = [s["times"][0] - s["issued"] for s in streams]
        out.update(ttft_p50_ms=1e3 * _pct(ttft, 50), ttft_p90_ms=1e3 * _pct(ttft, 90),
                   ttft_p99_ms=1e3 * _pct(ttft, 99))
    hits = [s.get("prefix_hit") for s in streams if s.get("prefix_hit")]
    if hits:
        out["prefix_hits"] = len(hits)
    return out


def check_tokens(section: Section, raw_worker) -> dict:
    """Every row against the in-process engine's row for the same prompt (the tiled raw rows: against the
    engine's first prompt). A difference is classified at its first differing token by the raw concat loop's
    top-2 logit gap there, teacher-forced on the reference tokens: below 1e-4 a near-tie, else a MISMATCH."""
    notes: dict = {}
    budget = 8  # margin look-ups (each a prefill of length + k tokens)
    records = [(k, rec) for k, rec in section.runs.items()]
    records += [(k, rec) for k, recs in section.repeats.items() for rec in recs]
    engine = {rec["prompts"]: rec for (key, _), rec in records if key == "engine"}  # by prompt set
    checked: dict = {}
    for (key, level), rec in records:
        ref = engine.get(rec["prompts"])
        if key in OWN_PROMPTS:
            notes[(key, level)] = "own prompts (not compared)"
            continue
        if ref is None or key == "engine":
            notes[(key, level)] = "reference" if key == "engine" else "no reference"
            continue
        items = section.prompts[rec["prompts"]]
        diffs, rows = [], rec["streams"]
        for i, row in enumerate(rows):
            j = 0 if rec.get("tiled") else i
            want, got = ref["streams"][j]["tokens"], row["tokens"]
            want = want[:len(got)] if rec.get("n", 0) < ref.get("n", 0) else want  # a shorter run: its prefix
            if got == want:
                continue
            k = next((t for t, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            if k >= len(got) or k >= len(want):
                diffs.append(f"row {i}: {len(got)} tokens, expected {len(want)}")
                continue
            gap = None
            if raw_worker is not None and budget > 0:
                budget -= 1
                try:
                    gap = raw_worker.call("margin_at", items[j][1], want, k)
                except Exception:  # noqa: BLE001
                    gap = None
            kind = "near-tie" if gap is not None and gap < NEAR_TIE else ("MISMATCH" if gap is not None else "differs")
            diffs.append(f"row {i}: {kind} at token {k}" + (f" (top-2 gap {gap:.1e})" if gap is not None else ""))
        total, bad = checked.get((key, level), (0, []))
        checked[(key, level)] = (total + len(rows), bad + diffs)
    for k, (total, diffs) in checked.items():
        notes[k] = f"equal ({total}/{total})" if not diffs else \
            f"**{len(diffs)} of {total} differ**: " + "; ".join(diffs[:3])
    return notes


def poisson_figures(rec: dict) -> dict:
    streams = rec["streams"]
    ttft = [s["times"][0] - s["issued"] for s in streams]
    gaps = [g for s in streams for g in np.diff(s["times"]).tolist()]
    e2e = [s["times"][-1] - s["issued"] for s in streams]
    events = sorted([(s["issued"], 1) for s in streams] + [(s["times"][-1], -1) for s in streams])
    live, peak = 0, 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    span = max(s["times"][-1] for s in streams) - min(s["issued"] for s in streams)
    return {"requests": len(streams), "rate": rec["rate"], "saturated": rec["saturated"], "peak_in_flight": peak,
            "achieved_rps": len(streams) / span, "tokens_per_s": sum(len(s["tokens"]) for s in streams) / span,
            **{f"ttft_p{q}_ms": 1e3 * _pct(ttft, q) for q in (50, 90, 99)},
            **{f"itl_p{q}_ms": 1e3 * _pct(gaps, q) for q in (50, 90, 99)},
            "e2e_p50_s": _pct(e2e, 50), "e2e_p99_s": _pct(e2e, 99)}


# ---- tables ---------------------------------------------------------------------------------------------

def _fmt(value, spec, none="n/a"):
    return none if value is None else f"{value:{spec}}"


def summarize(section: Section, token_notes: dict) -> tuple[dict, dict]:
    """(figures by (key, level), raw references by (model, level))."""
    figs = {}
    for k, rec in section.runs.items():
        f = figures(rec, rec.get("n", section.n), section.length)
        f["n"] = rec.get("n", section.n)
        later = section.repeats.get(k)
        if later:
            f["passes"] = [f.get("tps")] + [figures(r, r.get("n", section.n), section.length).get("tps") for r in later]
            if all(f["passes"]):
                f["tps"] = float(np.mean(f["passes"]))
        figs[k] = f
    raws = {}
    for (key, level), f in figs.items():
        if key in ("raw", "raw-gqa"):
            raws[("concat" if key == "raw" else "gqa", level)] = f
    return figs, raws


def table(section: Section, figs: dict, raws: dict, token_notes: dict, versions: dict) -> str:
    head = ("| system | model | streams | decode tok/s, steady | per pass | x raw concat | x raw GQA | "
            "end-to-end tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | steady window | load | tokens vs engine |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|\n")
    lines = []
    for level in section.levels:
        for s in SETTINGS:
            key = (s.key, level)
            if level not in s.levels:
                continue
            label = s.label.replace("onnxruntime-genai", f"onnxruntime-genai {versions.get('onnxruntime-genai', '')}")
            label = label.replace("onnx-genai server", f"onnx-genai-server {versions.get('onnx-genai-server', '')}")
            model = "target_gqa" if s.model == "gqa" else "target"
            if key in section.failures:
                lines.append(
                    f"| {label} | {model} | {level} | FAILED: {section.failures[key][:120]} | | | | | | | | | |"
                )
                continue
            f = figs.get(key)
            if f is None:
                continue
            rc, rg = raws.get(("concat", level)), raws.get(("gqa", level))
            xc = f"{f['tps'] / rc['tps']:.2f}x" if f.get("tps") and rc and rc.get("tps") else ""
            xg = f"{f['tps'] / rg['tps']:.2f}x" if f.get("tps") and rg and rg.get("tps") else ""
            ttft = (f"{f['ttft_p50_ms']:.0f} / {f['ttft_p99_ms']:.0f}" if f.get("ttft_p50_ms") is not None
                    else "n/a (prefilled once)")
            itl = (f"{f['itl_p50_ms']:.1f} / {f['itl_p99_ms']:.1f}" if f.get("itl_p50_ms") is not None else "n/a")
            if f.get("derived"):
                window = f"derived: {f['window_s']:.1f}s of decode"
            elif f.get("tps"):
                window = (
                    f"{f['window_s']:.1f}s, {f['window_tokens']:.0f} tok/stream, past {f['past'][0]}-{f['past'][1]}"
                )
                if f["n"] != section.n:
                    window += f" ({f['n']} new tokens)"
            else:
                window = "no common decode window"
            note = token_notes.get(key, "")
            if f.get("prefix_hits"):
                note += f"; **{f['prefix_hits']} prefix-cache hit(s)**"
            passes = " / ".join(_fmt(x, ".1f") for x in f["passes"]) if f.get("passes") else ""
            e2e = "" if f.get("derived") or "wall_tps" not in f else f"{f['wall_tps']:.1f}"
            lines.append(
                f"| {label} | {model} | {level} | {_fmt(f.get('tps'), '.1f')} | {passes} | {xc} | {xg} | {e2e} | "
                f"{ttft} | "
                f"{itl} | "
                f"{window} | {section.loads.get(key, 0):.1f} | {note} |"
            )
    return head + "\n".join(lines) + "\n"


def poisson_table(pf: dict) -> str:
    return ("| requests | rate /s (x sustained) | achieved req/s | peak in flight | TTFT p50 / p90 / p99 ms | "
            "ITL p50 / p90 / p99 ms | end-to-end p50 / p99 s | tokens/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            f"| {pf['requests']} | {pf['rate']:.3f} ({pf['rate'] / pf['saturated']:.2f}x of {pf['saturated']:.3f}) | "
            f"{pf['achieved_rps']:.3f} | {pf['peak_in_flight']} | {pf['ttft_p50_ms']:.0f} / {pf['ttft_p90_ms']:.0f} / "
            f"{pf['ttft_p99_ms']:.0f} | {pf['itl_p50_ms']:.1f} / {pf['itl_p90_ms']:.1f} / {pf['itl_p99_ms']:.1f} | "
            f"{pf['e2e_p50_s']:.1f} / {pf['e2e_p99_s']:.1f} | {pf['tokens_per_s']:.1f} |\n")


# ---- plots ----------------------------------------------------------------------------------------------

def plots(out: Path, section: Section, figs: dict, pf: dict | None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(9, 5), dpi=80)
    for s in SETTINGS:
        pts = [(lvl, figs[(s.key, lvl)]["tps"]) for lvl in section.levels
               if (s.key, lvl) in figs and figs[(s.key, lvl)].get("tps")]
        if not pts:
            continue
        xs, ys = zip(*pts)
        style = "--" if s.key.startswith("raw") else "-"
        marker = "s" if s.kind == "batch" else "o"
        ax.plot(xs, ys, style, marker=marker, label=f"{s.key} ({'GQA' if s.model == 'gqa' else 'concat'})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(section.levels), [str(x) for x in section.levels])
    ax.set_xlabel("concurrent streams (batch size for the raw loops and static batches)")
    ax.set_ylabel("aggregate decode tokens/s, steady state")
    ax.set_title(f"decode throughput vs concurrency (prompts {section.length} tokens, {section.n} new)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    written.append(save_figure(fig, out / "concurrency.png"))
    if pf:
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8), dpi=80)
        qs = (50, 90, 99)
        left.bar([f"p{q}" for q in qs], [pf[f"ttft_p{q}_ms"] for q in qs], color="tab:blue")
        left.set_title("TTFT, ms")
        right.bar([f"p{q}" for q in qs], [pf[f"itl_p{q}_ms"] for q in qs], color="tab:orange")
        right.set_title("inter-token latency, ms")
        fig.suptitle(f"Triton, Poisson arrivals: {pf['requests']} requests at {pf['rate']:.2f}/s "
                     f"({pf['rate'] / pf['saturated']:.2f}x sustained)")
        written.append(save_figure(fig, out / "poisson.png"))
    return written
