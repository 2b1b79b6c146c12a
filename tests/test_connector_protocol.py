"""Every method of the KV connector protocol, on the null connector and the local tiered one."""

from __future__ import annotations

import numpy as np
import pytest

from tritongen.kv.connector import NOT_FOUND, CachePriority, KvCacheConnector, KvStoreEntry, chunk_keys
from tritongen.kv.local_tiered import LocalTieredConfig, LocalTieredConnector

SHAPE = (2, 2, 1, 4, 8)  # layers, k/v, kv heads, tokens, head dim
CHUNK_BYTES = int(np.prod(SHAPE)) * 4


def keys(n: int, model: str = "m@w"):
    return chunk_keys(model, 2, list(range(4 * n)), 4)


def kv(k: int) -> np.ndarray:
    return np.random.default_rng(k).standard_normal(SHAPE).astype(np.float32)


def tiered(tmp_path=None, cpu_chunks: int = 100) -> LocalTieredConnector:
    return LocalTieredConnector(LocalTieredConfig(cpu_max_bytes=cpu_chunks * CHUNK_BYTES, disk_path=tmp_path), "m@w")


def store(connector, key, k, priority=CachePriority.SESSION):
    connector.store(KvStoreEntry(key, kv(k), priority))
    connector.flush()


def test_null_connector_stores_nothing_and_is_healthy():
    null, (key,) = KvCacheConnector(), keys(1)
    null.store(KvStoreEntry(key, kv(0)))
    null.prefetch(key)
    null.pin(key)
    null.unpin(key)
    null.evict(key)
    assert null.lookup(key) is NOT_FOUND and null.lookup_batch([key, key]) == [NOT_FOUND, NOT_FOUND]
    assert null.fetch(key) is None
    assert null.health()
    caps = null.capabilities()
    assert not (caps.distributed or caps.prefetch or caps.pinnable) and caps.compression == []


def test_store_lookup_lookup_batch_and_fetch_round_trip():
    c = tiered()
    try:
        stored, missing = keys(3)[:2], keys(3, model="other@w")[2]
        for k, key in enumerate(stored):
            store(c, key, k)
        locations = c.lookup_batch([*stored, missing])
        assert [loc.tier for loc in locations] == ["cpu", "cpu", "not_found"]
        assert locations == [c.lookup(key) for key in [*stored, missing]]
        assert all(loc.size_bytes == CHUNK_BYTES and loc.estimated_load_ms > 0 for loc in locations[:2])
        fetched = c.fetch(stored[1])
        assert fetched.tier == "cpu" and np.array_equal(fetched.kv, kv(1))
        assert c.fetch(missing) is None
    finally:
        c.close()


def test_prefetch_promotes_a_disk_chunk_to_memory(tmp_path):
    (key,) = keys(1)
    first = tiered(tmp_path)
    store(first, key, 7)
    first.close()
    restarted = tiered(tmp_path)  # the CPU tier starts empty; the disk index is rebuilt
    try:
        assert restarted.capabilities().prefetch
        assert restarted.lookup(key).tier == "disk"
        restarted.prefetch(key)
        assert restarted.lookup(key).tier == "cpu"
        fetched = restarted.fetch(key)
        assert fetched.tier == "cpu" and np.array_equal(fetched.kv, kv(7))
    finally:
        restarted.close()


def test_a_pinned_chunk_survives_eviction_until_unpinned():
    c = tiered(cpu_chunks=2)
    try:
        pinned, *rest = keys(4)
        store(c, pinned, 0, CachePriority.OPPORTUNISTIC)  # first in line for eviction, were it not pinned
        c.pin(pinned)
        for k, key in enumerate(rest[:2], start=1):
            store(c, key, k)
        assert c.lookup(pinned).found and not c.lookup(rest[0]).found
        c.unpin(pinned)
        store(c, rest[2], 3)
        assert not c.lookup(pinned).found
    finally:
        c.close()


def test_evict_removes_a_chunk_from_both_tiers_and_its_file(tmp_path):
    c = tiered(tmp_path)
    try:
        key, other = keys(2)
        store(c, key, 0)
        store(c, other, 1)
        assert len(list(tmp_path.glob("*.kv"))) == 2
        c.evict(key)
        assert not c.lookup(key).found and c.fetch(key) is None
        assert [p.stem for p in tmp_path.glob("*.kv")] == [other.digest]
        assert c.lookup(other).found
    finally:
        c.close()


@pytest.mark.parametrize("with_disk", [False, True])
def test_health_follows_the_writer_thread_and_the_disk(tmp_path, with_disk):
    folder = tmp_path / "kv"
    c = tiered(folder if with_disk else None)
    assert c.health()
    caps = c.capabilities()
    assert caps.pinnable and not caps.distributed and caps.prefetch == with_disk and "zlib" in caps.compression
    c.close()
    assert not c.health()  # the writer is gone: stores would be lost
