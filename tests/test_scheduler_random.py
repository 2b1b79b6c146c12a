"""The scheduler and page pool under random load: a small pool, shared prefixes, sessions, preemption, cancellation.

Each seed builds a workload of three waves. Sessions start on one of two
shared prefixes (so pins share pages), later turns extend the previous
turn's tokens (so admission reuses pins, its own or another session's),
priorities mix, some requests cancel after a few tokens, and some prompts
can never fit. Every request must end with its solo output (or a prefix
of it, when cancelled) or a clear error; the engine must stay alive, never
step without work while requests wait, and free every page at the end.
"""

from __future__ import annotations

import queue
import random
import time

import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import (
    EngineConfig,
    FinishReason,
    GenerateOptions,
    GenerateRequest,
    Priority,
    SchedulerConfig,
)

PAGE_SIZE, PAGES, CONTEXT = 4, 40, 160  # the pool holds exactly one full context
SESSIONS = ("s0", "s1", "s2", "s3")


def options(n: int) -> GenerateOptions:
    return GenerateOptions(max_new_tokens=n, stop_on_eos=False)


@pytest.fixture(scope="module")
def solo(tiny_folder):
    """Reference outputs: each prompt run alone on a roomy engine (cached by prompt and length)."""
    engine = Engine(tiny_folder, EngineConfig(max_model_len=CONTEXT))
    cache: dict = {}

    def run(ids: list[int], n: int) -> list[int]:
        key = (tuple(ids), n)
        if key not in cache:
            cache[key] = engine.generate(GenerateRequest(list(ids), options(n))).token_ids
        return cache[key]

    yield run
    engine.close()


def wave(rng: random.Random, prefixes: list[list[int]], history: dict, vocab: int) -> list[dict]:
    """One wave of requests: a turn for most sessions, plain requests on the shared prefixes, maybe an oversize
    prompt."""
    specs = []
    for sid in SESSIONS:
        if rng.random() < 0.75:
            base = history.get(sid) or list(rng.choice(prefixes))
            specs.append({"ids": base + [rng.randrange(3, vocab) for _ in range(rng.randrange(1, 9))],
                          "session": sid, "end": rng.random() < 0.2})
    for _ in range(rng.randrange(3, 7)):
        ids = rng.choice(prefixes)[: rng.randrange(4, 40)] + [
            rng.randrange(3, vocab) for _ in range(rng.randrange(1, 30))
        ]
        specs.append({"ids": ids})
    if rng.random() < 0.7:  # most of the pool: only evicting pins (several over one page) makes room
        ids = rng.choice(prefixes) + [rng.randrange(3, vocab) for _ in range(rng.randrange(60, 100))]
        specs.append({"ids": ids})
    if rng.random() < 0.5:
        specs.append(
            {"ids": [rng.randrange(3, vocab) for _ in range(CONTEXT + rng.randrange(0, 20))], "too_long": True}
        )
    for spec in specs:
        spec["n"] = rng.randrange(1, 14)
        spec["priority"] = rng.choice(list(Priority))
        spec["cancel_after"] = rng.randrange(1, 4) if rng.random() < 0.15 else None
        spec["arrival"] = rng.randrange(0, 6)
    return specs


class Canceller:
    """Cancels its request after `after` tokens; the handle may arrive after the first token (engine thread)."""

    def __init__(self, after: int | None):
        self.after, self.count, self.due, self.handle = after, 0, False, None

    def on_token(self, token) -> None:
        self.count += 1
        self.due |= self.count == self.after
        self.cancel()

    def cancel(self) -> None:
        if self.due and self.handle is not None:
            self.handle.cancel()


def run_wave(engine: Engine, specs: list[dict]) -> list[tuple]:
    """Submit a wave (arrivals spread over a few steps) and wait for every outcome: (result, error)."""
    done: queue.Queue = queue.Queue()
    outcomes: list = [None] * len(specs)
    base, expected = engine.steps, 0
    for i, spec in enumerate(specs):
        canceller = Canceller(spec["cancel_after"])
        try:
            canceller.handle = engine.submit(
                GenerateRequest(spec["ids"], options(spec["n"])), on_token=canceller.on_token,
                on_done=lambda res, err, i=i: done.put((i, res, err)), priority=spec["priority"],
                session_id=spec.get("session"), end_session=spec.get("end", False), arrival_step=base + spec["arrival"])
        except ValueError as exc:
            outcomes[i] = (None, exc)
            continue
        canceller.cancel()
        expected += 1
    deadline = time.monotonic() + 30
    for _ in range(expected):
        i, res, err = done.get(timeout=max(0.1, deadline - time.monotonic()))
        outcomes[i] = (res, err)
    return outcomes


@pytest.mark.parametrize("seed", range(20))
def test_random_load_ends_every_request_and_frees_every_page(tiny_folder, solo, seed):
    rng = random.Random(seed)
    config = EngineConfig(num_gpu_pages=PAGES, page_size=PAGE_SIZE, max_model_len=CONTEXT,
                          scheduler=SchedulerConfig(max_num_seqs=rng.choice([2, 3, 4]),
                                                    max_num_batched_tokens=rng.choice([8, 16, 32])))
    engine = Engine(tiny_folder, config)
    try:
        vocab = engine.vocab_size
        prefixes = [[rng.randrange(3, vocab) for _ in range(rng.randrange(24, 56))] for _ in range(2)]
        history: dict[str, list[int]] = {}
        for _ in range(3):
            specs = wave(rng, prefixes, history, vocab)
            for spec, (res, err) in zip(specs, run_wave(engine, specs)):
                label = f"seed {seed}: {len(spec['ids'])}-token prompt, {spec}"
                if spec.get("too_long"):
                    assert res is None and "context" in str(err), label
                    continue
                assert err is None, f"{label}: {err!r}"
                want = solo(spec["ids"], spec["n"])
                if res.finish_reason == FinishReason.CANCELLED:
                    assert spec["cancel_after"] is not None and res.token_ids == want[: len(res.token_ids)], label
                else:
                    assert res.finish_reason == FinishReason.MAX_TOKENS, label
                    assert res.token_ids == want, label
                sid = spec.get("session")
                if sid is not None:  # the next turn extends what this one computed, or starts over
                    ended = spec["end"] or res.finish_reason == FinishReason.CANCELLED
                    history[sid] = [] if ended else spec["ids"] + res.token_ids
        print(f"seed {seed}: {engine.stats.steps} steps, {engine.stats.preemptions} preemptions")
        assert engine.alive, engine.error
        assert engine.stats.empty_steps == 0
        assert engine.scheduler.failed_admissions == 0
        for sid in SESSIONS:
            engine.close_session(sid)
        engine.generate(GenerateRequest([5], options(1)))  # runs after the closes: the engine took them first
        assert not engine.kv.sessions
        assert int(engine.pool.refcount.sum()) == 0 and engine.pool.num_available() == PAGES
    finally:
        engine.close()
