"""A connector's stores on a thread of their own: the engine thread hands a chunk over and never waits on a tier.

A full queue drops the chunk (the caller counts it): a cache entry lost costs a later prefill, never a stall.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable

from .connector import KvStoreEntry


class StoreWriter:
    def __init__(self, store: Callable[[KvStoreEntry], None], on_failure: Callable[[], None], name: str,
                 max_queued: int):
        """`store` writes one chunk; `on_failure` counts one that raised."""
        self._store, self._on_failure = store, on_failure
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued)
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def put(self, entry: KvStoreEntry) -> bool:
        """Queue a chunk; False (nothing queued) when the queue is full."""
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            return False
        return True

    def flush(self) -> None:
        """Wait until every queued chunk is written or dropped (tests, shutdown)."""
        self._queue.join()

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _drain(self) -> None:
        while True:
            entry = self._queue.get()
            try:
                if entry is None:
                    return
                self._store(entry)
            except Exception:  # noqa: BLE001 - a failed store only loses a cache entry
                self._on_failure()
            finally:
                self._queue.task_done()
