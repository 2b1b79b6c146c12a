"""The GPU checks in one run: placement, KV in device memory, no KV across PCIe, tokens, speed beside the CPU's.

A few minutes on one GPU (at most 8), on a machine with an NVIDIA GPU and onnxruntime-gpu and CuPy for its CUDA
in .venv (bench/README.md says how to set that up):

1. Placement: onnxruntime's profile of a prefill and decode calls of an fp16 SmolLM2-shaped decoder (seeded
   random weights, since speed does not depend on their values, unless --model names a built fp16 folder)
   shows every GroupQueryAttention and MatMul node on the CUDA provider.
2. KV in device memory: the slot decoder's buffers are CuPy arrays whose pointer CUDA reports as device memory,
   and a slot move (a CuPy kernel) copies a row.
3. No KV across PCIe: in that profile no decode call has a Memcpy node of a KV-shaped tensor (the nodes and
   bytes the Memcpy nodes of a decode call move are printed).
4. Tokens: the engine's greedy tokens on the GPU equal the CPU's, a divergence allowed only where the CPU run's
   top-2 logit gap at that token is below 1e-4 (a near-tie).
5. Speed at 1 and 16 streams, in alternating passes: a raw loop over the same slot decoder (the limit), the
   in-process engine and the generator through Triton (gRPC streams), as ratios to the raw loop beside its
   steady decode rate; with --genai-folder (an onnxruntime-genai folder built for CUDA) and onnxruntime-genai
   installed, og.Engine beside our engine on that folder at 16 streams.

    .venv/bin/python -m bench.gpu_check [--model model_repository/target_gqa_fp16] [--genai-folder F] [--out F]
    .venv/bin/python -m bench.gpu_check --cpu-dry-run

--cpu-dry-run runs every step on the CPU provider with fewer tokens (placement then expects the CPU provider
and the KV in host memory): it checks the script itself on a machine without a GPU. Checks 1 to 4 decide PASS;
the speed figures are reported, never judged.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.concurrency import figures
from bench.gpu_profile import decode_copies, placed
from bench.systems import stream_record
from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.model_build.decoder_graph import build_decoder
from tritongen.model_build.fp16 import convert_fp16
from tritongen.model_build.hf_config import llama_config
from tritongen.model_build.onnx_folder import write_model_folder
from tritongen.model_build.tiny import tiny_settings, tiny_spec, tiny_tokenizer_json, tiny_weights
from tritongen.runtime.cpu_threads import session_options
from tritongen.runtime.gqa_decoder import GqaDecoder
from tritongen.runtime.model_folder import locate

ROOT = Path(__file__).resolve().parents[1]
# SmolLM2's tokenizer for the seeded decoder where `make models` built it: the byte-level stand-in's pieces of
# random ids seldom end a character, so the generator through Triton would hold their text (and tokens) back.
BUILT_TOKENIZER = ROOT / "model_repository" / "target_gqa"
SMOLLM2 = replace(tiny_spec(), vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                  num_heads=9, num_kv_heads=3, max_position=2048)
PLACED_OPS = ("GroupQueryAttention", "MatMul")
NEAR_TIE = 1e-4
STREAMS = (1, 16)


@dataclass(frozen=True)
class Run:
    provider: str  # "CUDAExecutionProvider", or the CPU's in a dry run
    folder: Path
    work: Path  # scratch: profiles, the server's repository and log
    new_tokens: int
    prompt_len: int
    passes: int

    @property
    def providers(self) -> list[str]:
        return list(dict.fromkeys([self.provider, "CPUExecutionProvider"]))

    def prompts(self, count: int, vocab: int, seed: int = 0) -> list[list[int]]:
        rng = np.random.default_rng([count, seed])
        return [rng.integers(3, min(vocab, 32000), self.prompt_len).tolist() for _ in range(count)]


def seeded_folder(folder: Path, tokenizer: Path | None) -> Path:
    """An fp16 decoder of SmolLM2's shape from seeded random weights, with the given tokenizer folder's files."""
    tokens = json.loads((tokenizer / "tokenizer.json").read_text()) if tokenizer else tiny_tokenizer_json(49152)
    settings = tiny_settings(SMOLLM2)
    write_model_folder(folder, convert_fp16(build_decoder(tiny_weights(SMOLLM2, seed=0), attention="gqa")), tokens,
                       settings, llama_config(SMOLLM2, settings, "float16"))
    return folder


def engine(run: Run, provider: str | None = None, folder: Path | None = None) -> Engine:
    providers = run.providers if provider is None else [provider]
    return Engine(folder or run.folder, EngineConfig(execution_providers=providers, max_model_len=1024,
                                                     num_gpu_pages=1024))


def profile_check(run: Run) -> dict:
    """Checks 1 and 3: one profiled session, a prefill of 4 rows and 8 decode calls over them."""
    onnx = locate(run.folder).onnx_file
    options = session_options(0, False)
    options.enable_profiling = True
    options.profile_file_prefix = str(run.work / "profile")
    decoder = GqaDecoder(onnx, 4, 256, providers=run.providers)
    decoder.session = ort.InferenceSession(str(onnx), options, providers=run.providers)
    decoder.prefill(0, np.tile(np.arange(1, 33, dtype=np.int64), (4, 1)), 0)
    for step in range(8):
        decoder.decode(np.full((4, 1), 7, np.int64), np.full(4, 32 + step, np.int32))
    events = json.loads(Path(decoder.session.end_profiling()).read_text())
    where = placed(events, PLACED_OPS)
    copies = decode_copies(events, decoder.shape.num_kv_heads, decoder.shape.head_dim)
    return {"placement": {op: sorted(p) for op, p in where.items()},
            "placement_ok": all(p == {run.provider} for p in where.values()),
            "decode_calls": len(copies), "memcpy_nodes_per_call": max((c.nodes for c in copies), default=0),
            "memcpy_bytes_per_call": max((c.bytes for c in copies), default=0),
            "kv_shaped_copies": sum(c.kv_shaped for c in copies), "copies_ok": sum(c.kv_shaped for c in copies) == 0}


def kv_memory_check(run: Run) -> dict:
    """Check 2: where the slot decoder put its buffers, and a slot move on them."""
    decoder = GqaDecoder(locate(run.folder).onnx_file, 4, 256, providers=run.providers)
    expected = "cpu" if run.provider == "CPUExecutionProvider" else "cuda"
    ok = decoder.arrays.device == expected
    if decoder.arrays.device == "cuda":
        import cupy

        attributes = cupy.cuda.runtime.pointerGetAttributes(decoder.arrays.pointer(decoder.keys[0]))
        ok = ok and attributes.type == getattr(cupy.cuda.runtime, "memoryTypeDevice", 2)
    decoder.prefill(0, np.arange(1, 17, dtype=np.int64)[None], 0)
    decoder.move(0, 2, 16)
    ok = ok and np.array_equal(decoder.read(2, 0, 16), decoder.read(0, 0, 16))
    return {"kv_device": decoder.arrays.device, "kv_array_type": type(decoder.keys[0]).__module__, "kv_ok": bool(ok)}


def greedy(run: Run, provider: str) -> list[tuple[list[int], list[float]]]:
    """Each prompt's greedy tokens and, per token, the gap between its top-2 logprobs (= logits)."""
    eng = engine(run, provider)
    try:
        out = []
        for ids in run.prompts(2, eng.vocab_size):
            options = GenerateOptions(max_new_tokens=run.new_tokens, stop_on_eos=False, top_logprobs=2)
            result = eng.generate(GenerateRequest(ids, options))
            out.append((result.token_ids, [lp.top[0][1] - lp.top[1][1] for lp in result.logprobs or []]))
        return out
    finally:
        eng.close()


