"""The page pool is reserved when it is made, so no decode step pays first-touch page faults."""

from __future__ import annotations

import subprocess
import sys

from triton_helpers import rss_kib

# A fresh interpreter: a long-lived one may hand the pool memory that earlier work left resident.
CHILD = """
import sys
from tritongen.kv.page_pool import PagePool
print(flush=True); sys.stdin.readline()
pool = PagePool(num_pages=256, page_size=16, num_layers=8, num_kv_heads=4, head_dim=64)
print(pool.data.nbytes // 1024, int(pool.data.any()), flush=True); sys.stdin.readline()
"""


def test_pool_memory_is_resident_once_made():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()
        before = rss_kib(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
        size, nonzero = map(int, child.stdout.readline().split())
        grown = rss_kib(child.pid) - before
        child.stdin.write("\n")
        child.stdin.flush()
    finally:
        child.communicate(timeout=30)
    assert size == 64 * 1024
    assert grown >= 0.9 * size, (grown, size)
    assert nonzero == 0
