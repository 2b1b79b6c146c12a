"""A connector's statistics: counts the engine thread and its store writer both add to.

Every add and every snapshot holds one lock, so no count is lost to a read-modify-write that another thread
interleaves, and counts added together (a chunk and its bytes) are seen together.
"""

from __future__ import annotations

import threading


class Counters:
    def __init__(self, *names: str):
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(names, 0)

    def add(self, **amounts: int) -> None:
        """Add to the named counts at once (a name not given at construction is a KeyError)."""
        with self._lock:
            for name, amount in amounts.items():
                self._counts[name] += amount

    def snapshot(self) -> dict[str, int]:
        """A copy of every count, all taken at one instant."""
        with self._lock:
            return dict(self._counts)