def tokens_check(run: Run) -> dict:
    """Check 4, under the near-tie rule."""
    verdicts = []
    for (gpu, _), (cpu, gaps) in zip(greedy(run, run.provider), greedy(run, "CPUExecutionProvider")):
        first = next((i for i, (a, b) in enumerate(zip(gpu, cpu)) if a != b), None)
        if first is None:
            verdicts.append("same")
        else:
            verdicts.append(f"near-tie at {first}" if gaps[first] < NEAR_TIE else f"MISMATCH at {first}"
                            f" (top-2 gap {gaps[first]:.2e})")
    return {"tokens": verdicts, "tokens_ok": not any(v.startswith("MISMATCH") for v in verdicts)}


def raw_rate(decoder: GqaDecoder, prompt: list[int], rows: int, steps: int) -> float:
    """The limit: the prompt prefilled once and copied into every row, then greedy decode calls, argmax."""
    length = len(prompt)
    logits, _ = decoder.prefill(0, np.array([prompt], np.int64), 0)
    for row in range(1, rows):
        decoder.move(0, row, length)
    ids = np.repeat(logits[:, -1].argmax(-1)[:, None], rows, axis=0).astype(np.int64)
    start = time.perf_counter()
    for step in range(steps):
        logits, _ = decoder.decode(ids, np.full(rows, length + step, np.int32))
        ids = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
    return rows * steps / (time.perf_counter() - start)


