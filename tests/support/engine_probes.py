"""What tests attach to an engine through its step listeners: the record of which requests decoded together,
and a fault that kills the engine thread."""

from __future__ import annotations

from collections import deque

from tritongen.engine.engine import Engine


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
