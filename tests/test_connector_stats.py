"""Connector statistics under threads: the store writer and several callers add at once, and the counts add up.

The interpreter is made to switch threads as often as it can, and a watcher takes snapshots throughout: every
snapshot must show a stored chunk together with its bytes, and the final counts must account for every call.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from tritongen.kv.connector import KvStoreEntry, chunk_keys
from tritongen.kv.counters import Counters
from tritongen.kv.local_tiered import LocalTieredConfig, LocalTieredConnector

THREADS, EACH = 8, 400
ADDS = 4000  # per thread: with the lock removed, a torn snapshot shows in most runs
SHAPE = (1, 2, 1, 4, 2)  # layers, k/v, kv heads, tokens, head dim: small, so the writer's queue fills
CHUNK_BYTES = int(np.prod(SHAPE)) * 4


@pytest.fixture(autouse=True)
def switch_often():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def hammer(work, snapshot, consistent) -> list[dict[str, int]]:
    """Run `work(thread)` on THREADS threads at once while a watcher snapshots; the snapshots that were torn."""
    done, torn, go = threading.Event(), [], threading.Barrier(THREADS + 1)

    def watch():
        go.wait()
        while not done.is_set():
            seen = snapshot()
            if not consistent(seen):
                torn.append(seen)

    def run(thread):
        go.wait()
        work(thread)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    watcher = threading.Thread(target=watch)
    for t in [watcher, *threads]:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    return torn


def test_counters_lose_no_add_and_show_paired_counts_together():
    counts = Counters("stored", "bytes_stored", "dropped")

    def work(thread):
        for _ in range(ADDS):
            counts.add(stored=1, bytes_stored=CHUNK_BYTES)
            counts.add(dropped=1)

    torn = hammer(work, counts.snapshot, lambda s: s["bytes_stored"] == CHUNK_BYTES * s["stored"])
    assert torn == []
    assert counts.snapshot() == {"stored": THREADS * ADDS, "bytes_stored": THREADS * ADDS * CHUNK_BYTES,
                                 "dropped": THREADS * ADDS}


def test_counters_refuse_a_name_they_do_not_hold():
    with pytest.raises(KeyError):
        Counters("stored").add(sotred=1)


def test_local_tiered_counts_every_store_once_under_concurrent_callers():
    connector = LocalTieredConnector(LocalTieredConfig(cpu_max_bytes=64 * CHUNK_BYTES), "m@w")
    kv = np.ones(SHAPE, np.float32)

    def work(thread):
        for key in chunk_keys(f"m{thread}@w", 1, list(range(4 * EACH)), 4):
            connector.store(KvStoreEntry(key, kv))  # queued for the writer, or dropped here when the queue is full
            if connector.lookup(key).found:
                connector.fetch(key)

    try:
        torn = hammer(work, lambda: connector.stats, lambda s: s["bytes_stored"] == CHUNK_BYTES * s["stored"])
        connector.flush()
        stats = connector.stats
    finally:
        connector.close()
    assert torn == []
    assert stats["stored"] + stats["store_dropped"] == THREADS * EACH and stats["stored"] > 0
    assert stats["bytes_stored"] == CHUNK_BYTES * stats["stored"]
