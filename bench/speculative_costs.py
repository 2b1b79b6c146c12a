"""What speculation costs, in units of one plain decode step of the same target, measured side by side.

A speculative step pays K head steps and one verification of K+1 tokens for the accepted tokens plus one,
so those two costs decide how many accepted tokens make it pay. Each is timed through the calls the engine
makes (the slot decoder's decode and prefill, the EAGLE-3 proposer, the sampler), in alternating passes,
on a prompt of about 200 tokens.

    .venv/bin/python -m bench.speculative_costs [--k 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import types
from pathlib import Path

import numpy as np

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions
from tritongen.engine.sampling import RequestSampler
from tritongen.speculative.head_config import load_head

from .alternating import alternate

ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT / "model_repository"
PROMPT = ("Explain, step by step and with an example, how a hash table stores and finds its keys, what happens "
          "when two keys collide, and why the table grows when it fills up. ") * 5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=4, help="draft tokens per proposal")
    ap.add_argument("--passes", type=int, default=15)
    args = ap.parse_args(argv)
    k = args.k
    engine = Engine(REPO / "target_gqa", EngineConfig(intra_op_threads=2, eagle3=load_head(REPO / "eagle3_head", k)))
    try:
        decoder, vocab = engine.decoder, engine.vocab_size
        proposer = engine.speculation.proposers["eagle3"]
        ids = engine.tokenizer.encode(PROMPT)
        n = len(ids)
        _, extras = decoder.prefill(0, np.array([ids], np.int64), 0, proposer.hidden_outputs)
        seq = types.SimpleNamespace(tokens=list(ids), hidden={name: extras[name][0, -1].copy() for name in extras},
                                    sampler=RequestSampler(GenerateOptions(), ids, vocab))
        drafts = np.array([[ids[-1], *ids[1:k + 1]]], np.int64)

        def plain_step():
            logits, _ = decoder.decode(np.array([[ids[-1]]], np.int64), np.array([n], np.int32))
            int(np.argmax(logits[0, 0]))

        def head_steps():
            proposer.propose(seq, k)

        def verify():
            logits, _ = decoder.prefill(0, drafts, n, proposer.hidden_outputs, all_logits=True)
            rows = logits[0].copy()
            for row in rows:
                seq.sampler.choose(row)

        seconds = alternate({"plain": plain_step, "head": head_steps, "verify": verify}, args.passes, calls=5)
    finally:
        engine.close()
    plain = statistics.median(seconds["plain"])
    head = statistics.median(seconds["head"]) / k / plain
    check = statistics.median(seconds["verify"]) / plain
    print(f"units of one plain decode step (batch 1, {n}-token context, {args.passes} alternating passes):")
    print(f"| cost | measured | target |\n|---|---:|---:|\n| one EAGLE-3 head step | {head:.3f} | 0.1 |")
    print(f"| one verification of K+1 = {k + 1} tokens | {check:.2f} | 1.5 |")
    paying = head * k + check
    print(f"a speculative step costs {paying:.2f} plain steps: it pays when more than {paying - 1:.2f} of the "
          f"{k} drafts are accepted on average")
    return 0


if __name__ == "__main__":
    sys.exit(main())