class EngineStreams:
    """The in-process engine, every prompt submitted at once; a token's time is when its callback runs."""

    def __init__(self, eng: Engine):
        self.engine = eng

    def run_streams(self, items: list[tuple[str, list[int]]], n: int) -> dict:
        times: list[list[float]] = [[] for _ in items]
        done = []
        start = time.perf_counter()
        for i, (_, ids) in enumerate(items):
            options = GenerateOptions(max_new_tokens=n, stop_on_eos=False)
            self.engine.submit(GenerateRequest(ids, options), on_token=lambda t, i=i: times[i].append(
                time.perf_counter() - start), on_done=lambda r, e: done.append(e))
        while len(done) < len(items):
            time.sleep(0.005)
        if any(done):
            raise RuntimeError(f"a request failed: {next(e for e in done if e)!r}")
        return {"streams": [stream_record(range(len(t)), t, 0.0) for t in times]}


def steady_rate(system, prompts: list[list[int]], n: int) -> float:
    """make bench's steady decode rate: while every stream decodes, each stream's tokens over its time there."""
    rate = figures(system.run_streams([("", ids) for ids in prompts], n), n, len(prompts[0]))["tps"]
    if rate is None:
        raise RuntimeError("no steady decode window: raise --new-tokens")
    return rate


def speed(run: Run, triton) -> dict:
    """Check 5: raw loop, engine and Triton at 1 and 16 streams, the order flipping every pass (pass 0 warms up)."""
    eng = engine(run)
    decoder = GqaDecoder(locate(run.folder).onnx_file, max(STREAMS), run.prompt_len + run.new_tokens + 8,
                          providers=run.providers)
    out: dict = {}
    try:
        for streams in STREAMS:
            prompts = run.prompts(streams, eng.vocab_size)
            cases = {"raw": lambda: raw_rate(decoder, prompts[0], streams, run.new_tokens),
                     "engine": lambda: steady_rate(EngineStreams(eng), prompts, run.new_tokens),
                     "triton": lambda: steady_rate(triton, prompts, run.new_tokens)}
            rates: dict[str, list[float]] = {name: [] for name in cases}
            for p in range(run.passes + 1):
                for name in (list(cases) if p % 2 else list(cases)[::-1]):
                    rate = cases[name]()
                    if p:
                        rates[name].append(rate)
            med = {name: statistics.median(values) for name, values in rates.items()}
            out[f"{streams} streams"] = {"raw tok/s": round(med["raw"], 1),
                                         "engine / raw": round(med["engine"] / med["raw"], 3),
                                         "triton / raw": round(med["triton"] / med["raw"], 3)}
    finally:
        eng.close()
    return out


