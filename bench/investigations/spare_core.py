"""What Triton's per-token response path costs the 16-stream decode rate when the model has every CPU, and
when one CPU is left to it: the raw GQA b16 loop, the engine in-process and the generator through Triton,
each run with the model on all CPUs and then on all but one, side by side in one run.

Every streamed token is a response: an IPC round trip from the python-backend stub to tritonserver, then
gRPC to the client. On a machine where onnxruntime's threads hold every CPU, each of those wake-ups stops
one of them in the middle of an operator and the other waits for it. With a CPU left over they run there.

    .venv/bin/python -m bench.investigations.spare_core [--passes 6]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

from bench.concurrency import figures
from bench.prompts import long_prompts
from bench.variant_repository import variant_repository
from bench.worker import Worker
from tritongen.runtime.tokenizer import TextTokenizer
from tritongen.serve import TritonServer

ROOT = Path(__file__).resolve().parents[2]
STREAMS, LENGTH, NEW_TOKENS = 16, 448, 96  # make bench's 16-stream level


def measure(threads: int, cpus: list[int], passes: int, tokenizer, workdir: Path) -> dict[str, list[float]]:
    """Decode tokens/s per pass of each system, the model on `threads` CPUs, in alternating order."""
    repo = variant_repository(workdir / f"threads-{threads}", {"intra_op_threads": str(threads)})
    os.sched_setaffinity(0, cpus[:threads])  # the raw loop sizes and pins its threads to what it may use
    raw = Worker("raw", "raw-gqa", model_path=str(ROOT / "model_repository" / "target_gqa" / "1" / "model.onnx"))
    ready = raw.wait_ready()
    os.sched_setaffinity(0, cpus)
    with TritonServer(repo, ["generator"], http_port=0, grpc_port=0, metrics_port=0) as server:
        workers = {"raw": raw, "engine": Worker("engine", "engine", model_repository=str(repo)),
                   "triton": Worker("triton", "triton", grpc_url=server.url_grpc)}
        if not ready or not all(w.wait_ready() for k, w in workers.items() if k != "raw"):
            raise RuntimeError("; ".join(f"{k}: {w.error}" for k, w in workers.items() if w.error))
        try:
            def run(name: str, items, n: int) -> dict:
                if name == "raw":  # one prompt, prefilled once, copied into every row
                    return workers[name].call("run_tiled", items[0][0], items[0][1], n, STREAMS)
                return workers[name].call("run_streams", items, n)

            names = list(workers)
            for i, name in enumerate(names):  # warm-up at batch 16
                run(name, long_prompts(tokenizer, STREAMS, 32, skip=300 + STREAMS * i), 4)
            rates: dict[str, list[float]] = {name: [] for name in names}
            for p in range(passes):
                for name in (names if p % 2 == 0 else names[::-1]):
                    skip = 100 + STREAMS * (len(names) * p + names.index(name))  # fresh prompts: no prefix hits
                    rec = run(name, long_prompts(tokenizer, STREAMS, LENGTH, skip=skip), NEW_TOKENS)
                    rates[name].append(figures(rec, NEW_TOKENS, LENGTH)["tps"])  # make bench's steady window
                print(f"  model on {threads} CPU(s), pass {p}: " +
                      ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()), flush=True)
            return rates
        finally:
            for w in workers.values():
                w.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=6)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs at least 2 CPUs")
    tokenizer = TextTokenizer(ROOT / "model_repository" / "target")
    with tempfile.TemporaryDirectory() as tmp:
        results = {threads: measure(threads, cpus, args.passes, tokenizer, Path(tmp))
                   for threads in (len(cpus), len(cpus) - 1)}
    print(f"\n{STREAMS} streams, prompts of {LENGTH} tokens, {NEW_TOKENS} new tokens, steady decode tokens/s "
          f"(mean of {args.passes} passes) and ratio to the raw GQA b16 loop of the same run:")
    for threads, rates in results.items():
        raw = np.mean(rates["raw"])
        triton_slower = sum(t < e for t, e in zip(rates["triton"], rates["engine"]))
        print(f"model on {threads} of {len(cpus)} CPUs: raw {raw:.1f}, engine in-process "
              f"{np.mean(rates['engine']) / raw:.3f}x, Triton {np.mean(rates['triton']) / raw:.3f}x "
              f"(Triton / in-process {np.mean(rates['triton']) / np.mean(rates['engine']):.3f}, "
              f"slower in {triton_slower} of {args.passes} passes)")


if __name__ == "__main__":
    main()
