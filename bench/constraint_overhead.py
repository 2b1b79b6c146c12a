"""Constrained-decoding overhead on SmolLM2: decode step time with and without a mask, side by side.

Each configuration (batch 1 and 8, greedy and sampled at temperature 0.8)
runs the same requests unconstrained and constrained by a JSON Schema that
needs far more than --tokens tokens, so every row decodes exactly that
many tokens and the batch stays full. The step time is read from the
engine's own token timestamps (GenerateResult.timing.inter_token) over the
decode phase, skipping the first SKIP intervals, where batch mates'
prompt chunks share the step.

The machine may be shared, so the two variants run as pairs, back to back
(alternating which goes first), for --rounds rounds: each pair gives a
ratio of median step times, and the table reports the median over pairs.
Beside wall-clock step time it reports the process's CPU time per decode
step (every thread: onnxruntime, the mask thread, Python), which load from
other processes barely moves.

    .venv/bin/python -m bench.constraint_overhead [--rounds 12] [--tokens 24]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import time
from pathlib import Path

from tritongen.engine.engine import Engine
from tritongen.engine.options import GenerateConstraint, GenerateOptions, GenerateRequest

ROOT = Path(__file__).resolve().parents[1]
SKIP = 4
PROMPT = [{"role": "user", "content": "List twelve employees of a small company as JSON records with an id, "
                                      "a name, a role and up to two skills."}]
# Twelve records are required: far longer than the measured window, so no constrained row ends early.
SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["records"],
    "properties": {"records": {"type": "array", "minItems": 12, "maxItems": 12, "items": {
        "type": "object", "additionalProperties": False, "required": ["id", "name", "role", "skills"],
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 9999},
            "name": {"type": "string", "maxLength": 24},
            "role": {"type": "string", "enum": ["engineer", "designer", "manager", "sales", "support"]},
            "skills": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 16}},
        }}}},
}


def run_batch(engine: Engine, prompt: str, batch: int, sampled: bool, constrained: bool, tokens: int) -> dict:
    """Run `batch` requests together; return their decode-step intervals and the engine's mask time."""
    done: queue.Queue = queue.Queue()
    mask0, steps0, cpu0 = engine.masks.seconds, engine.stats.decode_steps, time.process_time()
    for i in range(batch):
        options = GenerateOptions(
            max_new_tokens=tokens, stop_on_eos=False, greedy=not sampled, temperature=0.8 if sampled else 1.0,
            seed=1000 + i if sampled else None,
            constraint=GenerateConstraint("json_schema", json.dumps(SCHEMA)) if constrained else None)
        engine.submit(GenerateRequest(prompt, options), on_done=lambda r, e: done.put((r, e)))
    steps = []
    for _ in range(batch):
        result, error = done.get(timeout=600)
        if error is not None:
            raise error
        if len(result.token_ids) != tokens or str(result.finish_reason) != "max_tokens":
            raise RuntimeError(f"a row ended early ({result.finish_reason}, {len(result.token_ids)} tokens): "
                               "the measurement needs a full batch throughout")
        steps += result.timing.inter_token[SKIP:]
    decode_steps = engine.stats.decode_steps - steps0
    return {"steps": steps, "step_ms": statistics.median(steps) * 1e3,
            "cpu_ms": (time.process_time() - cpu0) / decode_steps * 1e3,
            "mask_ms": (engine.masks.seconds - mask0) / decode_steps * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=24, help="tokens per request (all of them decoded)")
    args = parser.parse_args()

    engine = Engine(ROOT / "model_repository" / "target_gqa")
    prompt = engine.tokenizer.render_chat(PROMPT)
    engine.constraint_compiler()  # the tokenizer bridge is built once, outside the measurement
    run_batch(engine, prompt, 2, True, True, 8)  # warm-up: sessions, allocations, caches

    configs = [(batch, sampled) for batch in (1, 8) for sampled in (False, True)]
    pairs: dict = {config: [] for config in configs}
    t0 = time.time()
    for r in range(args.rounds):
        for config in configs:
            got = {}
            # Alternate which variant goes first, so a drift in machine load favours neither.
            for constrained in ((False, True) if r % 2 == 0 else (True, False)):
                got[constrained] = run_batch(engine, prompt, *config, constrained, args.tokens)
            pairs[config].append((got[False], got[True]))
    elapsed = time.time() - t0
    engine.close()

    print(f"SmolLM2-135M (target_gqa), {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} "
          f"(other processes share the machine); {args.rounds} pairs per row, {args.tokens} tokens per request, "
          f"first {SKIP} intervals skipped; {elapsed:.0f}s")
    print("constraint: JSON Schema, 12 required records of {id, name, role enum, skills[<=2]}")
    print()
    print("Step time: median per run, then the median over pairs of the constrained/unconstrained ratio;")
    print("p10: the 10th percentile of every measured step of a variant (the least disturbed steps).")
    print("CPU: the process's CPU time (all threads) per decode step; mask: llguidance's time per step,")
    print("computed on a helper thread while the model runs.")
    print()
    print("| batch | sampling | unconstrained ms/step | constrained ms/step | extra per step (median of pairs) "
          "| pairs' range | p10 unconstrained / constrained ms | extra at p10 | CPU ms/step unconstrained "
          "/ constrained | CPU extra | mask ms/step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = float("-inf")
    for batch, sampled in configs:
        ps = pairs[(batch, sampled)]
        med = lambda key, i: statistics.median(p[i][key] for p in ps)  # noqa: E731
        p10 = [statistics.quantiles([x for p in ps for x in p[i]["steps"]], n=10)[0] * 1e3 for i in (0, 1)]
        ratios = sorted(p[1]["step_ms"] / p[0]["step_ms"] - 1 for p in ps)
        extra = statistics.median(ratios)
        cpu_extra = med("cpu_ms", 1) / med("cpu_ms", 0) - 1
        worst = max(worst, extra)
        print(f"| {batch} | {'t=0.8' if sampled else 'greedy'} | {med('step_ms', 0):.1f} | {med('step_ms', 1):.1f} "
              f"| {extra:+.1%} | {ratios[0]:+.0%} .. {ratios[-1]:+.0%} | {p10[0]:.1f} / {p10[1]:.1f} "
              f"| {p10[1] / p10[0] - 1:+.1%} | {med('cpu_ms', 0):.1f} / {med('cpu_ms', 1):.1f} | {cpu_extra:+.1%} "
              f"| {med('mask_ms', 1):.2f} |")
    print()
    print(f"worst extra per step (median of pairs): {worst:+.1%} (target: under +20%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
