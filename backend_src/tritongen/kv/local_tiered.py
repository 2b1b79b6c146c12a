"""LocalTiered connector: a CPU tier (LRU, bounded) and an optional disk tier that survives restarts.

Stores run on a background thread so the engine never waits on them.
With a disk tier, every stored chunk is also written to disk (write-through),
so a restart finds all of them. Eviction drops the lowest store priority
first, least recently used within it; pinned chunks stay. Each disk file
carries a SHA-256 of its payload: a truncated or corrupted file is
detected on fetch, deleted and reported missing, so the engine recomputes.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .connector import (NOT_FOUND, CachePriority, ConnectorCapabilities, FetchedKv, KvCacheConnector, KvCacheKey,
                        KvCacheLocation, KvStoreEntry)

MAGIC = b"TRITONGEN-KV-1\n"
COMPRESSIONS = ("none", "zlib")


@dataclass
class LocalTieredConfig:
    cpu_max_bytes: int = 1 << 30
    disk_path: Path | None = None
    disk_max_bytes: int = 8 << 30
    compression: str = "none"  # or "zlib" (both tiers)

    def validate(self) -> None:
        if self.cpu_max_bytes <= 0 or self.disk_max_bytes <= 0:
            raise ValueError("local_tiered tier capacities must be greater than zero")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"local_tiered compression must be one of {', '.join(COMPRESSIONS)}")


@dataclass
class _Entry:
    size: int
    priority: CachePriority
    header: dict
    payload: bytes | None = None  # CPU tier only
    path: Path | None = None  # disk tier only
    pinned: bool = False


class _Tier:
    """Entries by digest in LRU order, with a byte budget and priority-first eviction."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.bytes = max_bytes, 0
        self.entries: OrderedDict[str, _Entry] = OrderedDict()

    def touch(self, digest: str) -> None:
        self.entries.move_to_end(digest)

    def add(self, digest: str, entry: _Entry) -> list[_Entry]:
        """Insert, then evict until within budget; returns what was evicted."""
        if digest in self.entries:
            self.remove(digest)
        self.entries[digest] = entry
        self.bytes += entry.size
        evicted = []
        while self.bytes > self.max_bytes:
            victims = [(e.priority.value, i, d) for i, (d, e) in enumerate(self.entries.items()) if not e.pinned and d != digest]
            if not victims:
                break
            _, _, victim = min(victims)
            evicted.append(self.remove(victim))
        return evicted

    def remove(self, digest: str) -> _Entry | None:
        entry = self.entries.pop(digest, None)
        if entry is not None:
            self.bytes -= entry.size
        return entry


