"""The engine's KV events: each full page the prefix cache gains is announced with its tokens, chained to its
parent; each page it drops is removed; a subscriber that reconnects catches up through replay; both
consumers' decoders read every batch."""

from __future__ import annotations

import time

import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.kv.kv_events import KvEventsConfig
from tritongen.serve import free_port

from kv_event_listener import Listener, decode_llmd, decode_vllm, removed_hashes, replay, stored_blocks

PAGE = 16


def endpoints() -> KvEventsConfig:
    return KvEventsConfig(f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}", "kv@test@tiny")


def prompt(seed: int, n: int = 448) -> list[int]:
    return [3 + (seed * 7919 + i * 31) % 300 for i in range(n)]


def run(engine: Engine, ids: list[int]) -> None:
    engine.generate(GenerateRequest(ids, GenerateOptions(max_new_tokens=1, stop_on_eos=False)))


@pytest.fixture
def evented(tiny_folder):
    config = endpoints()
    engine = Engine(tiny_folder, EngineConfig(kv_events=config, num_gpu_pages=64, page_size=PAGE))
    listener = Listener(config.endpoint, config.topic.encode())
    time.sleep(0.3)  # the subscription reaches the PUB socket before anything is sent
    yield engine, listener, config
    listener.close()
    engine.close()


def test_a_448_token_prompt_is_announced_as_28_chained_pages(evented):
    engine, listener, config = evented
    ids = prompt(1)
    run(engine, ids)
    blocks = stored_blocks([p for _, p in listener.drain()])
    assert len(blocks) == 448 // PAGE == 28
    assert [t for b in blocks for t in b.token_ids] == ids
    assert blocks[0].parent_block_hash is None
    for parent, child in zip(blocks, blocks[1:]):
        assert child.parent_block_hash == parent.block_hashes[0]  # parents announced before children
    assert all(b.block_size == PAGE and b.medium == "GPU" and len(b.block_hashes) == 1 for b in blocks)
    hashes = [b.block_hashes[0] for b in blocks]
    assert len(set(hashes)) == 28 and all(0 < h < 2**63 for h in hashes)
    # A repeat of the prompt reuses the pages: nothing new to announce.
    run(engine, ids)
    assert stored_blocks([p for _, p in listener.drain()[len(listener.received):]]) == []


def test_replay_after_a_reconnect_gives_the_same_sequence_numbers(evented):
    engine, listener, config = evented
    run(engine, prompt(2, 64))
    run(engine, prompt(3, 64))
    seen = listener.drain()
    assert seen and [s for s, _ in seen] == list(range(seen[0][0], seen[0][0] + len(seen)))
    listener.close()  # the subscriber goes away; the engine goes on
    run(engine, prompt(4, 64))
    time.sleep(0.3)  # the step's batch is published as the step ends, just after the request's answer
    caught_up = replay(config.replay_endpoint, seen[-1][0] + 1)
    assert caught_up and caught_up[0][0] == seen[-1][0] + 1
    assert [t for b in stored_blocks([p for _, p in caught_up]) for t in b.token_ids] == prompt(4, 64)
    everything = dict(replay(config.replay_endpoint, 0))
    assert 0 in everything and decode_vllm(everything[0]).events[0].__class__.__name__ == "VllmAllBlocksCleared"
    for seq, payload in seen:
        assert everything[seq] == payload  # the same batches under the same numbers


def test_evicted_pages_are_removed_and_both_decoders_read_every_batch(tiny_folder):
    config = endpoints()
    engine = Engine(tiny_folder, EngineConfig(kv_events=config, num_gpu_pages=32, page_size=PAGE))
    listener = Listener(config.endpoint, config.topic.encode())
    time.sleep(0.3)
    try:
        for seed in range(4):  # 4 x 28 pages through a 32-page pool: earlier prefixes are evicted
            run(engine, prompt(10 + seed))
    finally:
        engine.close()
    try:
        payloads = [p for _, p in listener.drain()]  # the closing engine's last batch included
    finally:
        listener.close()
    stored = {b.block_hashes[0] for b in stored_blocks(payloads)}
    removed = removed_hashes(payloads)
    assert removed and removed <= stored  # only announced pages are removed
    first = {b.block_hashes[0] for b in stored_blocks(payloads)[:28]}
    assert first & removed  # the first prefix lost pages to the later ones
    for payload in payloads:
        vllm = decode_vllm(payload)
        llmd = decode_llmd(payload)
        assert [type(e).__name__.removeprefix("Vllm") for e in vllm.events] == [e[0] for e in llmd]
    tags = [e[0] for p in payloads for e in decode_llmd(p)]
    assert tags[-1] == "AllBlocksCleared"  # a closing engine says its blocks are gone


