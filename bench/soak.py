"""Soak: concurrent streaming gRPC clients against the real generator for a fixed time.

    .venv/bin/python -m bench.soak --duration 300 --clients 32      # what `make soak` runs

Starts tritonserver on the repository (loopback addresses only, free ports) unless --grpc-url
points at a running one, warms it up, then runs --clients client threads, each with one gRPC
stream sending requests one after another (varied prompts, 16-96 new tokens, greedy and seeded
sampling, some chat messages) until --duration seconds pass or --max-requests were sent. It
reports requests completed, errors (the target is 0), time to first response and inter-token
latency percentiles seen by the clients, greedy answers that differed between runs of the same
request, and memory at the start (after the warm-up) and the end: the python backend stub's and
tritonserver's resident memory, the /dev/shm regions they map, and the KV pages in use once idle.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from tritongen.serve import TritonServer, scrape_metrics

ROOT = Path(__file__).resolve().parents[1]

PROMPTS = [
    "Tell me a short story about a lighthouse keeper.",
    "List five uses of a paperclip.",
    "Explain how a bicycle stays upright.",
    "Write a haiku about autumn rain.",
    "What are the planets of the solar system?",
    "def quicksort(items):",
    "The recipe for pancakes is",
    "Summarise the water cycle in three sentences.",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Name three colors."}],
    [{"role": "user", "content": "Give me a tip for learning to cook."}],
]


def tensor(name: str, value) -> grpcclient.InferInput:
    value = np.asarray(value)
    t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t


def make_request(rng: random.Random) -> tuple[str, list, bool]:
    """(key identifying a greedy request, inputs, greedy)."""
    max_tokens = rng.choice([16, 32, 48, 64, 96])
    greedy = rng.random() < 0.5
    if rng.random() < 0.25:
        chat = rng.choice(CHATS)
        prompt = tensor("messages", np.array([json.dumps(chat).encode()], dtype=object))
        key = f"chat:{chat[0]['content']}:{max_tokens}"
    else:
        text = rng.choice(PROMPTS)
        prompt = tensor("text_input", np.array([text.encode()], dtype=object))
        key = f"text:{text}:{max_tokens}"
    inputs = [prompt, tensor("max_tokens", np.array([max_tokens], np.int32)), tensor("stream", np.array([True]))]
    if not greedy:
        inputs += [tensor("temperature", np.array([0.8], np.float32)),
                   tensor("seed", np.array([rng.randrange(2**32)], np.uint64))]
    return key, inputs, greedy


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.completed = 0
        self.errors: list[str] = []
        self.ttft: list[float] = []
        self.itl: list[float] = []  # per token: gap between responses / tokens in the later one
        self.tokens = 0
        self.greedy_texts: dict[str, str] = {}
        self.greedy_mismatches: list[str] = []
        self.finish_reasons: dict[str, int] = {}


def client(url: str, index: int, deadline: float, budget: list, stats: Stats, timeout: float) -> None:
    rng = random.Random(index)
    events: queue.Queue = queue.Queue()
    connection = grpcclient.InferenceServerClient(url)
    connection.start_stream(callback=lambda result, error: events.put((time.monotonic(), result, error)))
    stuck = False
    try:
        while time.monotonic() < deadline:
            with stats.lock:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            key, inputs, greedy = make_request(rng)
            sent = time.monotonic()
            connection.async_stream_infer("generator", inputs)
            last, pieces, gaps, first, reason, error = sent, [], [], None, None, None
            while True:
                try:
                    at, result, err = events.get(timeout=timeout)
                except queue.Empty:
                    error = f"no response for {timeout:.0f}s"
                    break
                if err is not None:
                    error = str(err)
                    break
                n = int(result.as_numpy("num_output_tokens")[0])
                pieces.append(result.as_numpy("text_output")[0].decode())
                if first is None:
                    first = at - sent
                elif n:
                    gaps += [(at - last) / n] * n
                last = at
                with stats.lock:
                    stats.tokens += n
                if result.get_response().parameters["triton_final_response"].bool_param:
                    reason = result.as_numpy("finish_reason")[0].decode()
                    break
            with stats.lock:
                if error is not None:
                    stats.errors.append(error)
                    if error.startswith("no response"):
                        stuck = True
                        return  # this stream is stuck: stop the client rather than mix up responses
                    continue
                stats.completed += 1
                stats.ttft.append(first)
                stats.itl += gaps
                stats.finish_reasons[reason] = stats.finish_reasons.get(reason, 0) + 1
                if greedy:
                    text = "".join(pieces)
                    seen = stats.greedy_texts.setdefault(key, text)
                    if seen != text:
                        stats.greedy_mismatches.append(key)
    finally:
        connection.stop_stream(cancel_requests=stuck)
        connection.close()


# ---- server-side figures -----------------------------------------------------------------------------------


def stub_pid(server_pid: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"PPid:\t{server_pid}\n" in (entry / "status").read_text() and \
                        b"triton_python_backend_stub" in (entry / "cmdline").read_bytes():
                    return int(entry.name)
            except OSError:
                continue
    return None


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024


def shm_mib(pids: list[int]) -> float:
    files = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                files.add(parts[5].replace(" (deleted)", ""))
    return sum(os.path.getsize(f) for f in files if os.path.exists(f)) / 2**20


def idle_metrics(url: str, timeout: float = 120) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        m = scrape_metrics(url)
        if m.get("tritongen:num_requests_running", 1) == 0 and m.get("tritongen:num_requests_waiting", 1) == 0:
            return m
        if time.monotonic() > deadline:
            return m
        time.sleep(0.5)


def snapshot(server_pid: int | None, metrics_url: str | None) -> dict:
    stub = stub_pid(server_pid) if server_pid else None
    out = {"stub_rss_mib": rss_mib(stub), "server_rss_mib": rss_mib(server_pid) if server_pid else None,
           "shm_mib": shm_mib([p for p in (server_pid, stub) if p]) if server_pid else None}
    if metrics_url:
        m = idle_metrics(metrics_url)
        out.update(kv_pages_used=m.get("tritongen:kv_pages_used"), kv_pages_free=m.get("tritongen:kv_pages_free"))
    return out


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def run(args) -> dict:
    server = None
    if args.grpc_url:
        url, metrics_url, server_pid = args.grpc_url, args.metrics_url, args.server_pid
    else:
        log = Path(args.log or (ROOT / "bench" / "work" / "soak-server.log"))
        log.parent.mkdir(parents=True, exist_ok=True)
        server = TritonServer(args.repository, ["generator"], http_port=0, grpc_port=0, metrics_port=0, log_file=log)
        print(f"starting tritonserver on {args.repository} (log {log}) ...", flush=True)
        server.start(timeout=300)
        url, metrics_url, server_pid = server.url_grpc, server.url_metrics, server.process.pid
    try:
        # Warm-up: every client shape once, so allocator pools and Triton's buffers reach their size.
        warm = Stats()
        threads = [threading.Thread(target=client, args=(url, 1000 + i, time.monotonic() + 180, [3], warm, 120))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        start = snapshot(server_pid, metrics_url)
        print(f"warm-up: {warm.completed} requests, {len(warm.errors)} errors; start {start}", flush=True)

        stats, budget = Stats(), [args.max_requests]
        t0 = time.monotonic()
        deadline = t0 + args.duration
        threads = [threading.Thread(target=client, args=(url, i, deadline, budget, stats, args.timeout))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        trend = []
        next_report = t0 + 30
        while any(t.is_alive() for t in threads):
            threads[0].join(timeout=0.5) if threads[0].is_alive() else time.sleep(0.5)
            if time.monotonic() >= next_report and server_pid:
                next_report += 30
                trend.append((round(time.monotonic() - t0), round(rss_mib(stub_pid(server_pid)) or 0, 1),
                              stats.completed, len(stats.errors)))
                print(f"  t={trend[-1][0]:>4}s stub RSS {trend[-1][1]:.1f} MiB, completed {trend[-1][2]}, "
                      f"errors {trend[-1][3]}", flush=True)
        elapsed = time.monotonic() - t0
        end = snapshot(server_pid, metrics_url)
    finally:
        if server is not None:
            server.stop()
    report = {
        "clients": args.clients, "duration_s": round(elapsed, 1), "requests_completed": stats.completed,
        "errors": len(stats.errors), "error_examples": sorted(set(stats.errors))[:5],
        "tokens": stats.tokens, "tokens_per_s": round(stats.tokens / elapsed, 1),
        "requests_per_s": round(stats.completed / elapsed, 2),
        "ttft_ms_p50": percentile(stats.ttft, 50) and 1000 * percentile(stats.ttft, 50),
        "ttft_ms_p99": percentile(stats.ttft, 99) and 1000 * percentile(stats.ttft, 99),
        "itl_ms_p50": percentile(stats.itl, 50) and 1000 * percentile(stats.itl, 50),
        "itl_ms_p99": percentile(stats.itl, 99) and 1000 * percentile(stats.itl, 99),
        "finish_reasons": stats.finish_reasons,
        "greedy_requests_repeated": len(stats.greedy_texts), "greedy_mismatches": len(stats.greedy_mismatches),
        "start": start, "end": end, "stub_rss_trend_mib": trend,
        "load_average": os.getloadavg(),
    }
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of load (default 300)")
    ap.add_argument("--clients", type=int, default=32, help="concurrent streaming clients (default 32)")
    ap.add_argument("--max-requests", type=int, default=100_000, help="stop after this many requests in all")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds without a response that count as an error")
    ap.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    ap.add_argument("--log", type=Path, help="server log (default bench/work/soak-server.log)")
    ap.add_argument("--grpc-url", help="use this running server (host:port) instead of starting one")
    ap.add_argument("--metrics-url", help="with --grpc-url: its metrics URL")
    ap.add_argument("--server-pid", type=int, help="with --grpc-url: tritonserver's pid, for memory figures")
    ap.add_argument("--json", type=Path, help="also write the report here")
    args = ap.parse_args(argv)
    if args.grpc_url and not args.grpc_url.startswith(("127.", "localhost")):
        ap.error("loopback only: --grpc-url must be 127.x.x.x:port or localhost:port")

    report = run(args)
    s, e = report["start"], report["end"]

    def fmt(x, unit=""):
        return "n/a" if x is None else f"{x:.1f}{unit}"

    print(f"\nsoak: {report['clients']} streaming clients for {report['duration_s']:.0f}s "
          f"(load average {', '.join(f'{x:.1f}' for x in report['load_average'])})")
    print(f"  requests completed  {report['requests_completed']} ({report['requests_per_s']}/s), "
          f"{report['tokens']} tokens ({report['tokens_per_s']}/s)")
    examples = f"  e.g. {report['error_examples']}" if report["errors"] else ""
    print(f"  errors              {report['errors']}{examples}")
    print(f"  finish reasons      {report['finish_reasons']}")
    print(f"  time to first resp  p50 {fmt(report['ttft_ms_p50'], ' ms')}, p99 {fmt(report['ttft_ms_p99'], ' ms')}")
    print(f"  inter-token latency p50 {fmt(report['itl_ms_p50'], ' ms')}, p99 {fmt(report['itl_ms_p99'], ' ms')}")
    print(f"  greedy repeats      {report['greedy_requests_repeated']} distinct requests, "
          f"{report['greedy_mismatches']} answers that differed from the first run")
    print(f"  stub RSS            start {fmt(s['stub_rss_mib'], ' MiB')}, end {fmt(e['stub_rss_mib'], ' MiB')}")
    trend = report["stub_rss_trend_mib"]
    if len(trend) >= 4:  # the KV page store is committed lazily, page by page: the first minutes grow with it
        half = trend[len(trend) // 2]
        print(f"  stub RSS, 2nd half  t={half[0]}s {half[1]:.1f} MiB -> t={trend[-1][0]}s {trend[-1][1]:.1f} MiB "
              f"({100 * (trend[-1][1] - half[1]) / half[1]:+.1f}%)")
    print(f"  tritonserver RSS    start {fmt(s['server_rss_mib'], ' MiB')}, end {fmt(e['server_rss_mib'], ' MiB')}")
    print(f"  /dev/shm (mapped)   start {fmt(s['shm_mib'], ' MiB')}, end {fmt(e['shm_mib'], ' MiB')}")
    print(f"  KV pages used idle  start {s.get('kv_pages_used')}, end {e.get('kv_pages_used')}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
