"""What leaving the LM head out of a prompt chunk's other positions saves, side by side in one run.

The served GroupQueryAttention decoder takes `num_logits_to_keep`: the engine asks a prompt chunk for the
logits of its last position only (the token it samples), verification for every position. This times the
same chunk both ways on the same model file, alternating, and prints the ratio.

    .venv/bin/python -m bench.prefill_logits [--chunk 256] [--passes 20]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from bench.alternating import alternate, compare
from tritongen.runtime.gqa_decoder import GqaDecoder
from tritongen.runtime.repository import onnx_path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--chunk", type=int, default=256, help="prompt tokens per call (the generator's max_num_batched_tokens)"
    )
    ap.add_argument("--passes", type=int, default=20)
    args = ap.parse_args()
    decoder = GqaDecoder(onnx_path(ROOT / "model_repository" / "target_gqa"), max_slots=1, max_len=2 * args.chunk,
                          intra_op_threads=len(os.sched_getaffinity(0)))
    if not decoder.keeps_logits:
        raise SystemExit("target_gqa has no num_logits_to_keep input: rebuild it with `make models`")
    ids = np.random.default_rng(0).integers(3, decoder.shape.vocab_size, (1, args.chunk), dtype=np.int64)
    seconds = alternate({"every": lambda: decoder.prefill(0, ids, 0, all_logits=True),
                         "last": lambda: decoder.prefill(0, ids, 0, all_logits=False)}, args.passes)
    ratio, faster = compare(seconds, "last", "every")
    print(f"SmolLM2-135M (target_gqa), chunk of {args.chunk} tokens, {args.passes} alternating passes, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"logits of every position / of the last only: {ratio:.2f}x the time "
          f"(last only faster in {faster} of {args.passes} passes)")


if __name__ == "__main__":
    main()
