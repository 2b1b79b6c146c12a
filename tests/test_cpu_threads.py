"""pin_threads: the engine thread and each onnxruntime worker get a CPU of their own; off, nothing is pinned."""

from __future__ import annotations

import os
import threading

import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.runtime.cpu_threads import pin_calling_thread, session_options
from tritongen.triton.generator_settings import parse_settings

CPUS = sorted(os.sched_getaffinity(0))


def thread_affinities() -> dict[int, set[int]]:
    """Every thread of this process by kernel id, with the CPUs it may run on."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = os.sched_getaffinity(int(tid))
        except ProcessLookupError:  # ended meanwhile
            pass
    return out


def started_engine(folder, pin: bool) -> tuple[Engine, dict[int, set[int]]]:
    """An engine that has generated once, and the threads it added to the process."""
    before = set(thread_affinities())
    engine = Engine(folder, EngineConfig(pin_threads=pin))
    engine.generate(GenerateRequest([1, 2, 3], GenerateOptions(max_new_tokens=4, greedy=True)))
    return engine, {tid: cpus for tid, cpus in thread_affinities().items() if tid not in before}


@pytest.mark.skipif(len(CPUS) < 2, reason="pinning needs at least 2 CPUs (CI has 2)")
def test_pinned_engine_thread_and_workers_each_have_their_own_cpu(tiny_folder):
    engine, added = started_engine(tiny_folder, pin=True)
    try:
        engine_tid = engine._thread.native_id
        assert added[engine_tid] == {CPUS[0]}
        pinned = sorted(next(iter(cpus)) for tid, cpus in added.items() if len(cpus) == 1 and tid != engine_tid)
        assert pinned == CPUS[1:]  # one onnxruntime worker per remaining CPU, none on the engine thread's
    finally:
        engine.close()
    assert os.sched_getaffinity(0) == set(CPUS)  # the caller's thread is left as it was


def test_unpinned_engine_leaves_every_thread_free(tiny_folder):
    engine, added = started_engine(tiny_folder, pin=False)
    try:
        assert added and all(cpus == set(CPUS) for cpus in added.values())
    finally:
        engine.close()


def test_pinned_and_unpinned_engines_give_the_same_tokens(tiny_folder):
    request = GenerateRequest([5, 6, 7, 8], GenerateOptions(max_new_tokens=12, greedy=True))
    outputs = []
    for pin in (True, False):
        engine = Engine(tiny_folder, EngineConfig(pin_threads=pin))
        try:
            outputs.append(engine.generate(request).token_ids)
        finally:
            engine.close()
    assert outputs[0] == outputs[1] and len(outputs[0]) == 12


@pytest.mark.parametrize(("value", "expected"), [("", True), ("true", True), ("False", False), (" false ", False)])
def test_pin_threads_parameter(tmp_path, value, expected):
    assert parse_settings({"pin_threads": value}, tmp_path).engine.pin_threads is expected


def test_pin_threads_parameter_rejects_other_words(tmp_path):
    with pytest.raises(ValueError, match="pin_threads must be true or false"):
        parse_settings({"pin_threads": "yes"}, tmp_path)


@pytest.mark.skipif(len(CPUS) < 2, reason="pinning needs at least 2 CPUs (CI has 2)")
def test_a_session_opened_from_a_pinned_thread_still_gets_a_thread_per_cpu():
    seen = {}

    def pinned_then_open():
        pin_calling_thread()
        options = session_options(0, pin=True)
        seen["threads"] = options.intra_op_num_threads
        seen["affinities"] = options.get_session_config_entry("session.intra_op_thread_affinities")

    thread = threading.Thread(target=pinned_then_open)
    thread.start()
    thread.join()
    assert seen["threads"] == len(CPUS)
    assert seen["affinities"] == ";".join(str(c + 1) for c in CPUS[1:])
