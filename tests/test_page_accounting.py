"""What admission may count on: pages shared by session pins, pins reused by a new prompt, the pool's size."""

from __future__ import annotations

import threading

import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest, SchedulerConfig

PREFIX_A = [10 + i % 50 for i in range(48)]
PREFIX_B = [70 + i % 50 for i in range(48)]


def greedy(n: int) -> GenerateOptions:
    return GenerateOptions(max_new_tokens=n, stop_on_eos=False)


@pytest.fixture
def small(tiny_folder):
    """24 pages of 8 tokens: one full context of 192 tokens; session pins may hold all of them."""
    engine = Engine(tiny_folder, EngineConfig(num_gpu_pages=24, page_size=8, max_model_len=192, max_pinned_pages=24,
                                              scheduler=SchedulerConfig(max_num_seqs=4)))
    yield engine
    engine.close()


def test_pages_shared_by_pins_are_evicted_for_a_request_that_needs_them(small):
    for session, prefix in [("a1", PREFIX_A), ("a2", PREFIX_A), ("b1", PREFIX_B), ("b2", PREFIX_B)]:
        small.generate(GenerateRequest(prefix + [5], greedy(2)), session_id=session)
    shared = set(small.kv.sessions["a1"].pages) & set(small.kv.sessions["a2"].pages)
    assert len(shared) == 6 and all(small.pool.refcount[p] == 2 for p in shared)
    assert small.pool.num_available() == 8 and small.kv.evictable_pages() == 16
    done = threading.Event()
    steps = small.steps
    small.submit(GenerateRequest([200 + i % 50 for i in range(150)], greedy(4)), on_done=lambda r, e: done.set())
    assert done.wait(10), f"starved: {small.steps - steps} steps"
    assert small.steps - steps < 40 and small.stats.empty_steps == 0


def test_a_prompt_reusing_another_sessions_pinned_pages_waits_instead_of_killing_the_engine(small):
    small.generate(GenerateRequest(PREFIX_A + [5], greedy(2)), session_id="s1")
    far = threading.Event()
    count = [0]

    def on_token(_token) -> None:
        count[0] += 1
        if count[0] == 70:  # the stream then holds 17 pages, the pin 7: none is free
            far.set()

    long_done = threading.Event()
    small.submit(GenerateRequest([200 + i % 50 for i in range(60)], greedy(100)), on_token=on_token,
                 on_done=lambda r, e: long_done.set())
    assert far.wait(20)
    # Its first 48 tokens match the pin's pages, which admission holds: evicting the pin frees only its last page.
    result = small.generate(GenerateRequest(PREFIX_A + [6] * 20, greedy(30)), session_id="s2")
    assert long_done.wait(20)
    assert len(result.token_ids) == 30 and small.alive and small.scheduler.failed_admissions == 0
    assert small.stats.empty_steps == 0


def test_loading_refuses_a_pool_smaller_than_the_context(tiny_folder):
    with pytest.raises(ValueError, match=r"num_gpu_pages x page_size = 10 x 16 = 160 tokens, below max_model_len 512"):
        Engine(tiny_folder, EngineConfig(num_gpu_pages=10, page_size=16))
