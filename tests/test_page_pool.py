"""The page pool is reserved when it is made, so no decode step pays first-touch page faults."""

from __future__ import annotations

import subprocess
import sys

# In a fresh interpreter: a long-lived one may hand the pool memory that earlier work left resident.
PROBE = """
from pathlib import Path
from tritongen.kv.page_pool import PagePool

def resident_kib():
    line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("VmRSS:"))
    return int(line.split()[1])

before = resident_kib()
pool = PagePool(num_pages=256, page_size=16, num_layers=8, num_kv_heads=4, head_dim=64)
print(resident_kib() - before, pool.data.nbytes // 1024, int(pool.data.any()))
"""


def test_pool_memory_is_resident_once_made():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    grown, size, nonzero = map(int, out.split())
    assert size == 64 * 1024
    assert grown >= 0.9 * size, (grown, size)
    assert nonzero == 0
