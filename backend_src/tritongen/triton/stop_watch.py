"""Notices that tritonserver is stopping, so the generator can end its open streams while clients still listen.

Triton 2.51 on SIGTERM keeps the model loaded while requests are in flight and, at its exit timeout, closes
every connection: a stream the model does not end itself gets no final response. The stub is not told (it
ignores SIGTERM), but from the signal on, asking whether the model is ready raises "Server not ready", which
is what is polled here. While the model loads the answer is False; after it served, False means an unload.
It is polled only while streams are open: a question in flight as Triton finalizes the idle model makes
tritonserver abort (boost::interprocess::lock_exception), and with a stream open Triton does not finalize.
"""

from __future__ import annotations

import threading
from typing import Callable


class StopWatch:
    """Calls `on_stop` once, on a thread of its own, when `ready()` raises, or answers False after it has
    answered True (before, the model is still loading)."""

    def __init__(self, ready: Callable[[], bool], on_stop: Callable[[], None], busy: Callable[[], bool],
                 interval: float = 0.2):
        """`ready` is asked only while `busy()`."""
        self._ready, self._on_stop, self._busy, self._interval = ready, on_stop, busy, interval
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tritongen-stop-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        seen_ready = False
        while not self._closed.wait(self._interval):
            if not self._busy():
                continue
            try:
                ready = self._ready()
            except Exception:  # noqa: BLE001 - "Server not ready": the server is stopping
                self._on_stop()
                return
            if ready:
                seen_ready = True
            elif seen_ready:
                self._on_stop()
                return
