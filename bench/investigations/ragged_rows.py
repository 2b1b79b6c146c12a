"""What a staggered batch costs the GroupQueryAttention decoder beside an aligned one, side by side in one run.

In `make bench`'s 16-stream window the engine's rows are not at one position: the prompts were prefilled
one chunk per step, so the first stream is some 27 tokens ahead of the last. The raw loop prefills one
prompt and copies it into every row, so its rows are aligned. This times one decode step over 16 rows at
the same mean length both ways, on the same model file and buffers, alternating, and prints the ratio.
The KV holds 16 real prompts (the concurrency runs' kind), prefilled: with random values instead the
attention underflows to denormal numbers and the same rows time differently (see README.md here).

    .venv/bin/python -m bench.investigations.ragged_rows [--mean 496] [--span 27] [--passes 20]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from bench.alternating import alternate, compare
from bench.investigations.real_kv import prefilled_decoder

ROWS = 16
CALLS = 5  # decode steps per case and pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mean", type=int, default=496, help="mean past length (make bench's window: 449-544)")
    ap.add_argument("--span", type=int, default=27, help="positions between the first row and the last")
    ap.add_argument("--passes", type=int, default=20)
    args = ap.parse_args()
    decoder = prefilled_decoder(ROWS, args.mean + args.span)
    rng = np.random.default_rng(0)
    staggered = np.round(np.linspace(args.mean + args.span / 2, args.mean - args.span / 2, ROWS)).astype(np.int32)
    cases = {"aligned": np.full(ROWS, args.mean, np.int32), "staggered": staggered}
    ids = rng.integers(3, decoder.shape.vocab_size, (ROWS, 1), dtype=np.int64)
    seconds = alternate({name: lambda lengths=lengths: decoder.decode(ids, lengths) for name, lengths in cases.items()},
                        args.passes, CALLS)
    ratio, slower = compare(seconds, "aligned", "staggered")
    print(f"SmolLM2-135M (target_gqa), {ROWS} rows, mean past {args.mean}, {args.passes} alternating passes of "
          f"{CALLS} steps, load average {os.getloadavg()[0]:.1f}")
    print(f"rows {int(staggered.min())}-{int(staggered.max())} / all at {args.mean}: {ratio:.3f}x the time "
          f"per step (staggered slower in {slower} of {args.passes} passes)")


if __name__ == "__main__":
    main()