def og_check(run: Run, folder: Path) -> dict:
    """og.Engine (in .venv-genai, as bench.genai_folders runs it) beside our engine on one onnxruntime-genai
    folder, 16 streams of fresh prompts each pass, end to end: og's per-token times are not observable alike."""
    from bench.genai_folders import ROOT, GenaiWorker, og_folder

    if not (ROOT / ".venv-genai" / "bin" / "python").is_file():
        return {"og": "skipped: no .venv-genai (make foreign-models; onnxruntime-genai-cuda==0.18.0 for CUDA)"}
    folder = folder.resolve()  # og_folder links to its files
    worker, ours = GenaiWorker(og_folder(folder, run.work / "og-folder", 0)), engine(run, folder=folder)

    def our_batch(prompts: list[list[int]]) -> float:
        start = time.perf_counter()
        EngineStreams(ours).run_streams([("", ids) for ids in prompts], run.new_tokens)
        return time.perf_counter() - start
    systems = {"og.Engine": lambda prompts: worker.ask({"engine": prompts, "tokens": run.new_tokens})["seconds"],
               "ours": our_batch}
    rates: dict[str, list[float]] = {name: [] for name in systems}
    try:
        for p in range(run.passes + 1):
            prompts = run.prompts(16, ours.vocab_size, seed=p + 1)
            for name in (list(systems) if p % 2 else list(systems)[::-1]):
                seconds = systems[name](prompts)
                if p:
                    rates[name].append(16 * run.new_tokens / seconds)
    finally:
        worker.close()
        ours.close()
    return {"og runtime": worker.config, "og.Engine / ours, 16 streams end to end":
            round(statistics.median(rates["og.Engine"]) / statistics.median(rates["ours"]), 3)}


def through_triton(run: Run):
    """The generator serving the folder in place on the real tritonserver, and a gRPC streams client of it."""
    from bench.systems import TritonGrpc
    from tritongen.serve import TritonServer, folder_repository

    server = TritonServer(folder_repository(run.folder), ["generator"], http_port=0, grpc_port=0, metrics_port=0,
                          log_file=run.work / "tritonserver.log").start(600)
    return server, TritonGrpc(server.url_grpc)


def timed(results: dict, name: str, check) -> None:
    start = time.perf_counter()
    results[name] = check()
    print(f"{name} ({time.perf_counter() - start:.0f} s): {json.dumps(results[name])}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, help="a built fp16 GroupQueryAttention folder (make models FP16=1: "
                    "model_repository/target_gqa_fp16); default: an fp16 SmolLM2-shaped decoder of seeded weights")
    ap.add_argument("--tokenizer", type=Path, help="for the seeded decoder: a folder with SmolLM2's tokenizer.json "
                    f"(default: {BUILT_TOKENIZER.relative_to(ROOT)} where built)",
                    default=BUILT_TOKENIZER if (BUILT_TOKENIZER / "tokenizer.json").is_file() else None)
    ap.add_argument("--genai-folder", type=Path, help="an onnxruntime-genai folder for og.Engine beside our engine")
    ap.add_argument("--new-tokens", type=int, help="per stream (default 64; 32 in a dry run)")
    ap.add_argument("--passes", type=int, default=2, help="measured passes per speed figure (one more warms up)")
    ap.add_argument("--out", type=Path, help="also write the results here as JSON")
    ap.add_argument("--cpu-dry-run", action="store_true", help="every step on the CPU: checks the script itself")
    args = ap.parse_args(argv)
    provider = "CPUExecutionProvider" if args.cpu_dry_run else "CUDAExecutionProvider"
    print(f"onnxruntime {ort.__version__}, providers {ort.get_available_providers()}; checking {provider}", flush=True)
    if provider not in ort.get_available_providers():
        print("this onnxruntime has no CUDA provider: install onnxruntime-gpu (bench/README.md)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    results: dict = {}
    try:
        folder = args.model or seeded_folder(work / "smollm2_shape_fp16", args.tokenizer)
        run = Run(provider, folder, work, args.new_tokens or (32 if args.cpu_dry_run else 64),
                  32 if args.cpu_dry_run else 128, args.passes)
        for name, check in (("profile", profile_check), ("kv_memory", kv_memory_check), ("tokens", tokens_check)):
            timed(results, name, lambda check=check: check(run))
        server, triton = through_triton(run)
        try:
            timed(results, "speed", lambda: speed(run, triton))
        finally:
            triton.close()
            server.stop()
        if args.genai_folder:
            timed(results, "og", lambda: og_check(run, args.genai_folder))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok = all(results[name][key] for name, key in (("profile", "placement_ok"), ("profile", "copies_ok"),
                                                  ("kv_memory", "kv_ok"), ("tokens", "tokens_ok")))
    results["verdict"] = "PASS" if ok else "FAIL"
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    print(results["verdict"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
