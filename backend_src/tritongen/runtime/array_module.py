"""Where the running batch's KV lives: host memory through numpy, or CUDA memory through CuPy, behind one seam.

onnxruntime reads and writes the KV buffers by pointer (I/O binding with a device, a shape and an address), so a
decode step copies no KV on either device; slot moves and page reads and writes are array operations on the
buffers' own device, and only pages leaving for the page store cross to the host. The numpy twin is what runs
without a GPU, and in every test.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ArrayModule:
    xp: ModuleType  # numpy, or cupy
    device: str  # onnxruntime's name for the buffers' device: "cpu" or "cuda"
    device_id: int = 0

    def zeros(self, shape: tuple[int, ...], dtype) -> Any:
        return self.xp.zeros(shape, dtype)

    def to_host(self, array) -> np.ndarray:
        return array if self.xp is np else self.xp.asnumpy(array)

    def from_host(self, array: np.ndarray) -> Any:
        return array if self.xp is np else self.xp.asarray(array)

    @staticmethod
    def pointer(array) -> int:
        return array.ctypes.data if isinstance(array, np.ndarray) else array.data.ptr


HOST = ArrayModule(np, "cpu")


def array_module(providers: list[str]) -> ArrayModule:
    """CUDA memory when onnxruntime runs on CUDA first and CuPy is there to own it; host memory otherwise."""
    if not providers or providers[0] != "CUDAExecutionProvider":
        return HOST
    try:
        import cupy  # only where onnxruntime runs on CUDA
    except ImportError:
        return HOST
    return ArrayModule(cupy, "cuda", cupy.cuda.Device().id)
