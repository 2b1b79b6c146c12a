"""The built EAGLE-3 head in the engine, on held-out prompts, greedy: identical to plain greedy? how many
draft tokens accepted per verification? decode tokens/s against plain greedy measured in the same run.

    .venv/bin/python scripts/eagle3/check_engine.py --data build/eagle3 --prompts 8 --k 4
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.speculative.head_config import load_head
from tritongen.speculative.modes import SpeculativeMode

ROOT = Path(__file__).resolve().parents[2]
REPO = ROOT / "model_repository"


def decode_rate(result) -> float:
    """Tokens per second after the first token, as bench/speculative.py measures it."""
    t = result.timing
    span = t.end_to_end - t.first_token
    return (len(result.token_ids) - 1) / span if span > 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "build" / "eagle3")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--target", default="target_gqa", help="the target's repository folder (target_gqa_int4 too)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in (args.data / "heldout.jsonl").open()]
    rows = sorted(rows, key=lambda r: r["index"])[: args.prompts]
    engine = Engine(REPO / args.target, EngineConfig(eagle3=load_head(REPO / "eagle3_head", args.k)))
    mode = SpeculativeMode("eagle3")
    try:
        prompts = [engine.tokenizer.render_chat([{"role": "user", "content": r["text"]}]) for r in rows]
        engine.generate(GenerateRequest(prompts[0], GenerateOptions(max_new_tokens=4)))  # warm-up
        same, plain_rates, spec_rates, drafted, accepted, verifies = True, [], [], 0, 0, 0
        for p in prompts:
            plain = engine.generate(GenerateRequest(p, GenerateOptions(max_new_tokens=args.new_tokens)))
            before = engine.stats.verify_calls
            spec = engine.generate(GenerateRequest(p, GenerateOptions(
                max_new_tokens=args.new_tokens, speculative_mode=mode, num_speculative_tokens=args.k)))
            verifies += engine.stats.verify_calls - before
            same &= spec.token_ids == plain.token_ids
            drafted += spec.total_draft_tokens
            accepted += spec.total_accepted_draft_tokens
            plain_rates.append(decode_rate(plain))
            spec_rates.append(decode_rate(spec))
            print(f"{len(plain.token_ids)} tokens, identical {spec.token_ids == plain.token_ids}, "
                  f"{decode_rate(plain):.1f} -> {decode_rate(spec):.1f} tok/s", flush=True)
        print(f"{args.target}: identical to greedy: {'yes' if same else 'NO'}; "
              f"acceptance rate {accepted / max(drafted, 1):.1%}; "
              f"mean accepted / verify {accepted / max(verifies, 1):.2f} (K={args.k}); decode tok/s "
              f"{statistics.mean(plain_rates):.1f} -> {statistics.mean(spec_rates):.1f} "
              f"({statistics.mean(spec_rates) / statistics.mean(plain_rates):.2f}x)")
    finally:
        engine.close()


if __name__ == "__main__":
    main()