class LocalTieredConnector(KvCacheConnector):
    def __init__(self, config: LocalTieredConfig):
        config.validate()
        self.config = config
        self.cpu = _Tier(config.cpu_max_bytes)
        self.disk = _Tier(config.disk_max_bytes) if config.disk_path else None
        self._lock = threading.Lock()
        # Bytes per second, refined from real transfers; the first guesses are conservative.
        self.bandwidth = {"cpu": 2e9, "disk": 2e8}
        self.stats = {"stored": 0, "store_dropped": 0, "bytes_stored": 0, "corrupt_dropped": 0}
        if self.disk is not None:
            Path(config.disk_path).mkdir(parents=True, exist_ok=True)
            self._load_disk_index()
        self._queue: queue.Queue = queue.Queue(maxsize=64)
        self._writer = threading.Thread(target=self._drain, name="tritongen-kv-store", daemon=True)
        self._writer.start()

    # ---- protocol ---------------------------------------------------------

    def lookup(self, key: KvCacheKey) -> KvCacheLocation:
        with self._lock:
            for name, tier in (("cpu", self.cpu), ("disk", self.disk)):
                entry = tier.entries.get(key.digest) if tier is not None else None
                if entry is not None:
                    return KvCacheLocation(name, 1000.0 * entry.size / self.bandwidth[name], entry.size)
        return NOT_FOUND

    def store(self, entry: KvStoreEntry) -> None:
        """Queue a chunk for storing; dropped (and counted) when the queue is full, never blocking."""
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self.stats["store_dropped"] += 1

    def fetch(self, key: KvCacheKey) -> FetchedKv | None:
        start = time.perf_counter()
        with self._lock:
            entry = self.cpu.entries.get(key.digest)
            tier = "cpu"
            if entry is None and self.disk is not None:
                entry, tier = self.disk.entries.get(key.digest), "disk"
            if entry is None:
                return None
            (self.cpu if tier == "cpu" else self.disk).touch(key.digest)
        payload = entry.payload if tier == "cpu" else self._read_file(key.digest, entry)
        if payload is None:
            return None
        kv = self._decode(entry.header, payload)
        elapsed = time.perf_counter() - start
        with self._lock:
            if elapsed > 0:  # running estimate of this tier's throughput
                self.bandwidth[tier] = 0.7 * self.bandwidth[tier] + 0.3 * (entry.size / elapsed)
            if tier == "disk":  # promote: the next fetch of this chunk is a CPU hit
                self.cpu.add(key.digest, _Entry(entry.size, entry.priority, entry.header, payload))
        return FetchedKv(key, kv, tier, elapsed)

    def pin(self, key: KvCacheKey) -> None:
        self._set_pinned(key, True)

    def unpin(self, key: KvCacheKey) -> None:
        self._set_pinned(key, False)

    def evict(self, key: KvCacheKey) -> None:
        with self._lock:
            self.cpu.remove(key.digest)
            if self.disk is not None:
                entry = self.disk.remove(key.digest)
                if entry is not None:
                    entry.path.unlink(missing_ok=True)

    def health(self) -> bool:
        return self._writer.is_alive() and (self.disk is None or os.access(self.config.disk_path, os.W_OK))

    def capabilities(self) -> ConnectorCapabilities:
        return ConnectorCapabilities(pinnable=True, compression=list(COMPRESSIONS))

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until queued stores are written (tests, shutdown)."""
        self._queue.join()

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._writer.join(timeout=10)

    # ---- storing ----------------------------------------------------------

    def _drain(self) -> None:
        while True:
            entry = self._queue.get()
            try:
                if entry is None:
                    return
                self._store_now(entry)
            except Exception:  # noqa: BLE001 - a failed store only loses a cache entry
                self.stats["store_dropped"] += 1
            finally:
                self._queue.task_done()

    def _store_now(self, entry: KvStoreEntry) -> None:
        kv = np.ascontiguousarray(entry.kv, dtype="<f4")
        raw = kv.tobytes()
        payload = zlib.compress(raw, 1) if self.config.compression == "zlib" else raw
        key = entry.key
        header = {"model_id": key.model_id, "layer_range": list(key.layer_range), "chunk_hash": key.chunk_hash,
                  "chunk_index": key.chunk_index, "num_tokens": key.num_tokens, "shape": list(kv.shape),
                  "compression": self.config.compression, "priority": entry.priority.name,
                  "payload_bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}
        with self._lock:  # CPU evictions need no write-back: with a disk tier, every chunk is written there too
            self.cpu.add(key.digest, _Entry(len(payload), entry.priority, header, payload))
        if self.disk is not None:
            path = Path(self.config.disk_path) / f"{key.digest}.kv"
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                f.write(MAGIC + json.dumps(header).encode() + b"\n" + payload)
            os.replace(tmp, path)  # a crash never leaves a half-written chunk under its real name
            with self._lock:
                for old in self.disk.add(key.digest, _Entry(len(payload), entry.priority, header, path=path)):
                    old.path.unlink(missing_ok=True)
        self.stats["stored"] += 1
        self.stats["bytes_stored"] += len(payload)

    # ---- disk -------------------------------------------------------------

    def _load_disk_index(self) -> None:
        """Rebuild the disk tier from its files after a restart (headers only; payloads are checked on fetch)."""
        files = sorted(Path(self.config.disk_path).glob("*.kv"), key=lambda p: p.stat().st_mtime)
        for path in files:
            try:
                with open(path, "rb") as f:
                    if f.read(len(MAGIC)) != MAGIC:
                        raise ValueError("bad magic")
                    header = json.loads(f.readline())
                priority = CachePriority[header["priority"]]
            except (OSError, ValueError, KeyError):
                path.unlink(missing_ok=True)
                self.stats["corrupt_dropped"] += 1
                continue
            self.disk.add(path.stem, _Entry(header["payload_bytes"], priority, header, path=path))

    def _read_file(self, digest: str, entry: _Entry) -> bytes | None:
        try:
            with open(entry.path, "rb") as f:
                f.read(len(MAGIC))
                f.readline()
                payload = f.read()
        except OSError:
            payload = b""
        if len(payload) != entry.header["payload_bytes"] or hashlib.sha256(payload).hexdigest() != entry.header["sha256"]:
            with self._lock:
                self.disk.remove(digest)
            entry.path.unlink(missing_ok=True)
            self.stats["corrupt_dropped"] += 1
            return None
        return payload

    @staticmethod
    def _decode(header: dict, payload: bytes) -> np.ndarray:
        raw = zlib.decompress(payload) if header["compression"] == "zlib" else payload
        return np.frombuffer(raw, dtype="<f4").reshape(header["shape"]).astype(np.float32)

    def _set_pinned(self, key: KvCacheKey, pinned: bool) -> None:
        with self._lock:
            for tier in (self.cpu, self.disk):
                entry = tier.entries.get(key.digest) if tier is not None else None
                if entry is not None:
                    entry.pinned = pinned
