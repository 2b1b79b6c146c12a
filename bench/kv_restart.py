"""Time to first token after a Triton restart, with a ~1,000-token prefix stored on the disk tier.

One run: start Triton with the LocalTiered connector (disk tier in a temp
folder), send prompt A, stop; start again, send A (its chunks come back
from disk) and a fresh prompt B of the same length (cold, the reference).

    .venv/bin/python -m bench.kv_restart
"""

from __future__ import annotations

import queue
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from bench.variant_repository import variant_repository
from tritongen.serve import TritonServer

WORDS = "river stone market bridge lantern harbor orchard meadow tower garden".split()


def prompt(seed: int) -> str:
    return " ".join(f"{WORDS[(seed + 3 * k) % len(WORDS)]}{(seed * 7 + k) % 100}" for k in range(330)) + "\nSummary:"


def ttft(server: TritonServer, text: str) -> float:
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    inputs = []
    for name, value in (
        ("text_input", np.array([text.encode()], dtype=object)),
        ("max_tokens", np.array([4], np.int32)),
        ("stream", np.array([True])),
    ):
        t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        t.set_data_from_numpy(value)
        inputs.append(t)
    start = time.perf_counter()
    client.async_stream_infer("generator", inputs)
    first = None
    while True:
        result, error = events.get(timeout=300)
        if error is not None:
            raise RuntimeError(error)
        first = first or time.perf_counter()
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    client.close()
    return first - start


def stored_chunks(server: TritonServer) -> float:
    with urllib.request.urlopen(server.url_metrics, timeout=10) as r:
        lines = r.read().decode().splitlines()
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines
               if ln.startswith("tritongen:kv_connector_events_total") and 'event="stored_chunks"' in ln)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        repo = variant_repository(Path(tmp) / "repo", {"kv_connector": "local_tiered",
                                                        "kv_connector_disk_path": "../kv_disk"})
        with TritonServer(repo, ["generator"], http_port=0, grpc_port=0, metrics_port=0) as server:
            cold_a = ttft(server, prompt(1))
            deadline = time.time() + 60
            while stored_chunks(server) < 3 and time.time() < deadline:
                time.sleep(0.5)
            time.sleep(2)  # the store thread writes the chunks to disk after it queues them
        files = len(list((Path(tmp) / "kv_disk").glob("*.kv")))
        with TritonServer(repo, ["generator"], http_port=0, grpc_port=0, metrics_port=0) as server:
            cold_b = ttft(server, prompt(2))
            warm_a = ttft(server, prompt(1))
    print(f"| measure | value |\n|---|---|\n| chunks on disk after the first run | {files} |")
    print(f"| TTFT before restart, prompt A (cold) | {cold_a * 1000:.0f} ms |")
    print(f"| TTFT after restart, prompt B (cold, same length) | {cold_b * 1000:.0f} ms |")
    print(f"| TTFT after restart, prompt A (chunks from disk) | {warm_a * 1000:.0f} ms |")
    print(f"| cold / from disk, after restart | **{cold_b / warm_a:.1f}x** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
