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


class HostKvRefused(RuntimeError):
    """onnxruntime runs on CUDA but the KV could only live in host memory, and the operator did not allow it."""


def array_module(providers: list[str], allow_host_kv: bool = False) -> ArrayModule:
    """CUDA memory when onnxruntime runs on CUDA first and CuPy is there to own it; host memory on CPU.

    On CUDA without CuPy the buffers could only be host memory, which every step would copy to the GPU and
    back: that is refused unless `allow_host_kv` (the generator setting of that name) says the operator wants it.
    """
    if not providers or providers[0] != "CUDAExecutionProvider":
        return HOST
    try:
        import cupy  # only where onnxruntime runs on CUDA
    except ImportError:
        if allow_host_kv:
            return HOST
        raise HostKvRefused(
            "onnxruntime runs on CUDAExecutionProvider but CuPy is not installed, so the KV buffers would be host "
            "memory copied to the GPU and back at every step: install CuPy for this CUDA (cupy-cuda13x, as "
            "docker/requirements.txt pins it), or set the generator parameter allow_host_kv to true to run so"
        ) from None
    return ArrayModule(cupy, "cuda", cupy.cuda.Device().id)


def placement(arrays: ArrayModule) -> str:
    """Where the running batch's KV lives, for the load log."""
    if arrays.device == "cuda":
        return f"running-batch KV on cuda:{arrays.device_id} (CuPy)"
    return "running-batch KV in host memory"
