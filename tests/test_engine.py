"""The in-process engine: answers, concurrency, cancellation, limits, failures."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from support.engine_probes import kill_engine_thread

from tritongen.engine.engine import Engine, EngineOverloaded, EngineStopped
from tritongen.engine.options import FinishReason, GenerateConstraint, GenerateOptions, GenerateRequest

DIGITS = GenerateConstraint("regex", "[0-9]{1,8}")
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def test_greedy_chat_answer_is_exact(smollm2):
    result = smollm2.generate(GenerateRequest(smollm2.tokenizer.render_chat(FRANCE)))
    assert result.text == "The capital of France is Paris."
    assert result.finish_reason == FinishReason.EOS_TOKEN
    assert result.token_ids[-1] == smollm2.tokenizer.eos_token_id


def test_stream_pieces_concatenate_to_the_result(smollm2):
    request = GenerateRequest("The three primary colors are", GenerateOptions(max_new_tokens=24))
    pieces = list(smollm2.stream(request))
    assert len(pieces) == 24
    assert pieces[-1].finish_reason == FinishReason.MAX_TOKENS
    assert all(p.finish_reason is None for p in pieces[:-1])
    assert "".join(p.text for p in pieces) == smollm2.generate(request).text


def test_concurrent_requests_interleave_and_match_solo_runs(tiny):
    prompts = ["Hello world", "def add(a, b):", "The capital of France", "0123456789"]
    options = GenerateOptions(max_new_tokens=12, stop_on_eos=False)
    solo = [tiny.generate(GenerateRequest(p, options)).token_ids for p in prompts]
    results, order = queue.Queue(), []
    for i, p in enumerate(prompts):
        tiny.submit(GenerateRequest(p, options), on_token=lambda token, i=i: order.append(i),
                    on_done=lambda result, error, i=i: results.put((i, result, error)))
    finished = dict((i, r.token_ids) for i, r, _ in (results.get(timeout=60) for _ in prompts))
    assert [finished[i] for i in range(len(prompts))] == solo
    # Interleaved: the first request had not finished when the last one produced tokens.
    assert order.index(len(prompts) - 1) < max(k for k, i in enumerate(order) if i == 0)


def test_cancel_stops_a_request(tiny):
    request = GenerateRequest("Hello", GenerateOptions(max_new_tokens=400, stop_on_eos=False))
    stream = tiny.stream(request)
    first = [next(stream) for _ in range(3)]
    stream.close()  # closing the iterator cancels the request
    assert len(first) == 3
    # The engine keeps serving.
    assert tiny.generate(GenerateRequest("Hi", GenerateOptions(max_new_tokens=2))).token_ids


def test_callback_error_fails_only_its_request(tiny):
    outcome = {}
    finished = threading.Event()

    def boom(token):
        raise RuntimeError("client went away")

    tiny.submit(GenerateRequest("Hello", GenerateOptions(max_new_tokens=8)), on_token=boom,
                on_done=lambda r, e: (outcome.update(result=r, error=e), finished.set()))
    other = tiny.generate(GenerateRequest("Hello", GenerateOptions(max_new_tokens=8, stop_on_eos=False)))
    assert finished.wait(30)
    assert outcome["result"] is None and "client went away" in str(outcome["error"])
    assert len(other.token_ids) == 8


def test_max_context_ends_with_length(tiny):
    prompt_ids = tiny.prepare(GenerateRequest("Hello world")).prompt_ids
    options = GenerateOptions(max_new_tokens=50, max_context=len(prompt_ids) + 5, stop_on_eos=False)
    result = tiny.generate(GenerateRequest("Hello world", options))
    assert result.finish_reason == FinishReason.LENGTH
    assert len(result.token_ids) == 5


def test_prompt_that_does_not_fit_is_rejected_at_once(tiny):
    with pytest.raises(ValueError, match="context holds 4"):
        tiny.submit(GenerateRequest("Hello world, this is long", GenerateOptions(max_context=4)))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tiny.submit(GenerateRequest([1, 2, 10**6]))
    with pytest.raises(ValueError, match="temperature must be finite and non-negative"):
        tiny.submit(GenerateRequest("x", GenerateOptions(temperature=-1.0)))


def test_dead_engine_thread_fails_requests_instead_of_hanging(tiny_folder):
    engine = Engine(tiny_folder)

    class Crash(BaseException):
        pass

    def crash():
        raise Crash("engine bug")

    engine._step = crash
    with pytest.raises(Crash):
        engine.generate(GenerateRequest("Hello", GenerateOptions(max_new_tokens=4)))
    assert not engine.alive
    with pytest.raises(EngineStopped):
        engine.submit(GenerateRequest("Hello"))
    engine.close()


def test_every_submit_racing_engine_death_raises_or_is_answered(tiny_folder):
    """Four threads submit until refused while the engine thread dies: none is accepted and then forgotten."""
    for attempt in range(5):
        engine = Engine(tiny_folder)
        accepted: list[threading.Event] = []
        refused: list[int] = []

        def client() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                done = threading.Event()
                try:
                    # A constraint to compile widens the time between submit's first check and its queueing.
                    engine.submit(GenerateRequest("Hello", GenerateOptions(max_new_tokens=2, constraint=DIGITS)),
                                  on_done=lambda result, error, done=done: done.set())
                except EngineStopped:
                    refused.append(1)
                    return
                except EngineOverloaded:  # the queue is full: back off, as a client would
                    time.sleep(0.001)
                    continue
                accepted.append(done)

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        while len(accepted) < 20 * (attempt + 1):
            time.sleep(0.001)
        kill_engine_thread(engine)
        for t in threads:
            t.join(timeout=30)
        assert len(refused) == 4, f"attempt {attempt}: a client was never refused"
        unanswered = [d for d in accepted if not d.wait(5)]
        assert not unanswered, f"attempt {attempt}: {len(unanswered)} of {len(accepted)} accepted requests unanswered"
        engine.close()
