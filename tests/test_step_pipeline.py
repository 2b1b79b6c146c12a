"""The step's doors: the scheduler copies no KV, the runner writes no request state, the update is the one writer.

Each test runs real requests through the tiny model and watches the rooms from outside: the slot rows record
who touches them, the runner's input sequences are compared field by field before and after its call.
"""

from __future__ import annotations

import copy
import threading

import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest, SchedulerConfig
from tritongen.kv.slot_ops import LoadPage, MoveSlot, ReleaseSlot, SavePage
from tritongen.speculative.modes import SpeculativeMode
from tritongen.speculative.proposer import Proposal, Proposer

PREFIX = list(range(5, 45))  # 40 tokens: five full pages of 8


def _requests(n: int, max_new: int = 10) -> list[GenerateRequest]:
    return [GenerateRequest(PREFIX + [50 + i, 60 + i], GenerateOptions(max_new_tokens=max_new, greedy=True))
            for i in range(n)]


def _run_all(engine: Engine, requests: list[GenerateRequest]) -> list:
    results: list = [None] * len(requests)

    def one(i: int) -> None:
        results[i] = engine.generate(requests[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


@pytest.fixture
def small_pool(tiny_folder):
    """Pages run out: prefix hits, preemption and slot moves all happen."""
    engine = Engine(tiny_folder, EngineConfig(num_gpu_pages=24, page_size=8, max_model_len=128,
                                              scheduler=SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32)))
    yield engine
    engine.close()


def test_schedule_copies_no_kv_and_lists_the_copies_it_implies(small_pool):
    engine, slots = small_pool, small_pool.kv.slots
    inside = threading.local()
    touched_while_scheduling = []
    for name in ("read", "write", "move"):
        real = getattr(slots, name)

        def watched(*args, _real=real, _name=name, **kwargs):
            if getattr(inside, "scheduling", False):
                touched_while_scheduling.append(_name)
            return _real(*args, **kwargs)

        setattr(slots, name, watched)
    schedule = engine.scheduler.schedule

    def watched_schedule(step):
        inside.scheduling = True
        try:
            return schedule(step)
        finally:
            inside.scheduling = False

    engine.scheduler.schedule = watched_schedule
    listed: list = []
    engine.step_listeners.append(lambda plan, output: listed.extend(plan.kv_ops))
    applied: list = []
    apply = engine.kv.apply
    engine.kv.apply = lambda ops: (applied.extend(ops), apply(ops))
    engine.generate(_requests(1)[0])  # the prefix's pages enter the cache
    results = _run_all(engine, _requests(8, max_new=48))
    assert all(r.prefix_cache_hit_len > 0 for r in results)
    assert engine.stats.preemptions >= 1
    assert touched_while_scheduling == []
    assert {LoadPage, ReleaseSlot} <= {type(op) for op in listed}  # admissions' prefixes, preemptions
    assert {LoadPage, ReleaseSlot, MoveSlot, SavePage} <= {type(op) for op in applied}  # and the updates' frees


def _state(seq) -> dict:
    fields = {k: v for k, v in vars(seq).items() if k not in ("sampler", "stopper", "detok", "matcher", "proposer",
                                                                "on_token", "on_done", "cache_node")}
    return copy.deepcopy(fields)


@pytest.mark.parametrize("mode", ["none", "prompt_lookup"])
def test_the_runner_writes_no_request_state(small_pool, mode):
    engine = small_pool
    execute = engine.runner.execute
    changed: list = []
    calls = [0]

    def watched_execute(plan):
        before = {s.request_id: _state(s) for s in plan.batch}
        output = execute(plan)
        calls[0] += 1
        for seq in plan.batch:
            after = _state(seq)
            changed.extend((seq.request_id, k) for k in after if after[k] != before[seq.request_id][k])
        return output

    engine.runner.execute = watched_execute
    options = dict(max_new_tokens=16, greedy=True)
    if mode != "none":
        options["speculative_mode"] = SpeculativeMode(mode)
    repeat = [7, 8, 9, 10] * 6  # prompt lookup finds drafts in a repeating prompt
    requests = [GenerateRequest(repeat + [20 + i], GenerateOptions(**options)) for i in range(6)]
    results = _run_all(engine, requests)
    assert all(len(r.token_ids) == 16 for r in results)
    assert calls[0] > 0 and changed == []
    if mode == "prompt_lookup":
        assert engine.stats.verify_calls > 0


class Oracle(Proposer):
    """Drafts the greedy continuation itself: every draft token is accepted."""

    def __init__(self, continuation: list[int]):
        self.continuation = continuation

    def propose(self, seq, k: int) -> Proposal:
        done = len(seq.tokens) - len(seq.prompt_ids)
        return Proposal(self.continuation[done:done + k])


def test_a_stop_inside_accepted_draft_tokens_cuts_there(tiny):
    prompt = [7, 8, 9, 10] * 6
    plain = tiny.generate(GenerateRequest(prompt, GenerateOptions(max_new_tokens=24, greedy=True))).token_ids
    stop = plain[5:7]
    first = next(i for i in range(len(plain) - 1) if plain[i:i + 2] == stop)
    tiny.speculation.proposers["prompt_lookup"] = Oracle(plain)
    options = GenerateOptions(max_new_tokens=24, greedy=True, stop_sequences=[stop],
                              speculative_mode=SpeculativeMode("prompt_lookup"), num_speculative_tokens=8)
    result = tiny.generate(GenerateRequest(prompt, options))
    assert result.token_ids == plain[:first + 2]
    # One verification accepted all 8 drafts; the stop ended inside them, so only those before it count.
    assert tiny.stats.verify_calls == 1 and tiny.stats.accepted_tokens == 8
    assert result.total_draft_tokens == 8 and result.total_accepted_draft_tokens == first + 1 - 1
    assert result.finish_reason.kind == "stop_sequence"
