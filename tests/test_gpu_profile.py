"""bench.gpu_profile reads onnxruntime's profile as the GPU check needs it: providers per op type, and per decode
call the Memcpy nodes and whether one moved a KV-shaped tensor (what a host-resident KV buffer shows). The events
below have the shape onnxruntime 1.31 writes; a real CPU profile has no Memcpy node at all."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.gpu_check import main
from bench.gpu_profile import decode_copies, placed
from tritongen.runtime.cpu_threads import session_options
from tritongen.runtime.gqa_decoder import GqaDecoder


def node(op: str, ts: int, provider: str = "CUDAExecutionProvider", shape=(1, 1), size: int = 8) -> dict:
    return {"cat": "Node", "ts": ts, "dur": 1, "name": f"{op}_kernel_time",
            "args": {"op_name": op, "provider": provider, "output_size": str(size),
                     "output_type_shape": [{"float16": list(shape)}]}}


def call(ts: int, dur: int) -> dict:
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur, "args": {}}


def test_copies_are_counted_per_decode_call_and_kv_shaped_ones_flagged():
    events = [call(0, 100), node("MemcpyFromHost", 10, shape=(4, 3, 256, 64), size=393_216),  # the prefill: skipped
              call(200, 100), node("MatMul", 210), node("MemcpyFromHost", 220, size=32),
              call(400, 100), node("MemcpyFromHost", 410, size=32), node("MemcpyToHost", 420, shape=(4, 3, 256, 64),
                                                                           size=393_216)]
    first, second = decode_copies(events, kv_heads=3, head_dim=64)
    assert (first.nodes, first.bytes, first.kv_shaped) == (1, 32, 0)
    assert (second.nodes, second.bytes, second.kv_shaped) == (2, 393_248, 1)
    assert placed(events, ("MatMul", "GroupQueryAttention")) == {"MatMul": {"CUDAExecutionProvider"},
                                                                 "GroupQueryAttention": set()}


def test_a_real_cpu_profile_has_its_decode_calls_and_no_copies(tiny_folder, tmp_path):
    options = session_options(1, False)
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    decoder = GqaDecoder(tiny_folder / "1" / "model.onnx", 2, 64, intra_op_threads=1)
    decoder.session = ort.InferenceSession(str(tiny_folder / "1" / "model.onnx"), options,
                                           providers=["CPUExecutionProvider"])
    decoder.prefill(0, np.arange(1, 9, dtype=np.int64)[None], 0)
    for step in range(3):
        decoder.decode(np.array([[7]], np.int64), np.array([8 + step], np.int32))
    events = json.loads(Path(decoder.session.end_profiling()).read_text())
    assert [c.nodes for c in decode_copies(events, 2, 16)] == [0, 0, 0]
    assert placed(events, ("GroupQueryAttention",)) == {"GroupQueryAttention": {"CPUExecutionProvider"}}


def test_the_gpu_check_refuses_to_run_without_a_cuda_provider(capsys):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        return  # a GPU machine: the check itself is what runs there
    assert main([]) == 2
    assert "install onnxruntime-gpu" in capsys.readouterr().err
