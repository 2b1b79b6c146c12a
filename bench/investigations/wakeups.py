"""What frequent short wake-ups of another process cost a decode step, side by side in one run.

Serving through Triton adds many small pieces of work beside the model: each streamed response wakes
the generator's send thread, tritonserver's threads and the client's. Together they use a few percent
of the CPUs (README.md here), but each wake-up lands on a CPU where one of onnxruntime's two threads is
computing, and the other then waits for it at the end of the operator. This runs a 16-row decode step
with a process beside it that wakes `--rate` times a second for `--busy-us` microseconds, stopped and
running in alternate passes (SIGSTOP / SIGCONT), and prints the ratio of the step times. The KV holds 16
real prompts of PAST tokens (real_kv.py).

    .venv/bin/python -m bench.investigations.wakeups [--rate 1000] [--busy-us 50] [--passes 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

import numpy as np

from bench.alternating import alternate, compare
from bench.investigations.real_kv import prefilled_decoder

ROWS, PAST = 16, 496
CALLS = 5  # decode steps per pass and state

WAKER = """
import time
busy, pause = {busy}, {pause}
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < busy:
        pass
    time.sleep(pause)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=1000, help="wake-ups per second (16 streams through Triton: "
                                                            "~250 responses/s, each waking several threads)")
    ap.add_argument("--busy-us", type=float, default=50, help="work per wake-up, microseconds")
    ap.add_argument("--passes", type=int, default=20)
    args = ap.parse_args()
    cpus = len(os.sched_getaffinity(0))  # before pinning narrows this thread's own mask
    decoder = prefilled_decoder(ROWS, PAST)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, decoder.shape.vocab_size, (ROWS, 1), dtype=np.int64)
    seqlens = np.full(ROWS, PAST, np.int32)
    busy = args.busy_us / 1e6
    waker = subprocess.Popen([sys.executable, "-c", WAKER.format(busy=busy, pause=max(0.0, 1 / args.rate - busy))])
    def step():
        decoder.decode(ids, seqlens)

    try:
        seconds = alternate(
            {"quiet": step, "woken": step},
            args.passes,
            CALLS,
            before=lambda name: waker.send_signal(signal.SIGCONT if name == "woken" else signal.SIGSTOP),
        )
    finally:
        waker.kill()
    ratio, slower = compare(seconds, "quiet", "woken")
    share = args.rate * busy / cpus
    print(f"SmolLM2-135M (target_gqa), {ROWS} rows at past {PAST}, {args.passes} alternating passes of {CALLS} steps, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"beside {args.rate:.0f} wake-ups/s of {args.busy_us:.0f} us ({share:.1%} of {cpus} CPUs, nominal) / alone: "
          f"{ratio:.3f}x the time per step (slower in {slower} of {args.passes} passes)")


if __name__ == "__main__":
    main()
