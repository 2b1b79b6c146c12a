"""Dynamo's KV router over two tritongen replicas, fed by the generators' own KV events (relayed by each worker):
repeats of a prefix go to the replica that holds it (round-robin measured beside it, for comparison), and a prefix
a generator evicted stops attracting requests to it (its BlockRemoved reached the router). Which replica served a
request is read off the generators' own counters; requests go one at a time."""

from __future__ import annotations

import random
import re
import time
import urllib.request

import numpy as np
import pytest

from tritongen.dynamo.cluster import Cluster, ClusterOptions

from dynamo_helpers import finished, needs_dynamo, post, served_by
from triton_helpers import grpc_request, later

pytestmark = [pytest.mark.server, needs_dynamo]
PAGE = 16
PREFIX_PAGES = 28  # 448 tokens
PREFIXES, REPEATS = 8, 8


def random_tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1000, 40000) for _ in range(n)]


def complete(cluster: Cluster, prompt: list[int]) -> tuple[int, int]:
    """(the replica that served this token prompt, the prompt tokens its generator reused)."""
    before = finished(cluster)
    answer = post(cluster, "/v1/completions", {"model": "generator", "prompt": prompt, "max_tokens": 1,
                                               "temperature": 0})
    return served_by(cluster, before), answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def routing(router_mode: str, prompts: list[tuple[int, list[int]]]) -> tuple[float, float]:
    """(share of repeats served by the replica that served the prefix first, share that reused the prefix's KV)."""
    cluster = Cluster(ClusterOptions(replicas=2, http_port=0, router_mode=router_mode)).start()
    holder: dict[int, int] = {}
    same = reused = 0
    try:
        for prefix, prompt in prompts:
            replica, cached = complete(cluster, prompt)
            if prefix not in holder:
                holder[prefix] = replica
                continue
            same += replica == holder[prefix]
            reused += cached >= PREFIX_PAGES * PAGE
    finally:
        later(cluster.stop)
    repeats = len(prompts) - len(holder)
    print(f"\n{router_mode}: first requests per replica {[list(holder.values()).count(i) for i in range(2)]}")
    return same / repeats, reused / repeats


def test_the_kv_router_sends_repeats_of_a_prefix_to_the_replica_that_holds_it():
    rng = random.Random(7)
    prefixes = [random_tokens(rng, PREFIX_PAGES * PAGE) for _ in range(PREFIXES)]
    prompts = [(p, prefixes[p] + random_tokens(rng, 8)) for p in range(PREFIXES) for _ in range(REPEATS)]
    rng.shuffle(prompts)
    kv = routing("kv", prompts)
    round_robin = routing("round-robin", prompts)
    print(f"\nof {PREFIXES * (REPEATS - 1)} repeats of {PREFIXES} prefixes of {PREFIX_PAGES * PAGE} tokens: "
          f"KV router {kv[0]:.0%} on the first holder ({kv[1]:.0%} reused the prefix's KV), "
          f"round-robin {round_robin[0]:.0%} ({round_robin[1]:.0%})")
    assert kv[0] >= 0.95
    assert kv[0] > round_robin[0]


def direct(cluster: Cluster, replica: int, prompt: list[int]) -> None:
    """One request straight to a replica's Triton server, past the router."""
    got = grpc_request(cluster.replicas[replica].server, {"input_ids": np.array(prompt, np.int64),
                                                          "max_tokens": np.array([1], np.int32)})
    assert got[-1][1] is None, got[-1][1]


def test_a_prefix_the_generator_evicted_stops_attracting_requests():
    """Replica X holds prefix A, then evicts it (other prompts fill its small page pool); Y holds A's first half.
    Had X's BlockRemoved not reached the router, it would still score X's whole A above Y's half."""
    rng = random.Random(11)
    prefix = random_tokens(rng, PREFIX_PAGES * PAGE)
    options = ClusterOptions(replicas=2, http_port=0, generator_params={"num_gpu_pages": "64",
                                                                         "max_model_len": "1024"})
    cluster = Cluster(options).start()
    try:
        x, _ = complete(cluster, prefix + random_tokens(rng, 8))
        y = 1 - x
        for _ in range(3):  # 3 x 29 pages through a pool of 64: A's pages are evicted
            direct(cluster, x, random_tokens(rng, PREFIX_PAGES * PAGE + 8))
        half = PREFIX_PAGES // 2 * PAGE
        direct(cluster, y, prefix[:half] + random_tokens(rng, 8))
        time.sleep(1)  # the KV events travel worker -> NATS -> router
        removed = events_applied(cluster, "removed")
        replica, cached = complete(cluster, prefix + random_tokens(rng, 8))
    finally:
        later(cluster.stop)
    assert removed > 0, "the router applied no BlockRemoved"
    assert (replica, cached) == (y, half)


def events_applied(cluster: Cluster, kind: str) -> float:
    """KV events of this kind the frontend's router applied (its dynamo_component_kv_cache_events_applied)."""
    with urllib.request.urlopen(cluster.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    pattern = r'^dynamo_component_kv_cache_events_applied\{[^}]*event_type="%s",status="ok"[^}]*\} (\S+)$' % kind
    return sum(float(v) for v in re.findall(pattern, text, re.M))
