"""Continuous batching: batch invariance, seeded sampling, prefix reuse, sessions, page pressure, priority."""

from __future__ import annotations

import queue

import pytest
from support.engine_probes import record_decode_groups

from tritongen.engine.engine import Engine
from tritongen.engine.options import (
    EngineConfig,
    FinishReason,
    GenerateOptions,
    GenerateRequest,
    PrioritizedGenerateRequest,
    Priority,
    ScheduledGenerateArrival,
    SchedulerConfig,
)

NEAR_TIE = 1e-4
WORDS = ("the quick brown fox jumps over a lazy dog while seven wise owls watch from old oak trees "
         "and count every star in the clear night sky above the silent river").split()


def prompt(i: int, n_words: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n_words))


def greedy(max_new: int, **kw) -> GenerateOptions:
    return GenerateOptions(max_new_tokens=max_new, stop_on_eos=False, **kw)


def assert_same_or_near_tie(got: list[int], ref_request: GenerateRequest, engine: Engine, label: str) -> None:
    """Greedy tokens must match the solo run; a divergence is allowed only at a near-tie there."""
    options = ref_request.options
    ref = engine.generate(GenerateRequest(ref_request.prompt, GenerateOptions(
        max_new_tokens=options.max_new_tokens, stop_on_eos=False, top_logprobs=2)))
    if got == ref.token_ids:
        return
    j = next(k for k, (a, b) in enumerate(zip(got, ref.token_ids)) if a != b)
    top = ref.logprobs[j].top
    gap = top[0][1] - top[1][1]
    print(f"{label}: diverged at token {j}, reference top-2 gap {gap:.2e}")
    assert gap < NEAR_TIE, f"{label}: divergence at token {j} is not a near-tie (gap {gap:.2e})"


def run_concurrently(engine: Engine, requests: list[GenerateRequest], **submit_kw) -> list:
    done: queue.Queue = queue.Queue()
    handles = [engine.submit(r, on_done=lambda res, err, i=i: done.put((i, res, err)), **submit_kw)
               for i, r in enumerate(requests)]
    results = [None] * len(requests)
    for _ in requests:
        i, res, err = done.get(timeout=600)
        assert err is None, err
        results[i] = res
    return results, handles


