"""The GPU checks in one run, for a machine with an NVIDIA GPU and onnxruntime-gpu (and CuPy for device KV).

1. Placement: onnxruntime's profile of decode steps of an fp16 SmolLM2-shaped decoder (seeded random weights:
   speed does not depend on their values) shows every GroupQueryAttention and MatMul node on the CUDA provider.
2. Tokens: the tiny seeded fp16 decoder's greedy tokens on the GPU equal the same model's on the CPU.
3. Speed: the engine's decode rate at 1 and 16 concurrent streams on the GPU, as a ratio to the CPU's, measured
   in the same run.

    python -m bench.gpu_check --tokenizer model_repository/target_gqa [--cpu-dry-run]

--cpu-dry-run runs every step on the CPU provider (the placement check then expects CPU): it checks the script
itself on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import queue
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.model_build.decoder_graph import build_decoder
from tritongen.model_build.fp16 import convert_fp16
from tritongen.model_build.hf_config import llama_config
from tritongen.model_build.onnx_folder import write_model_folder
from tritongen.model_build.tiny import tiny_settings, tiny_spec, tiny_tokenizer_json, tiny_weights
from tritongen.runtime.cpu_threads import session_options
from tritongen.runtime.kv_slots import SlotDecoder

SMOLLM2 = replace(tiny_spec(), vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                  num_heads=9, num_kv_heads=3, max_position=2048)
PLACED_OPS = ("GroupQueryAttention", "MatMul")


def providers(first: str) -> list[str]:
    return list(dict.fromkeys([first, "CPUExecutionProvider"]))


def fp16_folder(folder: Path, spec, tokenizer: Path | None) -> Path:
    """An fp16 decoder of `spec`'s shape from seeded random weights, with the given tokenizer folder's files."""
    if tokenizer is None:
        tokens = tiny_tokenizer_json(spec.vocab_size)
    else:
        tokens = json.loads((tokenizer / "tokenizer.json").read_text())
    settings = tiny_settings(spec)
    write_model_folder(folder, convert_fp16(build_decoder(tiny_weights(spec, seed=0), attention="gqa")), tokens,
                       settings, llama_config(spec, settings, "float16"))
    return folder


def placement(folder: Path, provider: str) -> dict[str, set[str]]:
    """Which providers ran each placed op type during a prefill and eight decode steps."""
    options = session_options(0, False)
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "profile")
    decoder = SlotDecoder(folder / "1" / "model.onnx", 1, 256, providers=providers(provider))
    decoder.session = ort.InferenceSession(str(folder / "1" / "model.onnx"), options,
                                           providers=providers(provider))
    decoder.prefill(0, np.arange(1, 33, dtype=np.int64)[None], 0)
    for step in range(8):
        decoder.decode(np.array([[7]], np.int64), np.array([32 + step], np.int32))
    events = json.loads(Path(decoder.session.end_profiling()).read_text())
    placed: dict[str, set[str]] = {op: set() for op in PLACED_OPS}
    for event in events:
        args = event.get("args", {})
        if args.get("op_name") in placed:
            placed[args["op_name"]].add(args.get("provider", "?"))
    return placed


def greedy(folder: Path, provider: str) -> list[int]:
    engine = Engine(folder, EngineConfig(execution_providers=providers(provider)))
    try:
        options = GenerateOptions(max_new_tokens=32, stop_on_eos=False)
        return engine.generate(GenerateRequest("The capital of France is", options)).token_ids
    finally:
        engine.close()


def decode_rate(folder: Path, provider: str, streams: int) -> float:
    engine = Engine(folder, EngineConfig(execution_providers=providers(provider)))
    try:
        engine.generate(GenerateRequest(list(range(1, 65)), GenerateOptions(max_new_tokens=4)))  # warm-up
        done: queue.Queue = queue.Queue()
        start = time.perf_counter()
        for i in range(streams):
            prompt = list(range(1 + i, 257 + i))
            engine.submit(GenerateRequest(prompt, GenerateOptions(max_new_tokens=64, stop_on_eos=False)),
                          on_done=lambda r, e: done.put((r, e)))
        tokens = 0
        for _ in range(streams):
            result, error = done.get(timeout=600)
            if error is not None:
                raise error
            tokens += len(result.token_ids)
        return tokens / (time.perf_counter() - start)
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", type=Path, help="a folder with SmolLM2's tokenizer.json (else a byte-level one)")
    ap.add_argument("--cpu-dry-run", action="store_true")
    args = ap.parse_args(argv)
    gpu = "CPUExecutionProvider" if args.cpu_dry_run else "CUDAExecutionProvider"
    print(f"onnxruntime {ort.__version__}, providers {ort.get_available_providers()}; checking {gpu}")
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        big = fp16_folder(work / "smollm2_shape_fp16", SMOLLM2, args.tokenizer)
        placed = placement(big, gpu)
        print(f"placement: {json.dumps({op: sorted(p) for op, p in placed.items()})}")
        tiny = fp16_folder(work / "tiny_fp16", tiny_spec(), None)
        same = greedy(tiny, gpu) == greedy(tiny, "CPUExecutionProvider")
        print(f"tiny fp16 greedy tokens, {gpu} == CPU: {same}")
        for streams in (1, 16):
            ratio = decode_rate(big, gpu, streams) / decode_rate(big, "CPUExecutionProvider", streams)
            print(f"decode rate at {streams} streams, {gpu} / CPU: {ratio:.2f}x")
        ok = same and all(p == {gpu} for p in placed.values())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
