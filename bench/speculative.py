"""Speculative decoding on SmolLM2, every mode side by side in one run, against plain greedy.

Each mode generates the same requests; the script checks the tokens equal
plain greedy and prints acceptance rate, mean accepted length per
verification and decode tokens/s as a ratio to plain greedy measured in
the same run. All modes run an input-grounded task (spelling correction: the
answer mostly repeats the prompt), the case prompt lookup is made for.

    .venv/bin/python -m bench.speculative
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.speculative.head_config import load_head
from tritongen.speculative.modes import SpeculativeMode

ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT / "model_repository"
PASSAGES = [
    "The quick brown fox jumpd over the lazy dog. It was a sunny day and the birds were singing in the tres. "
    "Everyone in the vilage was happy, and the children played by the river untill the sun went down. "
    "In the evening the old baker sold warm bread to the neighbours, who thankd him with a smile.",
    "Our team meets every monday at nine in the morning. We review the work of the previus week, plan the "
    "next tasks and discus any problems. After the meeting, each person writes a short sumary and sends it "
    "to the manager, who colects them into one report for the whole departement.",
]
# Input-grounded: the answer mostly repeats the prompt, the case prompt lookup exists for.
TASKS = [f"Correct the spelling in this text and return the whole corrected text:\n\n{p}" for p in PASSAGES]
MODES = [SpeculativeMode("prompt_lookup", ngram=3, max_tokens=8), SpeculativeMode("draft_model"),
         SpeculativeMode("mtp"), SpeculativeMode("eagle3"), SpeculativeMode("shared_kv")]
NEW_TOKENS = 100


def decode_rate(result) -> float:
    """Tokens per second after the first token (the prompt's prefill is the same for every mode)."""
    t = result.timing
    span = t.end_to_end - t.first_token
    return (len(result.token_ids) - 1) / span if span > 0 else 0.0


def main() -> int:
    k = 8
    heads = {kind: load_head(REPO / f"{kind}_head", 4) for kind in ("mtp", "eagle3", "shared_kv")}
    engine = Engine(REPO / "target_gqa", EngineConfig(draft_model=REPO / "draft_gqa", **heads))
    try:
        prompts = [engine.tokenizer.render_chat([{"role": "user", "content": t}]) for t in TASKS]
        engine.generate(GenerateRequest(prompts[0], GenerateOptions(max_new_tokens=4)))  # warm-up
        plain_ids, plain_rate = [], []
        for p in prompts:
            r = engine.generate(GenerateRequest(p, GenerateOptions(max_new_tokens=NEW_TOKENS)))
            plain_ids.append(r.token_ids)
            plain_rate.append(decode_rate(r))
        base = statistics.mean(plain_rate)
        print("| mode | K | identical to greedy | acceptance rate | mean accepted / verify | decode tok/s vs greedy |")
        print("|---|---|---|---|---|---|")
        print("| greedy (no speculation) | - | - | - | - | 1.00x |")
        for mode in MODES:
            kk = k if mode.kind == "prompt_lookup" else 4
            drafted = accepted = verifies = 0
            rates, same = [], True
            for p, want in zip(prompts, plain_ids):
                before = engine.stats.verify_calls
                r = engine.generate(GenerateRequest(p, GenerateOptions(
                    max_new_tokens=NEW_TOKENS, speculative_mode=mode, num_speculative_tokens=kk)))
                verifies += engine.stats.verify_calls - before
                same &= r.token_ids == want
                drafted += r.total_draft_tokens
                accepted += r.total_accepted_draft_tokens
                rates.append(decode_rate(r))
            print(f"| {mode.kind} | {kk} | {'yes' if same else '**NO**'} | {accepted / max(drafted, 1):.0%} "
                  f"| {accepted / max(verifies, 1):.2f} | **{statistics.mean(rates) / base:.2f}x** |")
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
