"""The page pool is reserved when it is made, so no decode step pays first-touch page faults."""

from __future__ import annotations

from pathlib import Path

from tritongen.kv.page_pool import PagePool


def resident_kib() -> int:
    line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("VmRSS:"))
    return int(line.split()[1])


def test_pool_memory_is_resident_once_made():
    before = resident_kib()
    pool = PagePool(num_pages=256, page_size=16, num_layers=8, num_kv_heads=4, head_dim=64)  # 64 MiB
    grown = resident_kib() - before
    assert grown >= 0.9 * pool.data.nbytes / 1024, (grown, pool.data.nbytes)
    assert not pool.data.any()
