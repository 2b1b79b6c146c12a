"""Engines sharing one real redis-server: a replica fetches the pages another computed and answers with the
tokens recomputing gives; every full page of a prompt is stored; a Redis that is down at start or killed
mid-run costs prefill, never an error or a wrong token."""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.kv.connector_config import KvConnectorConfig, RedisTierConfig

import redis_process
from redis_process import RedisProcess, free_port

server, redis_url = redis_process.server, redis_process.redis_url  # the shared redis-server fixtures

PAGE = 16
# Fixed as a real model's cost (SmolLM2 measures ~0.8 ms per token on 2 cores): the tiny model prefills about as
# fast as Redis answers, which would make the fetch-or-recompute choice depend on machine load.
REAL_MODEL_RECOMPUTE_MS = 1.0


def prompt(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 300, n)]


def greedy(ids: list[int], tokens: int = 8) -> GenerateRequest:
    return GenerateRequest(ids, GenerateOptions(max_new_tokens=tokens, stop_on_eos=False))


def replica(folder, url: str, chunk: int = 256, dtype: str = "f32") -> Engine:
    connector = KvConnectorConfig("redis", chunk_size=chunk, recompute_ms_per_token=REAL_MODEL_RECOMPUTE_MS,
                                  redis=RedisTierConfig(url=url))
    return Engine(folder, EngineConfig(page_size=PAGE, max_model_len=512, kv_cache_dtype=dtype,
                                       kv_connector=connector, pin_threads=False))


@pytest.fixture(scope="module")
def recomputed(tiny_folder):
    """Token ids with no connector, by (seed, length)."""
    plain = Engine(tiny_folder, EngineConfig(page_size=PAGE, max_model_len=512, pin_threads=False))
    try:
        cases = [(1, 448), (2, 200), *((seed, 100) for seed in range(10, 18))]
        return {case: plain.generate(greedy(prompt(*case))).token_ids for case in cases}
    finally:
        plain.close()


def test_a_second_replica_fetches_every_page_the_first_computed(tiny_folder, redis_url, recomputed):
    a, b = replica(tiny_folder, redis_url), replica(tiny_folder, redis_url)
    try:
        ids = prompt(1, 448)
        assert a.generate(greedy(ids)).token_ids == recomputed[(1, 448)]
        a.connector.flush()
        # The default 256-token chunk and a 192-token last chunk of whole pages: all 28 pages reach Redis.
        assert a.kv.connector_stats["stored_chunks"] == 2 and a.connector.stats["stored"] == 2
        out = b.generate(greedy(ids))
        assert out.token_ids == recomputed[(1, 448)]
        assert b.kv.connector_stats["hit_redis"] == 2 and out.prefix_cache_hit_len == 448 - PAGE  # one page computed
        b.connector.flush()
        assert b.kv.connector_stats["stored_chunks"] == 0  # what it fetched is not written back
    finally:
        a.close()
        b.close()


def test_at_page_granularity_a_replica_shares_any_common_prefix(tiny_folder, redis_url, recomputed):
    a, b = replica(tiny_folder, redis_url, chunk=PAGE), replica(tiny_folder, redis_url, chunk=PAGE)
    try:
        a.generate(greedy(prompt(1, 448)))
        a.connector.flush()
        assert a.connector.stats["stored"] == 448 // PAGE
        shared = prompt(1, 448)[:200]  # the first 200 tokens of A's prompt, then B's own
        ids = shared + prompt(2, 200)[200 - 77:]
        out = b.generate(greedy(ids))
        assert out.prefix_cache_hit_len == 200 // PAGE * PAGE and b.kv.connector_stats["hit_redis"] == 200 // PAGE
        c = Engine(tiny_folder, EngineConfig(page_size=PAGE, max_model_len=512, pin_threads=False))
        try:
            assert out.token_ids == c.generate(greedy(ids)).token_ids
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_an_int8_replica_fetches_what_its_own_page_store_would_give(tiny_folder, redis_url):
    a, b = replica(tiny_folder, redis_url, dtype="int8"), replica(tiny_folder, redis_url, dtype="int8")
    ids = prompt(1, 448)
    try:
        a.generate(greedy(ids))
        a.connector.flush()
        assert a.connector.stats["bytes_stored"] < 448 * a.pool.bytes_per_token * 1.01  # int8 bytes, not f32's
        fetched = b.generate(greedy(ids))
        reused = a.generate(greedy(ids))  # A's second run: the same prefix from its int8 page store
        assert b.kv.connector_stats["hit_redis"] == 2 and fetched.prefix_cache_hit_len == reused.prefix_cache_hit_len
        assert fetched.token_ids == reused.token_ids
    finally:
        a.close()
        b.close()


def test_redis_down_at_start_costs_prefill_only(tiny_folder, recomputed):
    e = replica(tiny_folder, f"redis://127.0.0.1:{free_port()}/0")
    try:
        for seed in (10, 11):
            assert e.generate(greedy(prompt(seed, 100))).token_ids == recomputed[(seed, 100)]
        assert e.alive and e.connector.stats["errors"] >= 1 and e.kv.connector_stats["hit_redis"] == 0
        assert e.kv.connector_stats["unavailable"] >= 1
    finally:
        e.close()


def test_redis_killed_mid_run_every_request_still_answers_correctly(tiny_folder, tmp_path, recomputed):
    server = RedisProcess(tmp_path)
    warm, e = replica(tiny_folder, server.url, chunk=32), replica(tiny_folder, server.url, chunk=32)
    try:
        seeds = range(10, 18)
        for seed in seeds:  # another replica's pages for every prompt: e fetches until Redis dies
            warm.generate(greedy(prompt(seed, 100)))
        warm.connector.flush()
        done: queue.Queue = queue.Queue()
        killed = threading.Event()

        def on_token(token) -> None:
            if not killed.is_set():
                server.kill()  # on the engine thread, at the first token, with other requests running
                killed.set()

        def submit(seed: int) -> None:
            e.submit(greedy(prompt(seed, 100), tokens=12), on_token=on_token if seed == seeds[0] else None,
                     on_done=lambda result, error: done.put((seed, result, error)))

        for seed in seeds[:4]:
            submit(seed)
        assert killed.wait(60)
        for seed in seeds[4:]:  # these find Redis gone
            submit(seed)
        answers = [done.get(timeout=120) for _ in seeds]
        assert all(error is None for _, _, error in answers), answers
        assert {seed: result.token_ids[:8] for seed, result, _ in answers} == {s: recomputed[(s, 100)] for s in seeds}
        assert server.process.poll() is not None and e.connector.stats["errors"] >= 1
        assert e.kv.connector_stats["hit_redis"] >= 1  # it did fetch before the kill
    finally:
        warm.close()
        e.close()
        server.stop()
