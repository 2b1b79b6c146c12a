"""What one BLS round trip per decode step would cost, beside our engine's decode step, side by side in one run.

A generator built the BLS way (a Python-backend model calling an ONNX-backend model through
`pb_utils.InferenceRequest(...).exec()` once per decode step) pays one round trip through Triton per step;
an ONNX-backend model keeps no KV between calls, so each step also ships the batch's past KV in and its
present back. Our engine opens the decoder in process and binds one KV buffer per layer as past and present,
so a step ships nothing. This script starts the real tritonserver on a temporary repository of two
Python-backend models: `echo` (returns its input: the cheapest model Triton can call; the bundled server has
no onnxruntime backend) and `bls_driver`, which times `steps` BLS calls of `echo` from inside the Python
backend, once with tiny tensors (the round trip alone) and once with KV-sized ones (batch x past tokens x the
served model's KV bytes per token, in and back). Beside it, in the same process order, the in-process engine
on the served SmolLM2 (configured from the generator's config.pbtxt) decodes 1 and 16 streams, and one host
copy of the same KV bytes is timed. Cases alternate (the order flips every pass; pass 0 warms up) and each
figure is the median over passes of a pass's median, so a shared machine's drift hits every case alike.

    .venv/bin/python -m bench.bls_step [--passes 6] [--past 256] [--out bench/results/<date>-bls-step.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (1, 16)
ECHO = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
'''
DRIVER = '''import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Times STEPS BLS calls of `echo` with a float32 tensor of SHAPE, as a BLS generator's decode steps would."""

    def execute(self, requests):
        responses = []
        for request in requests:
            shape = pb_utils.get_input_tensor_by_name(request, "SHAPE").as_numpy().tolist()
            steps = int(pb_utils.get_input_tensor_by_name(request, "STEPS").as_numpy()[0])
            past = np.ones(shape, np.float32)
            seconds = []
            for _ in range(steps):
                start = time.perf_counter()
                call = pb_utils.InferenceRequest(model_name="echo", inputs=[pb_utils.Tensor("X", past)],
                                                 requested_output_names=["Y"])
                answer = call.exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                present = pb_utils.get_output_tensor_by_name(answer, "Y").as_numpy()
                seconds.append(time.perf_counter() - start)
                assert present.shape == past.shape
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SECONDS", np.array(seconds))]))
        return responses
