"""One thread that does the generator's response IPC, so it overlaps the next decode step.

Every `send` and `is_cancelled` of a python-backend response sender is a round trip to the server
process. Done on the engine thread they sit between decode steps: two per token per stream, which with
16 streams cost a fifth of each step. Here they run while the engine thread is inside onnxruntime.
One FIFO queue keeps every request's responses in order, its FINAL one last. The generator runs a
second one for the per-token metric observations (triton/metrics.py), which no response should wait for.

The engine thread hands a step's jobs over together when the step ends (StepJobs). Woken mid-step,
the send thread would take the GIL each time the engine thread's numpy copies let it go (page
commits, argmax) and keep it through a send, so the engine thread would wait for it before its next
model call; woken as the step ends, it runs once the engine thread is inside onnxruntime.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable


class JobThread:
    """Runs jobs in order; a job's Exception is reported and the next job runs. Anything that ends the thread
    otherwise is handed to `on_death`, on this thread, as its last act: the jobs still queued will never run."""

    def __init__(self, on_error: Callable[[BaseException], None], name: str = "tritongen-send",
                 on_death: Callable[[BaseException], None] = lambda exc: None):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._on_error = on_error
        self._on_death = on_death
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def close(self, timeout: float = 30.0) -> None:
        """Send what is queued, then stop."""
        self._jobs.put(None)
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while (job := self._jobs.get()) is not None:
                try:
                    job()
                except Exception as exc:  # noqa: BLE001 - one failed send must not stop the others
                    self._on_error(exc)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and the like: the owner must know
            self._on_death(exc)


class StepJobs:
    """The jobs of one engine step, queued on a JobThread together by `flush` (engine thread only)."""

    def __init__(self, thread: JobThread):
        self._thread = thread
        self._jobs: list[Callable[[], None]] = []

    def put(self, job: Callable[[], None]) -> None:
        self._jobs.append(job)

    def flush(self) -> None:
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            self._thread.put(job)
