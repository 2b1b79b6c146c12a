"""The memory-bandwidth bound on decode: each step reads every weight once, whatever the batch.

A row's fraction of that limit says how much of the machine a decoder uses, independent of how busy the
machine was, which the plain tok/s of two engines measured on a shared machine does not.
"""

from __future__ import annotations

import time

import numpy as np


def measure(mib: int = 256, repeats: int = 5) -> float:
    """Copy bandwidth in bytes/s (read + write counted), best of `repeats` copies of a `mib` MiB array."""
    src = np.ones(mib * 2**20 // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best


def limit_tps(weight_bytes: int, bandwidth: float, batch: int) -> float:
    """Bandwidth-bound tok/s: one step per weight read, `batch` tokens per step."""
    return batch * bandwidth / weight_bytes


def fraction(tps: float, weight_bytes: int, bandwidth: float, batch: int) -> float:
    return tps / limit_tps(weight_bytes, bandwidth, batch)
