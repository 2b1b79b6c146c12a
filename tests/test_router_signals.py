"""What a KV-aware router reads of a running server: the generator's KV events on its ZMQ endpoint and the
load gauges on Triton's metrics port (ours and vLLM's names), with the real tritonserver and SmolLM2."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest

from tritongen.serve import free_port

from kv_event_listener import Listener, decode_llmd, stored_blocks
from triton_helpers import I32, I64, grpc_request, small_repository, start_server, stop_server_later, wait_idle

pytestmark = pytest.mark.server
PROMPT = [1 + (i * 37) % 40000 for i in range(448)]


@pytest.fixture(scope="module")
def evented_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("router_signals")
    endpoint, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    repository = small_repository(tmp / "repo", kv_events_endpoint=endpoint, kv_events_replay_endpoint=replay,
                                  num_gpu_pages="256", max_num_seqs="8")
    server = start_server(repository, tmp / "server.log")
    yield server, endpoint
    stop_server_later(server)


def metric_lines(server) -> dict[str, list[tuple[str, float]]]:
    """name -> (labels, value) for every sample of the metrics page."""
    with urllib.request.urlopen(server.url_metrics, timeout=10) as r:
        text = r.read().decode()
    samples: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        match = re.match(r"^([a-z_:]+)(\{[^}]*\})? (\S+)$", line)
        if match:
            samples.setdefault(match.group(1), []).append((match.group(2) or "", float(match.group(3))))
    return samples


def value(samples, name: str) -> float:
    return sum(v for _, v in samples[name])


def test_a_448_token_prompt_through_triton_is_announced_as_its_28_pages(evented_server):
    server, endpoint = evented_server
    listener = Listener(endpoint, b"kv@")  # the default topic, kv@<host>@<model>, as llm-d filters it
    time.sleep(0.3)
    try:
        got = grpc_request(server, {"input_ids": I64(*PROMPT), "max_tokens": I32(1)})
        assert got[-1][1] is None
        seen = listener.drain(1.0)
    finally:
        listener.close()
    assert {t.decode().rsplit("@", 1)[-1] for t in listener.topics} == {"target_gqa"}
    blocks = stored_blocks([p for _, p in seen])
    assert len(blocks) == 28 and [t for b in blocks for t in b.token_ids] == PROMPT
    assert blocks[0].parent_block_hash is None
    assert all(b.parent_block_hash == a.block_hashes[0] for a, b in zip(blocks, blocks[1:]))
    assert all(e[0] in ("BlockStored", "BlockRemoved", "AllBlocksCleared") for _, p in seen for e in decode_llmd(p))


def test_kv_usage_is_used_over_all_pages_under_load_and_vllm_names_mirror_it(evented_server):
    server, _ = evented_server
    results: list = []
    threads = [threading.Thread(target=lambda i=i: results.append(grpc_request(
        server, {"input_ids": I64(*[3 + i] * 200), "max_tokens": I32(96)}, timeout=120))) for i in range(6)]
    for thread in threads:
        thread.start()
    loaded = []
    deadline = time.monotonic() + 60
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        samples = metric_lines(server)
        if value(samples, "tritongen:num_requests_running") > 0:
            loaded.append(samples)
        time.sleep(0.1)
    for thread in threads:
        thread.join(120)
    assert all(r[-1][1] is None for r in results) and len(results) == 6
    assert loaded, "never saw the engine running"
    consistent = 0
    for samples in loaded:
        usage, used, free = (value(samples, f"tritongen:{n}") for n in ("kv_cache_usage_perc", "kv_pages_used",
                                                                         "kv_pages_free"))
        assert 0.0 <= usage <= 1.0
        consistent += abs(usage - used / (used + free)) < 1e-6 and used > 0
        assert value(samples, "vllm:kv_cache_usage_perc") == pytest.approx(usage, abs=0.02)  # same job, a set apart
    assert consistent > 0, "no scrape under load showed used/(used+free)"
    idle = wait_idle(server)
    samples = metric_lines(server)
    assert value(samples, "vllm:num_requests_waiting") == idle["tritongen:num_requests_waiting"] == 0
    (labels, one), = samples["tritongen:cache_config_info"]
    assert one == 1 and 'block_size="16"' in labels and 'num_gpu_blocks="256"' in labels
    assert 'kv_device="cpu"' in labels  # where the running batch's KV lives
    assert 'block_size="16"' in samples["vllm:cache_config_info"][0][0]
