"""The redis connector against a real redis-server: chunks in the page dtype, checked, expiring, namespaced by
model and dtype, and a Redis that is down or stalled costs one short timeout, then a backoff."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tritongen.kv.chunk_bytes import chunk_nbytes, encode_chunk
from tritongen.kv.codec import codec
from tritongen.kv.connector import NOT_FOUND, KvStoreEntry, chunk_keys
from tritongen.kv.connector_config import RedisTierConfig
from tritongen.kv.page_pool import PagePool
from tritongen.kv.redis_record import unpack_record
from tritongen.kv.redis_tier import RedisTierConnector
from tritongen.triton.generator_settings import parse_settings

import redis_process
from redis_process import RedisProcess, free_port

server, redis_url = redis_process.server, redis_process.redis_url  # the shared redis-server fixtures

SHAPE = (2, 2, 3, 16, 8)  # layers, k/v, kv heads, tokens, head dim: one page


def keys(n: int = 2, model: str = "m@w"):
    return chunk_keys(model, SHAPE[0], list(range(16 * n)), 16)


def kv(seed: int = 0) -> np.ndarray:
    return (3 * np.random.default_rng(seed).standard_normal(SHAPE)).astype(np.float32)


def connector(url: str, dtype: str = "f32", **config) -> RedisTierConnector:
    return RedisTierConnector(RedisTierConfig(url=url, **config), "m@w", dtype)


def stored(c: RedisTierConnector, key, seed: int = 0) -> None:
    c.store(KvStoreEntry(key, kv(seed)))
    c.flush()


@pytest.mark.parametrize("dtype", ["f32", "f16", "int8", "fp8_e4m3fn"])
def test_a_chunk_is_stored_in_the_page_dtype_and_fetched_as_the_page_store_gives_it(redis_url, server, dtype):
    c = connector(redis_url, dtype)
    try:
        key = keys(1)[0]
        stored(c, key)
        shape, payload = unpack_record(server.client.get(c.name(key)), key, dtype)
        kv_codec = codec(dtype)
        assert shape == list(SHAPE) and bytes(payload) == encode_chunk(kv_codec, kv())
        assert len(payload) == chunk_nbytes(kv_codec, SHAPE)  # int8 and fp8: a byte per value plus the scales
        if dtype == "f16":
            assert bytes(payload) == kv().astype("<f2").tobytes()
        pool = PagePool(1, SHAPE[3], SHAPE[0], SHAPE[2], SHAPE[4], dtype)
        pool.write(0, kv())
        location = c.lookup(key)
        assert location.tier == "redis" and location.size_bytes == server.client.strlen(c.name(key))
        fetched = c.fetch(key)
        assert fetched.tier == "redis" and np.array_equal(fetched.kv, pool.read(0, SHAPE[3]))
    finally:
        c.close()


def test_every_value_expires_and_a_fetch_renews_it(redis_url, server):
    c = connector(redis_url, ttl_seconds=100)
    try:
        key = keys(1)[0]
        stored(c, key)
        assert 0 < server.client.ttl(c.name(key)) <= 100
        server.client.expire(c.name(key), 5)
        assert c.fetch(key) is not None and server.client.ttl(c.name(key)) > 5
    finally:
        c.close()


@pytest.mark.parametrize("damage", ["flipped bit", "truncated"])
def test_a_corrupt_value_is_dropped_and_reported_missing(redis_url, server, damage):
    c = connector(redis_url)
    try:
        key, other = keys(2)
        stored(c, key)
        stored(c, other, 1)
        value = bytearray(server.client.get(c.name(key)))
        if damage == "flipped bit":
            value[len(value) // 2] ^= 0x10
        else:
            del value[-100:]
        server.client.set(c.name(key), bytes(value))
        assert c.lookup(key).found and c.fetch(key) is None
        assert c.stats["corrupt_dropped"] == 1 and not server.client.exists(c.name(key))  # deleted, for every replica
        assert np.array_equal(c.fetch(other).kv, kv(1))
    finally:
        c.close()


def test_no_other_model_or_dtype_reads_a_chunk_even_copied_under_its_name(redis_url, server):
    mine, theirs, int8 = (connector(redis_url),
                          RedisTierConnector(RedisTierConfig(url=redis_url), "other@w", "f32"),
                          connector(redis_url, "int8"))
    try:
        key = keys(1)[0]
        their_key = keys(1, model="other@w")[0]  # the same tokens, another model
        stored(mine, key)
        assert theirs.lookup(their_key) is NOT_FOUND and int8.lookup(key) is NOT_FOUND
        value = server.client.get(mine.name(key))
        server.client.set(theirs.name(their_key), value)  # forged: the right name, another model's header
        server.client.set(int8.name(key), value)
        assert theirs.fetch(their_key) is None and int8.fetch(key) is None
        assert theirs.stats["corrupt_dropped"] == int8.stats["corrupt_dropped"] == 1
        assert mine.fetch(key) is not None
    finally:
        for c in (mine, theirs, int8):
            c.close()


def test_a_value_over_max_bytes_is_neither_written_nor_offered(redis_url, server):
    bound = chunk_nbytes(codec("f32"), SHAPE)  # the payload fits, the record (with its header) does not
    small, big = connector(redis_url, max_bytes=bound), connector(redis_url)
    try:
        key = keys(1)[0]
        stored(small, key)
        assert small.stats["too_large"] == 1 and not server.client.exists(small.name(key))
        stored(big, key)
        assert big.lookup(key).found and small.lookup(key) is NOT_FOUND and big.fetch(key) is not None
    finally:
        small.close()
        big.close()


def test_lookup_batch_asks_for_a_whole_prompt_at_once(redis_url):
    c = connector(redis_url)
    try:
        first, second, third = keys(3)
        stored(c, first)
        stored(c, third)
        assert [loc.tier for loc in c.lookup_batch([first, second, third])] == ["redis", "not_found", "redis"]
        assert c.lookup_batch([]) == [] and c.capabilities().distributed
    finally:
        c.close()


def test_redis_down_costs_one_error_then_nothing_until_the_backoff_passes(tmp_path):
    port = free_port()
    c = connector(f"redis://127.0.0.1:{port}/0")
    try:
        key = keys(1)[0]
        assert c.health() and c.lookup(key) is NOT_FOUND and c.stats["errors"] == 1
        assert not c.health()
        assert c.lookup(key) is NOT_FOUND and c.fetch(key) is None
        c.store(KvStoreEntry(key, kv()))
        assert c.stats == {**c.stats, "errors": 1, "skipped": 2, "store_dropped": 1}  # no second network try
        server = RedisProcess(tmp_path, port)  # Redis comes up: after the backoff the connector uses it
        try:
            while not c.health():
                time.sleep(0.05)
            stored(c, key)
            assert c.fetch(key) is not None and c.stats["stored"] == 1
        finally:
            server.stop()
    finally:
        c.close()


def test_a_stalled_redis_times_out_once_then_is_skipped(redis_url, server):
    c = connector(redis_url, timeout_ms=50)
    try:
        key = keys(1)[0]
        stored(c, key)
        server.pause()  # accepts connections, answers nothing
        try:
            assert c.fetch(key) is None and c.stats["errors"] == 1
            assert c.lookup(key) is NOT_FOUND and c.stats["errors"] == 1 and c.stats["skipped"] == 1
        finally:
            server.resume()
        while not c.health():
            time.sleep(0.05)
        assert np.array_equal(c.fetch(key).kv, kv())
    finally:
        c.close()


def test_the_generator_parameters_configure_the_redis_tier(tmp_path):
    params = {"kv_connector": "redis", "kv_connector_redis_url": "redis://10.0.0.5:6380/2",
              "kv_connector_redis_ttl_seconds": "60", "kv_connector_redis_max_bytes": "1048576",
              "kv_connector_redis_timeout_ms": "20"}
    config = parse_settings(params, tmp_path).engine.kv_connector
    assert (config.backend, config.redis) == ("redis", RedisTierConfig("redis://10.0.0.5:6380/2", 60, 1 << 20, 20))
    assert parse_settings({"kv_connector": "redis"}, tmp_path).engine.kv_connector.redis == RedisTierConfig()
    for key, value in (("kv_connector_redis_url", "http://127.0.0.1:6379"), ("kv_connector_redis_ttl_seconds", "0"),
                       ("kv_connector_redis_timeout_ms", "-1")):
        with pytest.raises(ValueError, match="kv_connector_redis"):
            parse_settings({**params, key: value}, tmp_path)
