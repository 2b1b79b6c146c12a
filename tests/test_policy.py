"""Scheduling policy: priority aging, session pin bounds and expiry, a draft model's catch-up within the budget."""

from __future__ import annotations

import threading
import time

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest, Priority, SchedulerConfig
from tritongen.speculative.modes import SpeculativeMode
from tritongen.triton.generator_settings import parse_settings


def options(n: int, **kw) -> GenerateOptions:
    return GenerateOptions(max_new_tokens=n, stop_on_eos=False, **kw)


def test_a_low_request_under_continuous_high_traffic_starts_within_its_aging_bound(tiny_folder):
    aging = 0.3  # low -> normal after 0.3 s waiting, -> high after 0.6 s: then it is the oldest high
    engine = Engine(tiny_folder, EngineConfig(scheduler=SchedulerConfig(max_num_seqs=1, priority_aging_seconds=aging)))
    stop = threading.Event()
    started: dict = {}

    def high_traffic() -> None:  # always a high request waiting behind the running one
        while not stop.is_set():
            done = threading.Event()
            engine.submit(GenerateRequest("high", options(20)), priority=Priority.HIGH,
                          on_done=lambda r, e, done=done: done.set())
            engine.submit(GenerateRequest("high", options(20)), priority=Priority.HIGH)
            done.wait(10)

    try:
        feeder = threading.Thread(target=high_traffic)
        feeder.start()
        time.sleep(0.2)
        submitted = time.monotonic()
        low_done = threading.Event()
        engine.submit(GenerateRequest("low", options(3)), priority=Priority.LOW,
                      on_token=lambda t: started.setdefault("at", time.monotonic()),
                      on_done=lambda r, e: low_done.set())
        assert low_done.wait(10), "the low request starved"
        waited = started["at"] - submitted
        print(f"low request's first token after {waited:.2f}s (bound {2 * aging:.1f}s and a running request)")
        assert waited < 2 * aging + 1.0
    finally:
        stop.set()
        feeder.join(20)
        engine.close()


def test_without_aging_time_the_low_request_waits_for_the_high_ones(tiny_folder):
    """The control: with a long aging time the same low request is passed over while highs keep coming."""
    engine = Engine(tiny_folder, EngineConfig(scheduler=SchedulerConfig(max_num_seqs=1, priority_aging_seconds=3600)))
    try:
        highs = [threading.Event() for _ in range(6)]
        engine.submit(GenerateRequest("high", options(20)), priority=Priority.HIGH)
        order = []
        low = threading.Event()
        engine.submit(GenerateRequest("low", options(2)), priority=Priority.LOW,
                      on_done=lambda r, e: (order.append("low"), low.set()))
        for done in highs:
            engine.submit(GenerateRequest("high", options(5)), priority=Priority.HIGH,
                          on_done=lambda r, e, done=done: (order.append("high"), done.set()))
        assert low.wait(20)
        assert order[-1] == "low"
    finally:
        engine.close()


def test_session_pins_are_bounded_per_session_and_in_total(tiny_folder):
    config = EngineConfig(num_gpu_pages=64, page_size=8, max_model_len=512, max_session_pages=3, max_pinned_pages=7)
    engine = Engine(tiny_folder, config)
    try:
        prompt = list(range(3, 60))  # 57 tokens: 8 pages, cut to 3 for the pin
        engine.generate(GenerateRequest(prompt, options(4)), session_id="a")
        pin = engine.kv.sessions["a"]
        assert len(pin.pages) == 3 and pin.tokens == prompt[:24]
        follow = engine.generate(GenerateRequest(prompt + [7, 8], options(4)), session_id="a")
        assert follow.prefix_cache_hit_len >= 24  # the kept prefix is reused
        for sid in ("b", "c"):
            engine.generate(GenerateRequest([100 + ord(sid)] * 30, options(2)), session_id=sid)
        assert list(engine.kv.sessions) == ["b", "c"]  # 3 + 3 + 3 pages > 7: the oldest pin went
        assert len({p for pin in engine.kv.sessions.values() for p in pin.pages}) <= 7
    finally:
        engine.close()


def test_idle_session_pins_expire_while_the_engine_is_idle(tiny_folder):
    engine = Engine(tiny_folder, EngineConfig(session_idle_seconds=0.3))
    try:
        engine.generate(GenerateRequest("Hello there", options(3)), session_id="s")
        assert "s" in engine.kv.sessions and engine.pool.refcount.sum() > 0
        deadline = time.monotonic() + 5
        while engine.kv.sessions and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not engine.kv.sessions and int(engine.pool.refcount.sum()) == 0
    finally:
        engine.close()


def test_a_draft_models_catch_up_prefill_stays_inside_the_token_budget(tiny_folder):
    budget = 16
    engine = Engine(tiny_folder, EngineConfig(draft_model=tiny_folder, num_speculative_tokens=3,
                                              scheduler=SchedulerConfig(max_num_batched_tokens=budget)))
    try:
        draft = engine.speculation.proposers["draft_model"].decoder
        per_step: dict[int, int] = {}
        prefill = draft.prefill

        def counting(slot, ids, start, *args, **kwargs):
            per_step[engine.steps] = per_step.get(engine.steps, 0) + ids.shape[1]
            return prefill(slot, ids, start, *args, **kwargs)

        draft.prefill = counting
        prompt = list(range(3, 203))  # 200 tokens for the draft to catch up on
        plain = engine.generate(GenerateRequest(prompt, options(40, speculative_mode=SpeculativeMode("none"))))
        spec = engine.generate(GenerateRequest(prompt, options(40, speculative_mode=SpeculativeMode("draft_model"))))
        assert spec.token_ids == plain.token_ids and spec.total_draft_tokens > 0
        print(f"draft tokens per step: {per_step}")
        # Per step: the catch-up within the spare budget (the decode row takes one token), then k drafts.
        assert max(per_step.values()) <= (budget - 1) + 3 and sum(per_step.values()) >= len(prompt)
    finally:
        engine.close()


def test_policy_settings_parse(tmp_path):
    settings = parse_settings({"allow_high_priority": "true", "priority_aging_seconds": "5",
                               "max_session_pages": "8", "max_pinned_pages": "100", "session_idle_seconds": "60"},
                              tmp_path)
    assert settings.allow_high_priority and settings.engine.scheduler.priority_aging_seconds == 5
    assert (settings.engine.max_session_pages, settings.engine.max_pinned_pages) == (8, 100)
    assert settings.engine.session_idle_seconds == 60 and not parse_settings({}, tmp_path).allow_high_priority
