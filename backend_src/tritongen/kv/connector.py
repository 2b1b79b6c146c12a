"""The KV connector protocol of onnx-genai-engine (its KvCacheConnector), and its Null backend.

A connector stores prompt chunks outside the page pool and gives
them back later. Keys carry a rolling cumulative hash, so equal keys mean
identical prefixes, not just identical chunks. Each location reports an
estimated load time so the engine fetches only what is cheaper than
recomputing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

import numpy as np

from .kv_events import BlockStored, KvEvent


class CachePriority(Enum):
    """Eviction order: opportunistic chunks go first, system prompts last."""

    OPPORTUNISTIC = 0
    SESSION = 1
    SYSTEM_PROMPT = 2


@dataclass(frozen=True)
class KvCacheKey:
    model_id: str
    layer_range: tuple[int, int]
    chunk_hash: str  # cumulative over every token up to the end of this chunk
    chunk_index: int
    num_tokens: int

    @property
    def digest(self) -> str:
        """A file-name-safe identity of the whole key."""
        text = f"{self.model_id}|{self.layer_range}|{self.chunk_hash}|{self.chunk_index}|{self.num_tokens}"
        return hashlib.sha256(text.encode()).hexdigest()[:40]


def chunk_keys(model_id: str, num_layers: int, tokens: list[int], chunk_size: int,
               page_size: int | None = None) -> list[KvCacheKey]:
    """Keys of every complete chunk of `tokens`, each hash chained to the previous one. With `page_size`, the
    whole pages after the last complete chunk get a key too, a shorter chunk keyed by its own token count, so
    every full page of a prompt reaches the connector."""
    granule = page_size or chunk_size
    end = len(tokens) // granule * granule
    keys, rolling = [], hashlib.sha256(model_id.encode()).hexdigest()
    for index, start in enumerate(range(0, end, chunk_size)):
        chunk = np.asarray(tokens[start:min(start + chunk_size, end)], dtype="<i8")
        rolling = hashlib.sha256(rolling.encode() + chunk.tobytes()).hexdigest()
        keys.append(KvCacheKey(model_id, (0, num_layers), rolling, index, len(chunk)))
    return keys


@dataclass(frozen=True)
class KvCacheLocation:
    tier: str  # "cpu", "disk", "redis" or "not_found"
    estimated_load_ms: float = 0.0
    size_bytes: int = 0

    @property
    def found(self) -> bool:
        return self.tier != "not_found"


NOT_FOUND = KvCacheLocation("not_found")


@dataclass
class KvStoreEntry:
    key: KvCacheKey
    kv: np.ndarray  # f32 [layers, 2, kv_heads, tokens, head_dim]
    priority: CachePriority = CachePriority.SESSION
    blocks: BlockStored | None = None  # the chunk's pages as a KV event, when the engine publishes events


@dataclass
class FetchedKv:
    key: KvCacheKey
    kv: np.ndarray
    tier: str
    transfer_seconds: float


@dataclass
class ConnectorCapabilities:
    distributed: bool = False
    prefetch: bool = False
    pinnable: bool = False
    max_chunk_tokens: int = 0
    compression: list[str] = field(default_factory=list)


class KvCacheConnector:
    """The protocol. Null behaviour by default: nothing is stored, every lookup misses.

    `on_event`, set by the engine when it publishes KV events, is where a connector whose tiers it can watch
    announces the pages each tier gains and loses (the tier's name as the medium).
    """

    on_event: Callable[[KvEvent], None] | None = None

    def lookup(self, key: KvCacheKey) -> KvCacheLocation:
        return NOT_FOUND

    def lookup_batch(self, keys: list[KvCacheKey]) -> list[KvCacheLocation]:
        return [self.lookup(k) for k in keys]

    def store(self, entry: KvStoreEntry) -> None:
        pass

    def fetch(self, key: KvCacheKey) -> FetchedKv | None:
        return None

    def prefetch(self, key: KvCacheKey) -> None:
        pass

    def pin(self, key: KvCacheKey) -> None:
        pass

    def unpin(self, key: KvCacheKey) -> None:
        pass

    def evict(self, key: KvCacheKey) -> None:
        pass

    def health(self) -> bool:
        return True

    def capabilities(self) -> ConnectorCapabilities:
        return ConnectorCapabilities()

    def close(self) -> None:
        pass


class NullConnector(KvCacheConnector):
    """The default: in-process prefix reuse only, exactly the engine's behaviour without a connector."""
