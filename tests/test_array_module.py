"""The KV buffers' device seam, on its numpy twin: onnxruntime reads and writes the slot buffers by pointer, and
moves, page reads and writes go through the seam's array module; on CUDA the buffers are CuPy's, and a CUDA
session without CuPy is refused unless the operator allows host KV."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig
from tritongen.runtime.array_module import HOST, HostKvRefused, array_module, placement
from tritongen.runtime.gqa_decoder import GqaDecoder
from tritongen.triton.generator_settings import parse_settings

CUDA_FIRST = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def stand_in_cupy(device_id: int) -> types.ModuleType:
    """What array_module reads of CuPy (this machine has neither CuPy nor a GPU): numpy under its name."""
    cupy = types.ModuleType("cupy")
    cupy.zeros, cupy.asarray, cupy.asnumpy = np.zeros, np.asarray, np.asarray
    cupy.cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=device_id))
    return cupy


def test_host_memory_when_onnxruntime_runs_on_the_cpu():
    assert array_module(["CPUExecutionProvider"]) is HOST
    assert array_module([]) is HOST
    assert placement(HOST) == "running-batch KV in host memory"


def test_cuda_memory_when_onnxruntime_runs_on_cuda_and_cupy_is_there(monkeypatch):
    cupy = stand_in_cupy(device_id=1)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    arrays = array_module(CUDA_FIRST)
    assert (arrays.xp, arrays.device, arrays.device_id) == (cupy, "cuda", 1)
    assert placement(arrays) == "running-batch KV on cuda:1 (CuPy)"
    assert array_module(["CPUExecutionProvider", "CUDAExecutionProvider"]) is HOST  # CUDA only when it runs first


def test_cuda_without_cupy_is_refused_unless_the_operator_allows_host_kv(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(HostKvRefused, match="CuPy is not installed.*cupy-cuda13x.*allow_host_kv"):
        array_module(CUDA_FIRST)
    assert array_module(CUDA_FIRST, allow_host_kv=True) is HOST


def test_the_generator_setting_reaches_the_engine_and_the_load_line_names_the_device(tiny_folder):
    assert parse_settings({}, tiny_folder.parent).engine.allow_host_kv is False
    assert parse_settings({"allow_host_kv": "true"}, tiny_folder.parent).engine.allow_host_kv is True
    engine = Engine(tiny_folder, EngineConfig(num_gpu_pages=64, max_model_len=256, allow_host_kv=True))
    try:
        assert engine.kv_device == "cpu"
        assert engine.kv_line == "running-batch KV in host memory, onnxruntime on CPUExecutionProvider"
    finally:
        engine.close()


def test_decode_writes_through_the_bound_pointers_and_pages_round_trip(tiny_folder):
    decoder = GqaDecoder(tiny_folder / "1" / "model.onnx", max_slots=4, max_len=64, intra_op_threads=1)
    assert decoder.arrays is HOST
    ids = np.array([[5, 6, 7, 8, 9, 10]], np.int64)
    decoder.prefill(2, ids, 0)
    written = decoder.read(2, 0, 6)
    assert np.abs(written).sum() > 0 and not decoder.read(1, 0, 6).any()  # in place, in its own row only
    decoder.move(2, 0, 6)
    assert np.array_equal(decoder.read(0, 0, 6), written)
    decoder.write(3, 10, written)
    assert np.array_equal(decoder.read(3, 10, 16), written)
    moved = decoder.decode(np.array([[11]], np.int64), np.array([6], np.int32))[0][0, -1].copy()  # reads row 0
    fresh = decoder.prefill(1, np.array([[5, 6, 7, 8, 9, 10, 11]], np.int64), 0)[0][0, -1]
    assert np.allclose(moved, fresh, atol=1e-5) and not np.allclose(moved, 0)
