"""onnx-genai-engine's KvConnectorConfig: which connector, its chunking, store priority and the recompute baseline.

Configuration only: opening a connector is `open_connector`'s job, so the engine's options do not import a store."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .connector import CachePriority

DEFAULT_CHUNK_SIZE = 256
COMPRESSIONS = ("none", "zlib")
BACKENDS = ("null", "local_tiered", "redis")


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
class RedisTierConfig:
    """A Redis shared by the replicas of one model. The server-side bound is Redis' own (maxmemory with an
    LRU policy); `max_bytes` bounds one value, what a replica writes or reads at once: a replica cannot know
    what the others keep there, and one large value holds Redis' single thread for as long as it copies."""

    url: str = "redis://127.0.0.1:6379/0"  # loopback unless told otherwise; redis://, rediss:// (TLS), unix://
    ttl_seconds: int = 3600  # every value expires; a fetch renews it
    max_bytes: int = 16 << 20  # a 256-token f32 chunk of SmolLM2 is 11.8 MB
    timeout_ms: int = 100  # per socket operation: connect, send, receive

    def validate(self) -> None:
        if self.url.partition("://")[0] not in ("redis", "rediss", "unix"):
            raise ValueError("kv_connector_redis_url must be a redis://, rediss:// or unix:// URL")
        if self.ttl_seconds <= 0 or self.max_bytes <= 0 or self.timeout_ms <= 0:
            raise ValueError("kv_connector_redis_ttl_seconds, _max_bytes and _timeout_ms must be greater than zero")


@dataclass
class KvConnectorConfig:
    backend: str = "null"  # or "local_tiered" or "redis"
    model_id: str | None = None  # namespaces keys, with the model files' digest after it; None: the folder's name
    chunk_size: int = DEFAULT_CHUNK_SIZE
    store_priority: CachePriority = CachePriority.SESSION
    # Prefill cost per token (ms), the baseline a fetch must beat. None: measured at start-up on this machine.
    # A deliberate difference from onnx-genai-engine's default of 0.05 ms, a GPU figure that would make a CPU
    # engine never recompute.
    recompute_ms_per_token: float | None = None
    local_tiered: LocalTieredConfig = field(default_factory=LocalTieredConfig)
    redis: RedisTierConfig = field(default_factory=RedisTierConfig)

    def validate(self, page_size: int) -> None:
        # config.rs of onnx-genai-engine 0.1.0-dev.2: "Tokens per cached chunk for keying. `0` => DEFAULT_CHUNK_SIZE".
        if self.chunk_size == 0:
            self.chunk_size = DEFAULT_CHUNK_SIZE
        if self.backend not in BACKENDS:
            raise ValueError(f"kv_connector must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.chunk_size <= 0 or self.chunk_size % page_size:
            raise ValueError(f"kv connector chunk_size must be a positive multiple of page_size ({page_size})")
        if self.recompute_ms_per_token is not None and self.recompute_ms_per_token <= 0:
            raise ValueError("recompute_ms_per_token must be greater than zero")
        if self.backend == "local_tiered":
            self.local_tiered.validate()
        if self.backend == "redis":
            self.redis.validate()
