"""When speculation pays: decode throughput at 1, 2, 4, 8 and 16 concurrent greedy requests with speculation
forced on, forced off, and under the engine's batch-size policy, measured side by side in alternating passes.

Forced on: every step speculates whatever the batch (speculative_disable_by_batch_size 0). Policy: the
shipped setting, which decodes plainly above its batch size. The table prints each rate as a ratio to plain
decoding at the same batch in the same pass; the largest batch where forced-on still beats plain is where
the policy should switch speculation off.

    .venv/bin/python -m bench.speculative_batches [--mode eagle3] [--passes 3]
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import time
from pathlib import Path

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.speculative.head_config import load_head
from tritongen.speculative.modes import SpeculativeMode

from .speculative import TASKS

ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT / "model_repository"
BATCHES = (1, 2, 4, 8, 16)
QUESTIONS = ["Explain how a refrigerator keeps food cold.", "Write a short poem about the sea at night.",
             "What are three good habits for learning a new language?", "Describe the water cycle in simple words.",
             "Why do leaves change colour in autumn?", "Give advice to someone starting their first job.",
             "Explain what a database index is for.", "Tell a short story about a lost key."]
NEW_TOKENS = 64


def prompts(engine: Engine, mode: str, n: int) -> list[str]:
    """Chat prompts; prompt lookup gets the input-grounded tasks it is made for."""
    texts = TASKS if mode == "prompt_lookup" else QUESTIONS
    return [engine.tokenizer.render_chat([{"role": "user", "content": texts[i % len(texts)]}]) for i in range(n)]


def decode_rate(engine: Engine, texts: list[str], mode: SpeculativeMode) -> float:
    """Generated tokens per second of all requests together, submitted at once."""
    done: queue.Queue = queue.Queue()
    start = time.perf_counter()
    for text in texts:
        options = GenerateOptions(max_new_tokens=NEW_TOKENS, stop_on_eos=False, speculative_mode=mode)
        engine.submit(GenerateRequest(text, options), on_done=lambda r, e: done.put((r, e)))
    tokens = 0
    for _ in texts:
        result, error = done.get(timeout=900)
        if error is not None:
            raise error
        tokens += len(result.token_ids)
    return tokens / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="eagle3", choices=("eagle3", "prompt_lookup"))
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args(argv)
    heads = {"eagle3": load_head(REPO / "eagle3_head", 4)} if args.mode == "eagle3" else {}
    policy = EngineConfig.speculative_disable_by_batch_size
    engines = {"forced on": Engine(REPO / "target_gqa", EngineConfig(speculative_disable_by_batch_size=0, **heads)),
               f"policy ({policy})": Engine(REPO / "target_gqa", EngineConfig(**heads))}
    spec = SpeculativeMode(args.mode, ngram=3, max_tokens=8) if args.mode == "prompt_lookup" else \
        SpeculativeMode(args.mode)
    try:
        first = next(iter(engines.values()))
        ratios: dict[tuple[str, int], list[float]] = {}
        for p in range(args.passes):
            for batch in BATCHES:
                texts = prompts(first, args.mode, batch)
                plain = decode_rate(first, texts, SpeculativeMode("none"))
                for name, engine in (engines.items() if p % 2 else reversed(engines.items())):
                    ratios.setdefault((name, batch), []).append(decode_rate(engine, texts, spec) / plain)
                print(f"pass {p + 1}/{args.passes} batch {batch}: plain {plain:.1f} tok/s", file=sys.stderr)
    finally:
        for engine in engines.values():
            engine.close()
    print(f"{args.mode}, greedy, {NEW_TOKENS} new tokens per request; decode rate with speculation / plain "
          f"at the same batch (median of {args.passes} alternating passes):")
    print("| batch | " + " | ".join(engines) + " |\n|---:|" + "---:|" * len(engines))
    for batch in BATCHES:
        cells = [f"{statistics.median(ratios[(name, batch)]):.2f}x" for name in engines]
        print(f"| {batch} | " + " | ".join(cells) + " |")
    paying = [b for b in BATCHES if statistics.median(ratios[("forced on", b)]) > 1.0]
    print(f"forced-on speculation pays up to batch {max(paying) if paying else 0}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
