"""onnxruntime-genai's folders, served by tritongen through Triton beside onnxruntime-genai's own runtimes.

On each of `make foreign-models`' SmolLM2 folders from onnxruntime-genai's builder (int4 and fp32, CPU):
one stream through Triton against og.Generator, and 16 streams through Triton (16 concurrent gRPC streams)
against og.Engine given all 16 requests at once (the 16-stream bench's prompts). og.Engine runs its static
batching path, configured for a batch of 16 (its default is 4); its dynamic batching needs a graph with a
paged KV cache, which the CPU builder does not make. Both sides get the same onnxruntime thread count, run
alone, greedy, the same number of new tokens, in alternating passes; the figures are the ratios of the
medians. The folders are used in place (onnxruntime-genai reads a copy of genai_config.json beside links to
the folder's files, with its batch size and thread count set).

    .venv/bin/python -m bench.genai_folders [--passes 3] [--tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from bench.prompts import PROMPTS
from tritongen.runtime.tokenizer import TextTokenizer
from tritongen.serve import TritonServer, folder_repository

ROOT = Path(__file__).resolve().parents[1]

FOLDERS = ("smollm2-genai-int4", "smollm2-genai-fp32")
STREAMS = 16


def og_folder(folder: Path, work: Path, threads: int) -> Path:
    """Links to the folder's files and a genai_config.json with og.Engine's batch and the thread count set."""
    work.mkdir(parents=True)
    for f in folder.iterdir():
        if f.name != "genai_config.json":
            (work / f.name).symlink_to(f)
    config = json.loads((folder / "genai_config.json").read_text())
    config["engine"] = {"static_batching": {"max_batch_size": STREAMS}}
    config["model"]["decoder"]["session_options"]["intra_op_num_threads"] = threads
    (work / "genai_config.json").write_text(json.dumps(config, indent=1))
    return work


class GenaiWorker:
    def __init__(self, folder: Path):
        # .venv-genai's interpreter has onnxruntime-genai but not tritongen; it can still run the worker as a
        # module of the bench package (bench/__init__.py imports nothing) with the repository root as its cwd.
        self.process = subprocess.Popen([str(ROOT / ".venv-genai" / "bin" / "python"), "-m", "bench.genai_worker",
                                         str(Path(folder).absolute())], cwd=ROOT, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.config = json.loads(self.process.stdout.readline())

    def ask(self, job: dict) -> dict:
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


def triton_stream(url: str, ids: list[int], tokens: int) -> list[int]:
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    inputs = []
    for name, value in (("input_ids", np.array(ids, np.int64)), ("max_tokens", np.array([tokens], np.int32)),
                        ("ignore_eos", np.array([True])), ("stream", np.array([True]))):
        tensor = grpcclient.InferInput(name, list(value.shape), {np.int64: "INT64", np.int32: "INT32"}.get(
            value.dtype.type, "BOOL"))
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    client.async_stream_infer("generator", inputs, outputs=[grpcclient.InferRequestedOutput("output_ids")])
    out: list[int] = []
    while True:
        result, error = events.get(timeout=600)
        if error is not None:
            raise RuntimeError(error)
        out += result.as_numpy("output_ids").tolist()
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    client.close()
    return out


def triton_concurrent(url: str, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    results: list = [None] * len(prompts)

    def one(i: int) -> None:
        results[i] = triton_stream(url, prompts[i], tokens)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def measure(folder: Path, passes: int, tokens: int, threads: int) -> dict:
    tokenizer = TextTokenizer(folder)
    prompts = [tokenizer.encode(p) for p in (PROMPTS * STREAMS)[:STREAMS]]
    repository = folder_repository(folder)
    work = Path(tempfile.mkdtemp(prefix="genai-bench-"))
    worker = GenaiWorker(og_folder(folder, work / "og", threads))
    seconds: dict[str, list[float]] = {"triton-1": [], "og-generator": [], "triton-16": [], "og-engine": []}
    agree = {}
    try:
        with TritonServer(repository, ["generator"], http_port=0, grpc_port=0, metrics_port=0,
                          log_file=work / "server.log") as server:
            cases = {
                "triton-1": lambda: triton_stream(server.url_grpc, prompts[0], tokens),
                "og-generator": lambda: worker.ask({"generator": prompts[0], "tokens": tokens})["tokens"],
                "triton-16": lambda: triton_concurrent(server.url_grpc, prompts, tokens),
                "og-engine": lambda: worker.ask({"engine": prompts, "tokens": tokens})["tokens"],
            }
            for name, case in cases.items():  # warm-up, untimed
                case()
            for p in range(passes):
                for name in (list(cases) if p % 2 == 0 else list(cases)[::-1]):
                    elapsed, out = timed(cases[name])
                    seconds[name].append(elapsed)
                    agree[name] = out
    finally:
        worker.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(repository, ignore_errors=True)
    rate = {name: (STREAMS if name.endswith(("16", "engine")) else 1) * tokens / statistics.median(v)
            for name, v in seconds.items()}
    same_1 = agree["triton-1"] == agree["og-generator"]
    same_16 = sum(a == b for a, b in zip(agree["triton-16"], agree["og-engine"]))
    return {"config": worker.config, "rate": rate, "same_1": same_1, "same_16": same_16}


def markdown(name: str, r: dict, threads: int) -> str:
    rate = r["rate"]
    return (f"`foreign_models/{name}` (onnxruntime-genai {r['config']['version']}'s builder, `-p int4 -e cpu`), "
            f"{threads} onnxruntime threads each, greedy, 64 new tokens, 3 alternating passes; og.Engine on its "
            f"static batching path, batch {r['config']['max_batch']} (dynamic batching needs a paged-KV graph).\n\n"
            "| streams | tritongen via Triton | onnxruntime-genai | ratio | same tokens |\n|---:|---:|---:|---:|---|\n"
            f"| 1 | {rate['triton-1']:.1f} tok/s | og.Generator {rate['og-generator']:.1f} tok/s | "
            f"{rate['triton-1'] / rate['og-generator']:.2f}x | {r['same_1']} |\n"
            f"| {STREAMS} | {rate['triton-16']:.1f} tok/s | og.Engine {rate['og-engine']:.1f} tok/s | "
            f"{rate['triton-16'] / rate['og-engine']:.2f}x | {r['same_16']} of {STREAMS} |\n")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args(argv)
    report = {}
    for name in FOLDERS:
        folder = ROOT / "foreign_models" / name
        r = measure(folder, args.passes, args.tokens, args.threads)
        report[name] = r
        print(f"{name}: onnxruntime-genai {r['config']['version']}, og.Engine static batching (max batch "
              f"{r['config']['max_batch']}), {args.threads} threads each, {args.tokens} new tokens, "
              f"{args.passes} alternating passes")
        print(f"  1 stream:   Triton {r['rate']['triton-1']:.1f} tok/s, og.Generator {r['rate']['og-generator']:.1f} "
              f"tok/s: {r['rate']['triton-1'] / r['rate']['og-generator']:.2f}x (same tokens: {r['same_1']})")
        print(f"  16 streams: Triton {r['rate']['triton-16']:.1f} tok/s, og.Engine {r['rate']['og-engine']:.1f} "
              f"tok/s: {r['rate']['triton-16'] / r['rate']['og-engine']:.2f}x (same tokens in {r['same_16']} of "
              f"{STREAMS})", flush=True)
    return report


if __name__ == "__main__":
    main()
