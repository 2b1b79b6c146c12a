"""tritongen behind NVIDIA Dynamo, as `make serve-dynamo` runs it: two Triton servers, a worker each, Dynamo's frontend
with its KV router. Dynamo's frontend renders the chat and tokenizes it, the worker sends token ids to the generator:
the answer is the Triton path's, token for token; a client that goes away cancels its generator stream; and every
socket the cluster listens on is a loopback one."""

from __future__ import annotations

import json
import socket
import time

import numpy as np
import pytest

from tritongen.dynamo.cluster import Cluster, ClusterOptions

from conftest import foreign_folder
from dynamo_helpers import descendants, listening, needs_dynamo, post, scrape_prometheus
from triton_helpers import cancelled_counts, grpc_request, later, text, wait_idle

pytestmark = [pytest.mark.server, needs_dynamo]
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
LOOPBACK = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")


@pytest.fixture(scope="module")
def cluster():
    running = Cluster(ClusterOptions(replicas=2, http_port=0)).start()
    yield running
    later(running.stop)


def test_a_chat_through_dynamo_answers_with_the_tokens_of_the_triton_path(cluster):
    answer = post(cluster, "/v1/chat/completions", {
        "model": "generator", "messages": CHAT, "temperature": 0, "max_tokens": 32,
        "nvext": {"extra_fields": ["completion_token_ids"]}})
    content = answer["choices"][0]["message"]["content"]
    assert "Paris" in content, content
    direct = grpc_request(cluster.replicas[0].server, {
        "messages": text(json.dumps(CHAT)), "temperature": np.array([0], np.float32),
        "max_tokens": np.array([32], np.int32), "stream": np.array([True])})
    ids = [int(t) for result, _ in direct for t in result.as_numpy("output_ids")]
    assert answer["nvext"]["completion_token_ids"] == ids
    assert answer["usage"]["prompt_tokens"] == int(direct[0][0].as_numpy("num_input_tokens")[0])
    assert answer["choices"][0]["finish_reason"] == "stop"


def open_stream(cluster) -> socket.socket:
    """A streamed chat of up to 1000 tokens through the frontend, after its first few events."""
    body = json.dumps({"model": "generator", "messages": CHAT, "max_tokens": 1000, "ignore_eos": True,
                       "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", cluster.http_port), timeout=60)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while got.count(b"data:") < 3:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    return sock


def test_a_client_that_disconnects_cancels_its_generator_stream(cluster):
    before = [len(cancelled_counts(r.server)) for r in cluster.replicas]
    open_stream(cluster).close()
    deadline = time.monotonic() + 30
    while [len(cancelled_counts(r.server)) for r in cluster.replicas] == before:
        assert time.monotonic() < deadline, "no generator logged a cancelled request"
        time.sleep(0.1)
    stopped_after = [n for r, seen in zip(cluster.replicas, before) for n in cancelled_counts(r.server)[seen:]]
    print(f"\ncancelled after {stopped_after} of 1000 tokens")
    assert len(stopped_after) == 1 and stopped_after[0] < 1000
    for replica in cluster.replicas:
        wait_idle(replica.server, timeout=10)  # nothing keeps generating for the client that left


def test_every_socket_of_the_cluster_listens_on_loopback(cluster):
    named = {p.pid: p.name for p in cluster.processes()}
    named.update({r.server.process.pid: f"tritonserver {i}" for i, r in enumerate(cluster.replicas)})
    pids = descendants(list(named))
    sockets = listening(pids)
    print("\nlistening sockets:", {named.get(pid, f"child {pid}"): found for pid, found in sockets.items() if found})
    assert all(address.startswith(LOOPBACK) for found in sockets.values() for address in found), sockets
    # Each piece listens somewhere (so the check above saw them): frontend, workers, nats-server, the servers,
    # and their generators' KV event sockets (in the python backend stubs).
    assert all(sockets[pid] for pid in named), {named[pid]: sockets[pid] for pid in named}
    stubs = [pid for pid in pids if pid not in named and sockets[pid]]
    assert len(stubs) >= len(cluster.replicas)


def test_the_generators_load_reaches_dynamo(cluster):
    """The worker relays the generator's KV pages in use as Dynamo's per-worker cache usage (the router's load)."""
    def usage() -> list[float]:
        return [scrape_prometheus(r.url_worker_metrics).get("dynamo_component_gpu_cache_usage_percent", 0.0)
                for r in cluster.replicas]

    sock = open_stream(cluster)
    try:
        deadline = time.monotonic() + 10
        while max(usage()) == 0:
            assert time.monotonic() < deadline, "no worker reported its generator's KV pages in use"
            time.sleep(0.2)
        total = [scrape_prometheus(r.url_worker_metrics)["dynamo_component_total_blocks"] for r in cluster.replicas]
        assert total == [1024, 1024]  # the generator's num_gpu_pages, as registered
    finally:
        sock.close()


def test_a_builder_folder_without_config_json_is_served_through_its_model_card():
    """onnxruntime-genai's builder writes genai_config.json, no config.json: the frontend reads a derived card."""
    folder = foreign_folder("smollm2-genai-int4")
    single = Cluster(ClusterOptions(replicas=1, repository=folder, http_port=0)).start()
    try:
        answer = post(single, "/v1/chat/completions", {"model": "generator", "messages": CHAT, "temperature": 0,
                                                       "max_tokens": 32})
    finally:
        later(single.stop)
    assert (single.workdir / "model_card" / "config.json").is_file()
    assert "Paris" in answer["choices"][0]["message"]["content"], answer
