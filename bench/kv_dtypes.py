"""KV page dtypes on SmolLM2: bytes per token, logit drift and greedy agreement against f32, one run.

Teacher-forced: a prefix's KV goes through each codec (as a page read back
from the store would), then a continuation is run on top of it in one call;
its logits at every position are compared with the all-f32 run.

    .venv/bin/python -m bench.kv_dtypes
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from tritongen.kv.codec import KV_DTYPES, codec
from tritongen.runtime.gqa_decoder import GqaDecoder
from tritongen.runtime.repository import onnx_path
from tritongen.runtime.tokenizer import TextTokenizer

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [
    "The history of astronomy begins with ancient observers who tracked the motion of the sun, the moon and "
    "the planets. Babylonian scribes recorded eclipses, Greek philosophers proposed spheres, and later "
    "Copernicus placed the sun at the centre. Kepler found elliptical orbits and Newton explained them "
    "with gravity, which tied the heavens to the falling apple.",
    "def merge_sort(items):\n    if len(items) <= 1:\n        return items\n    middle = len(items) // 2\n"
    "    left = merge_sort(items[:middle])\n    right = merge_sort(items[middle:])\n    result = []\n"
    "    while left and right:\n        result.append(left.pop(0) if left[0] <= right[0] else right.pop(0))\n"
    "    return result + left + right\n",
    "To bake bread, mix flour, water, salt and yeast, knead the dough until smooth, and let it rise for an "
    "hour. Shape the loaf, let it rise again, then bake it in a hot oven until the crust is golden and the "
    "bottom sounds hollow when tapped. Let it cool before slicing.",
    "Dear team, thank you for the hard work this quarter. Sales grew in every region, the new product "
    "launched on time, and customer satisfaction reached its highest level yet. Next quarter we will focus "
    "on reliability, documentation and hiring two more engineers for the platform group.",
]


def main() -> int:
    folder = ROOT / "model_repository" / "target_gqa"
    tok = TextTokenizer(folder)
    dec = GqaDecoder(onnx_path(folder), max_slots=1, max_len=1024)
    rows = {name: {"drift": [], "agree": 0, "n": 0} for name in KV_DTYPES}
    for text in TEXTS:
        ids = tok.encode(text)
        split = len(ids) // 2
        prefix, rest = np.array([ids[:split]]), np.array([ids[split:]])
        dec.prefill(0, prefix, 0)
        kv = dec.read(0, 0, split)
        reference, _ = dec.prefill(0, rest, split, all_logits=True)
        reference = reference[0].copy()
        for name in KV_DTYPES:
            c = codec(name)
            data, scales = c.encode(kv)
            dec.write(0, 0, c.decode(data, scales))
            logits, _ = dec.prefill(0, rest, split, all_logits=True)
            logits = logits[0]
            r = rows[name]
            r["drift"].append(float(np.abs(logits - reference).max()))
            r["agree"] += int((logits.argmax(-1) == reference.argmax(-1)).sum())
            r["n"] += len(ids) - split
    f32_bytes = 2 * dec.shape.num_layers * dec.shape.num_kv_heads * dec.shape.head_dim * 4
    print("| kv_cache_dtype | bytes / token | vs f32 | max logit drift | teacher-forced top-1 agreement |")
    print("|---|---|---|---|---|")
    for name in KV_DTYPES:
        c, r = codec(name), rows[name]
        per_token = (
            2
            * dec.shape.num_layers
            * dec.shape.num_kv_heads
            * dec.shape.head_dim
            * c.bytes_per_value(dec.shape.head_dim)
        )
        print(f"| {name} | {per_token:.0f} | {per_token / f32_bytes:.3f} | {max(r['drift']):.3f} "
              f"| {r['agree'] / r['n']:.1%} ({r['agree']}/{r['n']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