def test_replicas_give_equal_prefixes_equal_hashes(tiny_folder):
    hashes = []
    for _ in range(2):
        config = endpoints()
        engine = Engine(tiny_folder, EngineConfig(kv_events=config, num_gpu_pages=64, page_size=PAGE))
        try:
            run(engine, prompt(5, 96))
            time.sleep(0.2)
            hashes.append([b.block_hashes[0] for b in stored_blocks([p for _, p in replay(config.replay_endpoint, 0)])])
        finally:
            engine.close()
    assert len(hashes[0]) == 6 and hashes[0] == hashes[1]


def test_events_are_off_by_default_and_bad_endpoints_are_refused(tiny_folder):
    engine = Engine(tiny_folder)
    try:
        assert engine.kv_events is None and engine.kv.cache.events is None
    finally:
        engine.close()
    with pytest.raises(ValueError, match="kv_events_endpoint must be a ZMQ address"):
        EngineConfig(kv_events=KvEventsConfig("127.0.0.1:5557")).validate()
    taken = endpoints()
    first = Engine(tiny_folder, EngineConfig(kv_events=taken))
    try:
        with pytest.raises(ValueError, match="KV events: cannot bind"):
            Engine(tiny_folder, EngineConfig(kv_events=taken))
    finally:
        first.close()


def test_the_generator_settings_turn_events_on_with_llm_ds_topic(tmp_path):
    from tritongen.triton.generator_settings import parse_settings

    assert not parse_settings({}, tmp_path).engine.kv_events.enabled
    settings = parse_settings({"kv_events_endpoint": "tcp://127.0.0.1:5557", "target_model": "/models/smol"}, tmp_path)
    events = settings.engine.kv_events
    assert events.enabled and events.replay_endpoint == ""
    assert events.topic.startswith("kv@") and events.topic.endswith("@smol") and events.topic.count("@") == 2
    assert settings.vllm_metric_aliases
    assert not parse_settings({"vllm_metric_aliases": "false"}, tmp_path).vllm_metric_aliases
    with pytest.raises(ValueError, match="kv_events_replay_endpoint needs kv_events_endpoint"):
        parse_settings({"kv_events_replay_endpoint": "tcp://127.0.0.1:5558"}, tmp_path)


def test_the_connectors_local_tiers_announce_their_pages_as_their_own_medium(tiny_folder):
    """A chunk stored in the CPU tier is announced with the hashes the trie gave its pages; evicted, removed."""
    from tritongen.kv.connector_config import KvConnectorConfig, LocalTieredConfig

    config = endpoints()
    # 512 B of f32 KV per token: room for one 256-token chunk and a 16-token one, not for a second prompt's.
    tiers = KvConnectorConfig("local_tiered", recompute_ms_per_token=1.0,
                              local_tiered=LocalTieredConfig(cpu_max_bytes=140_000))
    engine = Engine(tiny_folder, EngineConfig(kv_events=config, num_gpu_pages=64, page_size=PAGE, kv_connector=tiers))
    listener = Listener(config.endpoint, config.topic.encode())
    time.sleep(0.3)
    try:
        for seed in (20, 21):
            run(engine, prompt(seed, 272))
            engine.connector.flush()
    finally:
        engine.close()
    try:
        payloads = [p for _, p in listener.drain()]
    finally:
        listener.close()
    events = [e for p in payloads for e in decode_vllm(p).events]
    pool = {b.block_hashes[0]: b.token_ids for b in events if type(b).__name__ == "VllmBlockStored"
            and b.medium == "GPU"}
    cpu = [e for e in events if type(e).__name__ == "VllmBlockStored" and e.medium == "CPU"]
    assert [len(e.block_hashes) for e in cpu] == [16, 1, 16, 1]  # each prompt's 256-token chunk, then its tail
    first = [h for e in cpu[:2] for h in e.block_hashes]
    assert [t for h in first for t in pool[h]] == prompt(20, 272)  # the pool's hashes for the same pages
    assert cpu[1].parent_block_hash == cpu[0].block_hashes[-1]
    removed = {h for e in events if type(e).__name__ == "VllmBlockRemoved" and e.medium == "CPU"
               for h in e.block_hashes}
    assert set(first) <= removed  # the second prompt's chunk pushed the first out of the CPU tier
    assert not removed & {h for e in cpu[2:] for h in e.block_hashes}
