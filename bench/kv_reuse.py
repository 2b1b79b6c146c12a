"""Prefix reuse and preemption cost on SmolLM2, measured side by side in one run.

1. Time to first token of a ~1,000-token prompt cold, then of a second
   request sharing that prefix (its KV pages are copied back, not recomputed).
2. What bringing a preempted sequence back costs: copying its KV pages from
   the page store into a slot ("swap in") versus recomputing them (prefill).

    .venv/bin/python -m bench.kv_reuse
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest

ROOT = Path(__file__).resolve().parents[1]
WORDS = "the quick brown fox jumps over a lazy dog while seven wise owls watch from old oak trees".split()


def prefix_ttft(engine: Engine, n_words: int, repeats: int = 3) -> tuple[float, float, int, int]:
    cold, warm, hits = [], [], 0
    for r in range(repeats):
        shared = " ".join(WORDS[(k * 7 + r) % len(WORDS)] + str(k % 10) for k in range(n_words))
        options = GenerateOptions(max_new_tokens=1, stop_on_eos=False)
        a = engine.generate(GenerateRequest(shared + " Question one:", options))
        b = engine.generate(GenerateRequest(shared + " Question two:", options))
        cold.append(a.timing.first_token)
        warm.append(b.timing.first_token)
        hits = b.prefix_cache_hit_len
        prompt_len = b.num_prompt_tokens
    return statistics.median(cold), statistics.median(warm), hits, prompt_len


def swap_vs_recompute(engine: Engine, length: int, repeats: int = 5) -> tuple[float, float]:
    dec = engine.decoder
    ids = np.random.default_rng(0).integers(100, 40000, length)[None]
    page_data = [engine.pool.read(i, engine.pool.page_size) for i in range(-(-length // engine.pool.page_size))]
    swap, recompute = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        for i, page in enumerate(page_data):
            start = i * engine.pool.page_size
            dec.write(0, start, page[:, :, :, : min(engine.pool.page_size, length - start)])
        swap.append(time.perf_counter() - t)
        t = time.perf_counter()
        for start in range(0, length, 256):
            dec.prefill(0, ids[:, start:start + 256], start)
        recompute.append(time.perf_counter() - t)
    return statistics.median(swap), statistics.median(recompute)


def main() -> int:
    engine = Engine(ROOT / "model_repository" / "target_gqa", EngineConfig(max_model_len=2048))
    try:
        engine.generate(GenerateRequest("warm up", GenerateOptions(max_new_tokens=2)))
        cold, warm, hits, prompt_len = prefix_ttft(engine, 500)
        print("| measure | value |\n|---|---|")
        print(f"| prompt tokens / reused from the prefix cache | {prompt_len} / {hits} |")
        print(f"| time to first token, cold vs shared prefix | {cold * 1000:.0f} ms vs {warm * 1000:.0f} ms: "
              f"**{cold / warm:.1f}x** lower |")
        for length in (256, 1024):
            swap, recompute = swap_vs_recompute(engine, length)
            print(f"| bring back {length} tokens of KV: copy pages vs recompute | {swap * 1000:.1f} ms vs "
                  f"{recompute * 1000:.0f} ms: copy is **{recompute / swap:.0f}x** cheaper |")
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