@pytest.mark.parametrize("model", ["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_sixteen_concurrent_greedy_requests_match_solo_runs(model, request):
    engine = request.getfixturevalue(model)
    requests = [GenerateRequest(prompt(i, 3 + 2 * i), greedy(12)) for i in range(16)]
    groups = record_decode_groups(engine)
    results, handles = run_concurrently(engine, requests)
    ids = {h.request_id for h in handles}
    together = max(len(ids.intersection(step)) for step in groups)
    print(f"{model}: at most {together} of 16 requests decoded in one step")
    assert together >= 8
    for i, (req, res) in enumerate(zip(requests, results)):
        assert len(res.token_ids) == 12
        assert_same_or_near_tie(res.token_ids, req, engine, f"{model} request {i}")


def test_seeded_sampling_is_independent_of_the_batch(tiny):
    options = GenerateOptions(
        max_new_tokens=20, greedy=False, temperature=0.9, top_p=0.95, seed=1234, stop_on_eos=False
    )
    alone = tiny.generate(GenerateRequest("Hello world", options)).token_ids
    others = [
        GenerateRequest(prompt(i, 4 + i), GenerateOptions(max_new_tokens=25, greedy=False, seed=i)) for i in range(6)
    ]
    results, _ = run_concurrently(tiny, others[:3] + [GenerateRequest("Hello world", options)] + others[3:])
    assert results[3].token_ids == alone


@pytest.mark.slow
def test_prefix_reuse_reports_hit_and_keeps_output(smollm2, target_gqa_folder):
    shared = prompt(0, 1000)  # a thousand tokens
    first = smollm2.generate(GenerateRequest(shared + " Summary:", greedy(8)))
    second_request = GenerateRequest(shared + " In short:", greedy(8))
    second = smollm2.generate(second_request)
    n_shared = len(smollm2.tokenizer.encode(shared))
    assert n_shared >= 1000
    assert first.prefix_cache_hit_len == 0
    assert second.prefix_cache_hit_len >= n_shared // 16 * 16
    fresh = Engine(target_gqa_folder)
    try:
        assert fresh.generate(second_request).token_ids == second.token_ids
    finally:
        fresh.close()


def test_prompt_chunks_that_arrive_together_share_model_calls(tiny):
    """Eight prompts of one length: one call for all. Eight more after a cached 32-token prefix, 3 new tokens
    each: one call per new position (3), not one per request (8). Each answer equals its solo run."""
    shared = tiny.prepare(GenerateRequest(prompt(0, 40))).prompt_ids[:32]
    tiny.generate(GenerateRequest(shared + [7], greedy(1)))  # the prefix's two pages go into the cache
    fresh = [tiny.prepare(GenerateRequest(prompt(i, 12))).prompt_ids[:10] for i in range(8)]
    after_prefix = [shared + [100 + i, 200 + i, 300 + i] for i in range(8)]
    calls: list[tuple[int, int]] = []  # (rows, tokens) of each prompt-chunk call
    prefill = tiny.decoder.prefill

    def counted(slot, ids, past_len, *args, **kwargs):
        calls.append(ids.shape)
        return prefill(slot, ids, past_len, *args, **kwargs)

    tiny.decoder.prefill = counted
    for prompts, expected in ((fresh, [(8, 10)]), (after_prefix, [(8, 1)] * 3)):
        calls.clear()
        requests = [GenerateRequest(ids, greedy(6)) for ids in prompts]
        arrivals = [ScheduledGenerateArrival(1, PrioritizedGenerateRequest(r)) for r in requests]
        results = tiny.generate_scheduled(arrivals)
        assert calls == expected
        assert all(r.result.prefix_cache_hit_len == (32 if prompts is after_prefix else 0) for r in results)
        tiny.decoder.prefill = prefill
        for request, got in zip(requests, results):
            assert_same_or_near_tie(got.result.token_ids, request, tiny, "prompt chunks in one call")
        tiny.decoder.prefill = counted


def test_session_second_turn_prefills_only_new_tokens(tiny):
    turn1 = tiny.generate(GenerateRequest("Hello world, tell me", greedy(6)), session_id="s1")
    context = tiny.prepare(GenerateRequest("Hello world, tell me")).prompt_ids + turn1.token_ids
    follow = context + tiny.prepare(GenerateRequest(" more please")).prompt_ids
    turn2 = tiny.generate(GenerateRequest(follow, greedy(6)), session_id="s1", end_session=True)
    # Everything but the last generated token (never fed to the model) was kept.
    assert turn2.prefix_cache_hit_len == len(context) - 1
    fresh = tiny.generate(GenerateRequest(follow, greedy(6)))
    assert turn2.token_ids == fresh.token_ids
    assert "s1" not in tiny.kv.sessions


def test_page_exhaustion_preempts_and_everything_completes(tiny_folder):
    # Each request needs 4 pages at full length; the pool holds 32, enough for 8 of the 64.
    config = EngineConfig(num_gpu_pages=32, page_size=8, max_model_len=256, scheduler=SchedulerConfig(max_num_seqs=16))
    engine = Engine(tiny_folder, config)
    try:
        requests = [GenerateRequest(prompt(i, 4), greedy(20)) for i in range(64)]
        results, _ = run_concurrently(engine, requests)
        assert engine.stats.preemptions >= 1
        assert int(engine.pool.refcount.sum()) == 0 and engine.pool.num_available() == 32
        solo = Engine(tiny_folder)
        try:
            for i in range(0, 64, 7):
                assert_same_or_near_tie(results[i].token_ids, requests[i], solo, f"request {i}")
        finally:
            solo.close()
    finally:
        engine.close()


def test_high_priority_arrival_gets_first_token_within_two_steps(tiny_folder):
    config = EngineConfig(num_gpu_pages=24, page_size=8, max_model_len=192, scheduler=SchedulerConfig(max_num_seqs=4))
    engine = Engine(tiny_folder, config)
    try:
        low = [
            ScheduledGenerateArrival(
                0, PrioritizedGenerateRequest(GenerateRequest(prompt(i, 5), greedy(30)), Priority.LOW)
            )
            for i in range(6)
        ]
        high_request = GenerateRequest(prompt(20, 5), greedy(5))
        high = ScheduledGenerateArrival(6, PrioritizedGenerateRequest(high_request, Priority.HIGH))
        arrivals = low + [high]
        seen = {}
        engine.on_step = lambda e: seen.update({s.request_id: (s.first_token_step, s.arrival_step)
                                                for s in e.scheduler.running if s.priority == Priority.HIGH})
        results = engine.generate_scheduled(arrivals)
        (first_step, arrival_step), = seen.values()
        assert first_step - arrival_step <= 2
        assert engine.stats.preemptions >= 1
        assert int(engine.pool.refcount.sum()) == 0
        solo = Engine(tiny_folder)
        try:
            for arrival, res in zip(arrivals, results):
                assert res.result.finish_reason == FinishReason.MAX_TOKENS
                assert_same_or_near_tie(res.result.token_ids, arrival.request.request, solo, "priority run")
        finally:
            solo.close()
    finally:
        engine.close()
