"""Two tritonservers (replicas A and B of SmolLM2, kv_connector=redis) on one real redis-server: B answers a
448-token prompt A served first from the KV A left in Redis, with A's tokens, in a fraction of its cold time to
first token; and with redis-server killed mid-run every request of both still answers, with the right tokens."""

from __future__ import annotations

import queue
import re
import statistics
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritongen.runtime.tokenizer import TextTokenizer

from redis_process import RedisProcess
from triton_helpers import NO_HEADS, is_final, scrape, small_repository, start_server, stop_server, tensor

pytestmark = pytest.mark.server

PROMPT_TOKENS = 448
NEW_TOKENS = 8
PAIRS = 5  # warm and cold prompts, alternating which goes first
WORDS = ("river market engine garden letter window signal harbor winter museum circuit village ledger "
         "lantern meadow archive compass orchard violin quarry").split()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    process = RedisProcess(tmp_path_factory.mktemp("redis"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def replicas(redis_server, target_gqa_folder, tmp_path_factory):
    root = tmp_path_factory.mktemp("replicas")
    params = {**NO_HEADS, "kv_connector": "redis", "kv_connector_redis_url": redis_server.url}
    repositories = [small_repository(root / name, **params) for name in ("a", "b")]
    servers = [start_server(r, r.parent / f"{r.name}.log") for r in repositories]
    yield servers
    for server in servers:
        stop_server(server)


@pytest.fixture(scope="module")
def prompts(target_gqa_folder):
    """Distinct 448-token prompts of plain sentences (they differ from their first tokens on)."""
    tokenizer = TextTokenizer(target_gqa_folder)

    def make(seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        sentences = [f"Note {seed}-{n}: the {rng.choice(WORDS)} beside the {rng.choice(WORDS)} was moved to "
                     f"the {rng.choice(WORDS)} on day {rng.integers(1, 300)}." for n in range(80)]
        ids = tokenizer.encode(f"Report {seed}. " + " ".join(sentences))
        assert len(ids) >= PROMPT_TOKENS
        return ids[:PROMPT_TOKENS]

    return make


def first_token_time(server, ids: list[int], on_first_token=None) -> tuple[float, list[int]]:
    """Seconds to the first streamed token, and every generated id; `on_first_token` runs as it arrives."""
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((time.perf_counter(), result, error)))
    inputs = [tensor("input_ids", np.array(ids, np.int64)), tensor("max_tokens", np.array([NEW_TOKENS], np.int32)),
              tensor("ignore_eos", np.array([True])), tensor("stream", np.array([True]))]
    try:
        start = time.perf_counter()
        client.async_stream_infer("generator", inputs)
        first, out = None, []
        while True:
            at, result, error = events.get(timeout=120)
            assert error is None, f"{error.status()}: {error.message()}" if error is not None else ""
            tokens = result.as_numpy("output_ids").tolist()
            if tokens and first is None:
                first = at - start
                if on_first_token is not None:
                    on_first_token()
            out += tokens
            if is_final(result):
                assert first is not None
                return first, out
    finally:
        client.stop_stream()
        client.close()


def wait_for_values(redis_server, count: int) -> None:
    """Stores run on each replica's writer thread: wait until Redis holds `count` chunks."""
    deadline = time.monotonic() + 60
    while redis_server.client.dbsize() < count:
        assert time.monotonic() < deadline, f"{redis_server.client.dbsize()} chunks in Redis, waiting for {count}"
        time.sleep(0.02)


def test_replica_b_answers_a_prefix_a_served_from_redis_faster_with_a_s_tokens(replicas, redis_server, prompts):
    a, b = replicas
    redis_server.client.flushall()
    for server, seed in ((a, 900), (b, 901)):  # first requests pay one-time costs: neither side is measured
        first_token_time(server, prompts(seed))
    chunks = 4  # 256 + 192 tokens per prompt, for the two warm-ups
    wait_for_values(redis_server, chunks)
    warm, cold = [], []
    for pair in range(PAIRS):
        warm_ids, cold_ids = prompts(100 + pair), prompts(200 + pair)
        _, tokens_on_a = first_token_time(a, warm_ids)
        chunks += 2
        wait_for_values(redis_server, chunks)
        for kind in (("warm", "cold") if pair % 2 == 0 else ("cold", "warm")):
            seconds, tokens = first_token_time(b, warm_ids if kind == "warm" else cold_ids)
            (warm if kind == "warm" else cold).append(seconds)
            if kind == "warm":
                assert tokens == tokens_on_a, f"pair {pair}: B's tokens from A's KV differ from A's"
        chunks += 2  # B stored its cold prompt
        wait_for_values(redis_server, chunks)
    ratio = statistics.median(warm) / statistics.median(cold)
    print(f"\nB's time to first token, {PROMPT_TOKENS}-token prompts, {PAIRS} alternating pairs: "
          f"from A's KV in Redis {[round(1000 * s, 1) for s in warm]} ms (median "
          f"{1000 * statistics.median(warm):.1f}), cold {[round(1000 * s, 1) for s in cold]} ms (median "
          f"{1000 * statistics.median(cold):.1f}); ratio {ratio:.3f}")
    assert scrape(b)["tritongen:kv_connector_events_total"] > 0
    assert ratio <= 0.35


def serve_all(server, prompt_ids: list[list[int]], on_first_token=None) -> list[list[int]]:
    """Every prompt at once, each on its own stream; `on_first_token` runs at the first token of any of them."""
    once = threading.Lock()

    def first() -> None:
        if on_first_token is not None and once.acquire(blocking=False):
            on_first_token()

    with ThreadPoolExecutor(len(prompt_ids)) as pool:
        return [tokens for _, tokens in pool.map(lambda ids: first_token_time(server, ids, first), prompt_ids)]


def serve_each(server, prompt_ids: list[list[int]]) -> list[list[int]]:
    """One prompt after another (concurrent prompts of this length prefill slower than in turn on two cores)."""
    return [first_token_time(server, ids)[1] for ids in prompt_ids]


def connector_events(server) -> dict[str, float]:
    """tritongen:kv_connector_events_total by event."""
    with urllib.request.urlopen(server.url_metrics, timeout=10) as r:
        lines = r.read().decode().splitlines()
    found = (re.match(r'tritongen:kv_connector_events_total\{.*event="(\w+)".*\} (\S+)$', ln) for ln in lines)
    return {m.group(1): float(m.group(2)) for m in found if m}


def test_redis_killed_mid_run_every_request_still_answers_with_the_right_tokens(replicas, redis_server, prompts):
    a, b = replicas
    redis_server.client.flushall()
    served, fresh = [prompts(300 + k) for k in range(4)], [prompts(400 + k) for k in range(2)]
    on_a = serve_each(a, served)  # computed on A, stored in Redis
    wait_for_values(redis_server, 2 * len(served))
    before = connector_events(b)
    killed = threading.Event()

    def kill() -> None:
        redis_server.kill()
        killed.set()

    with ThreadPoolExecutor(2) as pool:
        # B fetches A's KV and redis-server dies at B's first token, while A computes new prompts to store.
        early = pool.submit(serve_all, b, served[:2], kill)
        fresh_on_a = pool.submit(serve_each, a, fresh)
        assert killed.wait(120)
        late = serve_each(b, served[2:])  # Redis is gone: B prefills
        assert early.result() + late == on_a
        fresh_tokens = fresh_on_a.result()
    assert serve_each(b, fresh) == fresh_tokens
    after = connector_events(b)
    grew = {event: after[event] - before[event] for event in ("hit_redis", "unavailable")}
    print(f"\nredis-server killed at B's first token: all {len(served)} of A's prompts on B and {len(fresh)} new ones "
          f"on each replica answered, B's tokens equal to A's; B's events meanwhile: {grew}")
    assert grew["hit_redis"] >= 2 and grew["unavailable"] >= 1
