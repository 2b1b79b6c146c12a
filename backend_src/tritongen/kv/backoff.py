"""When to try a remote store again after it failed: not before a wait that doubles with each failure in a row.

A store that is down or slow must cost a request one short timeout at most, not one per lookup: while the
wait runs, callers skip the store (the engine prefills instead) without touching the network.
"""

from __future__ import annotations

import threading
import time


class Backoff:
    def __init__(self, first_seconds: float = 1.0, max_seconds: float = 30.0):
        self.first, self.max = first_seconds, max_seconds
        self._lock = threading.Lock()
        self._wait = 0.0
        self._until = 0.0  # monotonic time before which nobody tries

    def ready(self) -> bool:
        return time.monotonic() >= self._until

    def failed(self) -> None:
        with self._lock:
            self._wait = min(self.max, self._wait * 2) if self._wait else self.first
            self._until = time.monotonic() + self._wait

    def succeeded(self) -> None:
        with self._lock:
            self._wait, self._until = 0.0, 0.0
