"""Drivers for tests and benchmarks, kept out of the request API: requests that arrive at chosen step counts,
the record of which requests decoded together, and a fault that kills the engine thread."""

from __future__ import annotations

import queue
from collections import deque

from .engine import Engine
from .options import PrioritizedGenerateResult, ScheduledGenerateArrival
from .sequence import DoneCallback


def generate_scheduled(engine: Engine, arrivals: list[ScheduledGenerateArrival]) -> list[PrioritizedGenerateResult]:
    """Run requests that become visible at given step counts (from now); results in the order given."""
    done: queue.Queue = queue.Queue()

    def finished(index: int) -> DoneCallback:
        return lambda result, error: done.put((index, result, error))

    # All submitted before the engine thread looks: idle, it steps as soon as the first one is in, and the
    # rest would arrive a step or more late. (The condition's lock is reentrant: submit takes it too.)
    with engine._wake:
        base = engine.steps
        for index, arrival in enumerate(arrivals):
            r = arrival.request
            engine.submit(r.request, priority=r.priority, session_id=r.session_id,
                          arrival_step=base + arrival.arrival_step, on_done=finished(index))
    results: list = [None] * len(arrivals)
    for _ in arrivals:
        i, result, error = done.get()
        if error is not None:
            raise error
        results[i] = PrioritizedGenerateResult(arrivals[i].request.session_id, result)
    return results


def record_decode_groups(engine: Engine, maxlen: int = 4096) -> deque:
    """From now on, the request ids of each batched decode call (bounded): which requests decoded together."""
    groups: deque = deque(maxlen=maxlen)
    engine.step_listeners.append(lambda plan, output: groups.append(output.decoded_together)
                                 if output.decoded_together else None)
    return groups


def kill_engine_thread(engine: Engine) -> None:
    """The engine thread dies after its next step: how tests prove a dead engine is reported, not hung."""
    def fault(plan, output) -> None:
        raise RuntimeError("injected engine fault")

    engine.step_listeners.append(fault)
    engine.wake()