'''
CONFIGS = {
    "echo": ('input [{ name: "X", data_type: TYPE_FP32, dims: [-1, -1, -1] }]\n'
             'output [{ name: "Y", data_type: TYPE_FP32, dims: [-1, -1, -1] }]\n'),
    "bls_driver": ('input [{ name: "SHAPE", data_type: TYPE_INT64, dims: [3] },'
                   ' { name: "STEPS", data_type: TYPE_INT32, dims: [1] }]\n'
                   'output [{ name: "SECONDS", data_type: TYPE_FP64, dims: [-1] }]\n'),
}
# The Python backend grows its shared-memory region 1 MiB at a time by default; KV-sized tensors need hundreds.
SHM_ARGS = ["--backend-config=python,shm-default-byte-size=67108864",
            "--backend-config=python,shm-growth-byte-size=67108864"]


def write_repository(dest: Path) -> Path:
    """The two Python-backend models, complete configs (the server runs with auto-complete off)."""
    for name, source in (("echo", ECHO), ("bls_driver", DRIVER)):
        (dest / name / "1").mkdir(parents=True)
        (dest / name / "1" / "model.py").write_text(source)
        (dest / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{CONFIGS[name]}'
            'instance_group [{ kind: KIND_CPU, count: 1 }]\n')
    return dest


def kv_shape(batch: int, past: int, kv_bytes_per_token: int) -> tuple[int, int, int]:
    """A float32 tensor of the batch's past KV: batch x past tokens x one token's bytes (every layer, K and V)."""
    if kv_bytes_per_token % 4:
        raise ValueError(f"{kv_bytes_per_token} bytes per token is not a whole number of float32 values")
    return batch, past, kv_bytes_per_token // 4


def shipped_bytes(shape: tuple[int, int, int]) -> int:
    """What one BLS step moves: the tensor in and the same bytes back."""
    return 2 * 4 * int(np.prod(shape))


def steady_gaps(streams: list[dict]) -> list[float]:
    """Inter-token gaps while every stream decodes (last first token .. first last token): one step each."""
    start = max(s["times"][0] for s in streams)
    end = min(s["times"][-1] for s in streams)
    gaps = []
    for s in streams:
        inside = [t for t in s["times"] if start <= t <= end]
        gaps += np.diff(inside).tolist()
    if not gaps:
        raise RuntimeError("no steady decode window: raise --new-tokens")
    return gaps


class Bls:
    """The driver model over gRPC: per-step seconds of `steps` BLS calls with a tensor of `shape`."""

    def __init__(self, grpc_url: str):
        import tritonclient.grpc as grpcclient

        self.grpc = grpcclient
        self.client = grpcclient.InferenceServerClient(grpc_url)

    def steps(self, shape: tuple[int, int, int], steps: int) -> list[float]:
        inputs = [self.grpc.InferInput("SHAPE", [3], "INT64"), self.grpc.InferInput("STEPS", [1], "INT32")]
        inputs[0].set_data_from_numpy(np.array(shape, np.int64))
        inputs[1].set_data_from_numpy(np.array([steps], np.int32))
        return self.client.infer("bls_driver", inputs, client_timeout=600).as_numpy("SECONDS").tolist()


def host_copy(shape: tuple[int, int, int], repeats: int) -> Callable[[], list[float]]:
    """One host memcpy of the tensor, timed `repeats` times: what a single copy of those bytes costs here."""
    source, target = np.ones(shape, np.float32), np.empty(shape, np.float32)

    def run() -> list[float]:
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            np.copyto(target, source)
            seconds.append(time.perf_counter() - start)
        return seconds
    return run


def engine_steps(engine, prompts: list[list[int]], new_tokens: int) -> Callable[[], list[float]]:
    """The in-process engine decoding every prompt at once: its steady inter-token gaps (one step each)."""
    items = [("", ids) for ids in prompts]
    return lambda: steady_gaps(engine.run_streams(items, new_tokens)["streams"])


def alternate_medians(cases: dict[str, Callable[[], list[float]]], passes: int) -> dict[str, list[float]]:
    """Each case's per-pass median, the order flipping every pass; pass 0 only warms up."""
    names = list(cases)
    medians: dict[str, list[float]] = {name: [] for name in names}
    for p in range(passes + 1):
        for name in (names if p % 2 else names[::-1]):
            value = statistics.median(cases[name]())
            if p:
                medians[name].append(value)
        print(f"  pass {p}{' (warm-up)' if not p else ''} done, load average {os.getloadavg()[0]:.1f}", flush=True)
    return medians


def table(medians: dict[str, list[float]], past: int, kv_bytes_per_token: int) -> str:
    """One row per batch: raw medians (ms) of every case, and each BLS round trip over our step."""
    med = {name: statistics.median(values) for name, values in medians.items()}
    rows = ["| batch | KV shipped per BLS step (in + back) | our engine's decode step | BLS round trip, tiny "
            "tensors | BLS round trip, KV-sized tensors | one host copy of the past (one way) | BLS tiny / our step | "
            "BLS KV-sized / our step |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for batch in BATCHES:
        step, tiny, kv = med[f"engine b{batch}"], med[f"bls tiny b{batch}"], med[f"bls kv b{batch}"]
        shipped = shipped_bytes(kv_shape(batch, past, kv_bytes_per_token)) / 1e6
        rows.append(f"| {batch} | {shipped:,.1f} MB | {1e3 * step:.2f} ms | {1e3 * tiny:.2f} ms | {1e3 * kv:.1f} ms "
                    f"| {1e3 * med[f'copy b{batch}']:.1f} ms | {tiny / step:.3f}x | {kv / step:.2f}x |")
    return "\n".join(rows)


def spread(medians: dict[str, list[float]]) -> str:
    """How far each case's per-pass medians ranged (largest over smallest): what one pass can move by itself."""
    return ", ".join(f"{name} {max(v) / min(v):.2f}" for name, v in medians.items())


def measure(args, server, engine) -> dict[str, list[float]]:
    bls = Bls(server.url_grpc)
    per_token = engine.engine.decoder.bytes_per_token()
    rng = np.random.default_rng(7)
    vocab = engine.engine.vocab_size
    prompts = [rng.integers(3, vocab, args.past).tolist() for _ in range(max(BATCHES))]
    cases: dict[str, Callable[[], list[float]]] = {}
    for batch in BATCHES:
        shape = kv_shape(batch, args.past, per_token)
        cases[f"engine b{batch}"] = engine_steps(engine, prompts[:batch], args.new_tokens)
        cases[f"bls tiny b{batch}"] = lambda batch=batch: bls.steps((batch, 1, 2), args.tiny_steps)
        cases[f"bls kv b{batch}"] = lambda shape=shape: bls.steps(shape, args.kv_steps)
        cases[f"copy b{batch}"] = host_copy(shape, args.kv_steps)
    return alternate_medians(cases, args.passes)


def report(args, medians: dict[str, list[float]], per_token: int) -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (f"# BLS round trip per decode step beside our decode step, {when}\n\n"
            f"From `.venv/bin/python -m bench.bls_step --passes {args.passes} --past {args.past}` on "
            f"{len(os.sched_getaffinity(0))} cores ({cpu}), load average {os.getloadavg()[0]:.1f} at the end. "
            f"What it measures and why: the script's docstring. Our step: the in-process engine on "
            f"`model_repository/target_gqa` (SmolLM2-135M, configured from the generator's config.pbtxt), "
            f"prompts of {args.past} tokens, {args.new_tokens} new tokens, the steady inter-token gap. BLS: "
            f"`pb_utils.InferenceRequest(...).exec()` from a Python-backend model to a Python-backend echo model, "
            f"timed inside the caller; tiny: a [batch, 1, 2] float32 tensor; KV-sized: batch x {args.past} tokens x "
            f"{per_token:,} B per token (the served model's KV), in and back. Every figure is the median over "
            f"{args.passes} alternating passes of a pass's median (the order flips every pass; one warm-up pass). "
            f"The milliseconds are this run's on a shared machine: read the ratios, measured side by side.\n\n"
            f"{table(medians, args.past, per_token)}\n\nPer-pass spread (largest over smallest pass median): "
            f"{spread(medians)}.\n")


def main(argv: list[str] | None = None) -> int:
    from bench.systems import EngineInProcess
    from tritongen.serve import TritonServer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--past", type=int, default=256, help="prompt tokens: the past each decode step runs over")
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--tiny-steps", type=int, default=40)
    ap.add_argument("--kv-steps", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / f"{time.strftime('%Y-%m-%d')}-bls-step.md")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bls-step-"))
    engine = EngineInProcess(str(ROOT / "model_repository"))
    server = TritonServer(write_repository(work / "repository"), ["echo", "bls_driver"], http_port=0, grpc_port=0,
                          metrics_port=0, log_file=work / "tritonserver.log", extra_args=SHM_ARGS)
    try:
        server.start()
        print(f"tritonserver up ({server.url_grpc}); {args.passes} passes + 1 warm-up", flush=True)
        medians = measure(args, server, engine)
    finally:
        server.stop()
        engine.close()
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, medians, engine.engine.decoder.bytes_per_token())
    print(text)
    args.out.write_text(text)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
