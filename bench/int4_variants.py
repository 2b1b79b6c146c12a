"""int4 copies of the served SmolLM2 graph, side by side with fp32: block size 32 / 64 / 128, accuracy level
0 / 4, the tied LM head quantized or left fp32. For each: teacher-forced top-1 agreement with fp32 and the
largest logit drift over ~1,100 positions of varied text (the standard library's module documentation and two
chats), and decode rates at 1 and 16 streams in the in-process engine, as ratios to fp32 measured in
alternating passes. A one-off report (not in `make bench` or CI): `.venv/bin/python -m bench.int4_variants`.
"""

from __future__ import annotations

import argparse
import inspect
import json
import queue
import shutil
import statistics
import tempfile
import textwrap
import threading
from pathlib import Path

import numpy as np
import onnx

from bench.alternating import alternate
from bench.prompts import PROMPTS
from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.model_build.int4 import quantize_int4
from tritongen.runtime.gqa_decoder import GqaDecoder
from tritongen.runtime.tokenizer import TextTokenizer

ROOT = Path(__file__).resolve().parents[1]
FP32 = ROOT / "model_repository" / "target_gqa"


def texts(tokenizer: TextTokenizer) -> list[list[int]]:
    docs = [inspect.getdoc(m) for m in (json, argparse, queue, textwrap, threading, statistics)]
    chats = [tokenizer.render_chat([{"role": "user", "content": q}]) + a for q, a in [
        ("What is the capital of France?", "The capital of France is Paris."),
        ("Write a haiku about the sea.", "Waves fold into foam,\nthe tide keeps its patient time,\nsalt wind.")]]
    return [tokenizer.encode(t)[:400] for t in docs + chats if t]


def logits(folder: Path, seqs: list[list[int]]) -> list[np.ndarray]:
    decoder = GqaDecoder(folder / "1" / "model.onnx", 1, 512)
    return [decoder.prefill(0, np.array([s], np.int64), 0, all_logits=True)[0][0].copy() for s in seqs]


def variant(workdir: Path, block: int, level: int, head: bool) -> Path:
    folder = workdir / f"int4_b{block}_a{level}_{'head' if head else 'nohead'}"
    shutil.copytree(FP32, folder, ignore=shutil.ignore_patterns("*.onnx*", "build_stamp.json"))
    model = quantize_int4(onnx.load(str(FP32 / "1" / "model.onnx")), block, level, head)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    return folder


def decode_seconds(engine: Engine, streams: int, tokens: int) -> float:
    import time

    done: queue.Queue = queue.Queue()
    start = time.perf_counter()
    for i in range(streams):
        engine.submit(GenerateRequest(PROMPTS[i % len(PROMPTS)], GenerateOptions(max_new_tokens=tokens,
                                                                               stop_on_eos=False)),
                      on_done=lambda result, error: done.put(error))
    errors = [done.get() for _ in range(streams)]
    assert not any(errors), errors
    return (time.perf_counter() - start) / (streams * tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    tokenizer = TextTokenizer(FP32)
    seqs = texts(tokenizer)
    reference = logits(FP32, seqs)
    positions = sum(len(s) for s in seqs)
    configs = [(b, a, True) for b in (32, 64, 128) for a in (0, 4)] + [(32, 4, False)]
    with tempfile.TemporaryDirectory() as tmp:
        folders = {"fp32": FP32}
        for block, level, head in configs:
            folder = variant(Path(tmp), block, level, head)
            got = logits(folder, seqs)
            agree = sum(int((r.argmax(-1) == g.argmax(-1)).sum()) for r, g in zip(reference, got)) / positions
            drift = max(float(np.abs(r - g).max()) for r, g in zip(reference, got))
            size = (folder / "1" / "model.onnx").stat().st_size / 2**20
            print(f"{folder.name}: top-1 agreement {agree:.4f} over {positions} positions, max logit drift "
                  f"{drift:.2f}, {size:.0f} MiB", flush=True)
            folders[folder.name] = folder
        for streams in (1, 16):
            engines = {name: Engine(folder, EngineConfig()) for name, folder in folders.items()}
            try:
                seconds = alternate({name: (lambda e=e: decode_seconds(e, streams, args.tokens))
                                     for name, e in engines.items()}, args.passes)
            finally:
                for e in engines.values():
                    e.close()
            base = statistics.median(seconds["fp32"])
            print(f"{streams} stream(s), decode rate / fp32 (median of {args.passes} alternating passes): " + ", ".join(
                f"{name} {base / statistics.median(v):.2f}x" for name, v in seconds.items() if name != "fp32"),
                flush=True)


if __name__ == "__main__":
    main()
