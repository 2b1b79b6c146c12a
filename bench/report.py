"""Figures, token checks, the markdown table and the plots, from the raw per-run records."""

from __future__ import annotations

from pathlib import Path

import numpy as np

NEAR_TIE = 1e-4  # a greedy divergence is acceptable only at a top-2 logit gap below this


def figures(runs: list[dict], batch: int, n: int) -> dict:
    """Per-system figures over the measured rounds (warm-up excluded)."""
    ttft, tps, gaps = [], [], []
    for r in runs:
        if r.get("times") is not None:
            t = np.asarray(r["times"])
            ttft.append(t[0])
            gaps += np.diff(t).tolist()
            tps.append(batch * (n - 1) / (t[-1] - t[0]))
        else:  # end-to-end timings only (onnx-genai): decode = n-token minus 1-token request, both prefix-cached
            ttft.append(r["ttft"])
            tps.append(batch * (n - 1) / (r["total"] - r["ttft_cached"]))
    out = {"ttft_ms": 1e3 * float(np.median(ttft)), "tps": float(np.median(tps)), "tps_best": float(max(tps)),
           "rounds": len(runs)}
    if gaps:
        out["itl_p50_ms"] = 1e3 * float(np.percentile(gaps, 50))
        out["itl_p99_ms"] = 1e3 * float(np.percentile(gaps, 99))
    return out


def check_tokens(reference: dict, run: dict) -> list[str]:
    """Compare every row of `run` with the raw batch-1 loop of the same round; '' means equal."""
    ref = reference["tokens"][0]
    margins = reference.get("margins") or []
    notes = []
    for row in run["tokens"]:
        if row == ref:
            notes.append("")
            continue
        k = next((i for i, (a, b) in enumerate(zip(row, ref)) if a != b), min(len(row), len(ref)))
        if k < len(row) and k < len(ref):
            gap = margins[k] if k < len(margins) else float("nan")
            kind = "near-tie" if gap < NEAR_TIE else "MISMATCH"
            notes.append(f"{kind} at token {k} (top-2 gap {gap:.2e})")
        else:
            notes.append(f"MISMATCH: {len(row)} tokens, expected {len(ref)}")
    return notes


def _x(value: float | None, base: float | None) -> str:
    return "" if value is None or not base else f" ({value / base:.2f}x)"


def table(rows: list[dict]) -> str:
    """rows: name, batch, figures (or None + error), base (raw figures of that batch), tokens note."""
    head = ("| system | batch | TTFT ms | ITL p50 ms | ITL p99 ms | decode tok/s | best round tok/s | tokens vs raw |\n"
            "|---|---:|---:|---:|---:|---:|---:|---|\n")
    lines = []
    for row in rows:
        f, base = row.get("figures"), row.get("base") or {}
        if f is None:
            lines.append(f"| {row['name']} | {row['batch']} | FAILED: {row['error']} | | | | | |")
            continue

        def cell(key, fmt):
            value = f.get(key)
            return "n/a" if value is None else f"{value:{fmt}}{_x(value, base.get(key))}"

        lines.append(
            f"| {row['name']} | {row['batch']} | {cell('ttft_ms', '.0f')} | {cell('itl_p50_ms', '.1f')} | "
            f"{cell('itl_p99_ms', '.1f')} | {cell('tps', '.1f')} | {cell('tps_best', '.1f')} | {row['tokens']} |"
        )
    return head + "\n".join(lines) + "\n"


def client_table(summaries: list[dict]) -> str:
    head = ("| client, backend | sent | TTFT ms avg / p50 / p99 | ITL ms avg / p50 / p99 | output tokens | "
            "TTFT p50, ITL p50 x raw |\n|---|---|---:|---:|---:|---:|\n")
    lines = []
    for s in summaries:
        if "error" in s:
            first = s["error"].strip().splitlines()[-1] if s["error"].strip() else "no output"
            lines.append(f"| genai-perf {s['name']} | {_sent(s)} | **FAILED**: {first[:160]} | | | |")
            continue
        t, i = s["time_to_first_token"], s["inter_token_latency"]
        raw = s.get("raw")
        ratio = f"{t['p50'] / raw['ttft_ms']:.2f}x, {i['p50'] / raw['itl_p50_ms']:.2f}x" if raw else "n/a"
        lines.append(f"| genai-perf {s['name']} | {_sent(s)} | {t['avg']:.0f} / {t['p50']:.0f} / {t['p99']:.0f} | "
                     f"{i['avg']:.1f} / {i['p50']:.1f} / {i['p99']:.1f} | "
                     f"{s['output_sequence_length']['avg']:.0f} | {ratio} |")
    return head + "\n".join(lines) + "\n"


def _sent(summary: dict) -> str:
    sent = summary.get("sent")
    if not sent:
        return ""
    if "payload" in sent:  # HTTP: the JSON body
        sent = sent["payload"][0] if sent["payload"] else {}
    return ", ".join(f"`{k}`" for k in sent if k not in ("model",))


def save_figure(fig, path: Path) -> Path:
    """Lay out, write and release a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plots(out: Path, rows: list[dict], timelines: dict[str, list[float]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    ok = [r for r in rows if r.get("figures") and r.get("base")]
    if ok:
        labels = [f"{r['short']}\nb{r['batch']}" for r in ok]
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=80)
        width = 0.27
        xs = np.arange(len(ok))
        for k, (key, label) in enumerate((("ttft_ms", "TTFT"), ("itl_p50_ms", "ITL p50"), ("itl_p99_ms", "ITL p99"))):
            vals = [r["figures"][key] / r["base"][key] if r["figures"].get(key) else 0 for r in ok]
            left.bar(xs + (k - 1) * width, vals, width, label=label)
        left.axhline(1.0, color="black", lw=0.8)
        left.set_xticks(xs, labels, fontsize=8)
        left.set_title("latency / raw loop's (lower is better)")
        left.legend(fontsize=8)
        vals = [r["figures"]["tps"] / r["base"]["tps"] for r in ok]
        right.bar(xs, vals, 0.6, color="tab:green")
        for x, v, r in zip(xs, vals, ok):
            right.text(x, v, f"{r['figures']['tps']:.0f}/s", ha="center", va="bottom", fontsize=8)
        right.axhline(1.0, color="black", lw=0.8)
        right.set_xticks(xs, labels, fontsize=8)
        right.set_title("decode tokens/s / raw loop's (higher is better)")
        written.append(save_figure(fig, out / "ratios.png"))
    if timelines:
        groups = [[k for k in timelines if not k.endswith("b16")], [k for k in timelines if k.endswith("b16")]]
        groups = [g for g in groups if g]
        fig, axes = plt.subplots(len(groups), 1, figsize=(11, 2.6 + 1.6 * len(groups)), dpi=80, squeeze=False)
        for ax, names in zip(axes[:, 0], groups):
            for name in names:
                series = timelines[name]
                ax.plot(np.arange(1, len(series) + 1), 1e3 * np.asarray(series), lw=1, label=name)
            ax.set_ylabel("ms since previous token")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8, ncol=3)
        axes[0, 0].set_title("inter-token latency along the generation (median over rounds)")
        axes[-1, 0].set_xlabel("generated token")
        written.append(save_figure(fig, out / "itl_timeline.png"))
    return written


def timeline(runs: list[dict]) -> list[float] | None:
    series = [np.diff(r["times"]) for r in runs if r.get("times") is not None]
    if not series:
        return None
    length = min(len(s) for s in series)
    return np.median(np.stack([s[:length] for s in series]), axis=0).tolist()
