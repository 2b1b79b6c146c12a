"""The redis connector: prompt chunks in a Redis that replicas of one model share.

A chunk is stored in the page dtype under a name made of the dtype, the model id (with its weights digest)
and the key's digest, so replicas of one build share it and nothing else can read it; each value is a
checked record (redis_record.py) with a TTL, written only if absent. Redis must never cost more than a
prefill: socket operations time out after `timeout_ms`, no call is retried, and after a failure the
connector does not touch the network until a backoff passes (lookups miss, fetches return nothing, stores
are dropped and counted). Stores run on a thread of their own; the engine thread only looks up (one
pipelined round trip for a whole prompt) and fetches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .backoff import Backoff
from .chunk_bytes import decode_chunk, encode_chunk
from .codec import codec
from .connector import (
    NOT_FOUND,
    ConnectorCapabilities,
    FetchedKv,
    KvCacheConnector,
    KvCacheKey,
    KvCacheLocation,
    KvStoreEntry,
)
from .connector_config import RedisTierConfig
from .counters import Counters
from .redis_record import CorruptRecord, pack_record, record_header, unpack_record
from .store_writer import StoreWriter

T = TypeVar("T")
_STORE_QUEUE = 32  # chunks waiting to be written; beyond it a store is dropped, never waited for


class RedisTierConnector(KvCacheConnector):
    def __init__(self, config: RedisTierConfig, model_id: str = "", kv_dtype: str = "f32"):
        config.validate()
        self.config, self.model_id, self.codec = config, model_id, codec(kv_dtype)
        timeout = config.timeout_ms / 1000
        self.client = redis.Redis.from_url(config.url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                           retry=Retry(NoBackoff(), 0), health_check_interval=0)
        self.backoff = Backoff()
        # Running estimates, refined by each fetch: bytes per second and the fixed cost of one round trip.
        self.bandwidth, self.round_trip_s = 1e9, 5e-4
        self._stats = Counters("stored", "store_dropped", "too_large", "bytes_stored", "corrupt_dropped", "errors",
                               "skipped")
        self._writer = StoreWriter(self._store_now, self._count_dropped, "tritongen-kv-redis-store", _STORE_QUEUE)

    def name(self, key: KvCacheKey) -> str:
        """The Redis key of a chunk: dtype and model in clear (for an operator's SCAN), the full key's digest."""
        return f"tritongen:kv:{self.codec.name}:{key.model_id}:{key.digest}"

    @property
    def stats(self) -> dict[str, int]:
        """The counts at one instant: the store writer adds to them while the engine thread runs."""
        return self._stats.snapshot()

    # ---- protocol ---------------------------------------------------------

    def lookup(self, key: KvCacheKey) -> KvCacheLocation:
        return self.lookup_batch([key])[0]

    def lookup_batch(self, keys: list[KvCacheKey]) -> list[KvCacheLocation]:
        """One pipelined round trip of STRLENs; a value over `max_bytes` is not offered."""
        if not keys:
            return []

        def sizes() -> list[int]:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.strlen(self.name(key))
            return pipe.execute()

        start = time.perf_counter()
        found = self._guarded(sizes)
        if found is None:
            return [NOT_FOUND] * len(keys)
        self.round_trip_s = 0.7 * self.round_trip_s + 0.3 * (time.perf_counter() - start)
        return [self._location(size) for size in found]

    def store(self, entry: KvStoreEntry) -> None:
        """Queue a chunk for the writer thread; dropped (and counted) while backing off or when the queue is full."""
        if not (self.backoff.ready() and self._writer.put(entry)):
            self._count_dropped()

    def fetch(self, key: KvCacheKey) -> FetchedKv | None:
        """The chunk, its TTL renewed; None when it is missing, Redis fails, or the value is corrupt (deleted)."""
        start = time.perf_counter()
        name = self.name(key)
        value = self._guarded(lambda: self.client.getex(name, ex=self.config.ttl_seconds))
        if not isinstance(value, bytes):  # missing (None), or Redis failed
            return None
        try:
            shape, payload = unpack_record(value, key, self.codec.name)
            kv = decode_chunk(self.codec, shape, payload)
        except (CorruptRecord, ValueError):
            self._stats.add(corrupt_dropped=1)
            self._guarded(lambda: self.client.delete(name))
            return None
        elapsed = time.perf_counter() - start
        transfer = max(elapsed - self.round_trip_s, 1e-6)
        self.bandwidth = 0.7 * self.bandwidth + 0.3 * (len(value) / transfer)
        return FetchedKv(key, kv, "redis", elapsed)

    def evict(self, key: KvCacheKey) -> None:
        self._guarded(lambda: self.client.delete(self.name(key)))

    def health(self) -> bool:
        """No network: the writer runs and no failure is being waited out."""
        return self._writer.alive and self.backoff.ready()

    def capabilities(self) -> ConnectorCapabilities:
        return ConnectorCapabilities(distributed=True)

    def flush(self) -> None:
        """Wait until queued stores are written or dropped (tests, shutdown)."""
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
        self.client.close()

    # ---- helpers ----------------------------------------------------------

    def _location(self, size: int) -> KvCacheLocation:
        if size <= 0 or size > self.config.max_bytes:
            return NOT_FOUND
        return KvCacheLocation("redis", 1000.0 * (self.round_trip_s + size / self.bandwidth), size)

    def _guarded(self, operation: Callable[[], T]) -> T | None:
        """Run one Redis operation; None when backing off or when it fails (which starts a backoff)."""
        if not self.backoff.ready():
            self._stats.add(skipped=1)
            return None
        try:
            result = operation()
        except (redis.RedisError, OSError):  # down, slow, refusing: the engine prefills instead
            self._stats.add(errors=1)
            self.backoff.failed()
            return None
        self.backoff.succeeded()
        return result

    def _count_dropped(self) -> None:
        self._stats.add(store_dropped=1)

    def _store_now(self, entry: KvStoreEntry) -> None:
        payload = encode_chunk(self.codec, entry.kv)
        value = pack_record(record_header(entry.key, self.codec.name, list(entry.kv.shape)), payload)
        if len(value) > self.config.max_bytes:
            self._stats.add(too_large=1)
            return
        name, ttl = self.name(entry.key), self.config.ttl_seconds
        if self._guarded(lambda: self.client.set(name, value, ex=ttl, nx=True)):
            self._stats.add(stored=1, bytes_stored=len(value))
