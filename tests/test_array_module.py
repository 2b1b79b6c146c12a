"""The KV buffers' device seam, on its numpy twin: onnxruntime reads and writes the slot buffers by pointer, and
moves, page reads and writes go through the seam's array module."""

from __future__ import annotations

import importlib.util

import numpy as np

from tritongen.runtime.array_module import HOST, array_module
from tritongen.runtime.kv_slots import SlotDecoder


def test_host_memory_unless_onnxruntime_runs_on_cuda_with_cupy_present():
    assert array_module(["CPUExecutionProvider"]) is HOST
    assert array_module([]) is HOST
    cuda = array_module(["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert (cuda.device == "cuda") == (importlib.util.find_spec("cupy") is not None)


def test_decode_writes_through_the_bound_pointers_and_pages_round_trip(tiny_folder):
    decoder = SlotDecoder(tiny_folder / "1" / "model.onnx", max_slots=4, max_len=64, intra_op_threads=1)
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
