"""pin_threads on and off, side by side: two servers on the same models that differ only in that
parameter, N streams (16 by default) of 448-token prompts and 96 new tokens each, passes alternating
between them (A B, B A, ...), each pass on fresh prompts; the steady decode rate as `make bench` computes it.

    .venv/bin/python -m bench.pin_threads [--passes 6] [--streams 16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench.concurrency import figures
from bench.prompts import long_prompts
from bench.systems import TritonGrpc
from bench.variant_repository import ROOT, variant_repository
from tritongen.runtime.tokenizer import TextTokenizer
from tritongen.serve import TritonServer

LENGTH, NEW_TOKENS = 448, 96


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--streams", type=int, default=16)
    args = ap.parse_args()
    streams = args.streams
    tokenizer = TextTokenizer(ROOT / "model_repository" / "target")
    warm = long_prompts(tokenizer, streams, 32, skip=streams * (args.passes + 1))
    rates: dict[str, list[float]] = {"true": [], "false": []}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {pin: TritonServer(variant_repository(Path(tmp) / pin, {"pin_threads": pin}), ["generator"],
                                     http_port=0, grpc_port=0, metrics_port=0).start(300) for pin in rates}
        try:
            clients = {pin: TritonGrpc(server.url_grpc) for pin, server in servers.items()}
            for p in range(args.passes):
                items = long_prompts(tokenizer, streams, LENGTH, skip=streams * p)
                for pin in (("true", "false") if p % 2 == 0 else ("false", "true")):
                    clients[pin].run_streams(warm, 4)
                    rec = clients[pin].run_streams(items, NEW_TOKENS)
                    rates[pin].append(figures(rec, NEW_TOKENS, LENGTH)["tps"])
                print(f"pass {p + 1}: pinned {rates['true'][-1]:.1f} tok/s, unpinned {rates['false'][-1]:.1f} tok/s, "
                      f"pinned / unpinned {rates['true'][-1] / rates['false'][-1]:.3f}", flush=True)
            for client in clients.values():
                client.close()
        finally:
            for server in servers.values():
                server.stop()
    on, off = np.mean(rates["true"]), np.mean(rates["false"])
    print(f"| pin_threads | mean tok/s over {args.passes} passes | per pass |\n|---|---:|---|")
    for pin, mean in (("true", on), ("false", off)):
        print(f"| {pin} | {mean:.1f} | {' / '.join(f'{r:.0f}' for r in rates[pin])} |")
    print(f"pinned / unpinned: **{on / off:.3f}x** (passes faster pinned: "
          f"{sum(a > b for a, b in zip(rates['true'], rates['false']))} of {args.passes})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
