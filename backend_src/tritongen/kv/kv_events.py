"""KV cache events as routers read them: vLLM's `KVEventBatch` of `BlockStored`, `BlockRemoved` and
`AllBlocksCleared`, msgpack-encoded.

One block is one full page. Dynamo's KV router and llm-d's prefix scorer recompute their own block keys from
`token_ids`; the hashes here only identify blocks (a removal names them) and chain a block to its parent, so
they are deterministic (equal prefixes give equal hashes on every replica), never 0 (llm-d reads 0 as "no
parent") and below 2**63 (readers decode them as signed or unsigned 64-bit integers).

The encoding is the array layout: a batch is [ts, events, data_parallel_rank] and an event is [tag, fields...]
in field order. vLLM's newest releases write maps instead; llm-d's decoder and vLLM's earlier subscribers
read arrays only, and Dynamo's relay reads both, so arrays are what every consumer reads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Union

import msgpack
import numpy as np

# The engine's own page pool, whatever device holds it: the tier a router scores first (vLLM's name for it).
MEDIUM_PAGE_POOL = "GPU"


def block_hash(parent: int | None, tokens: tuple[int, ...]) -> int:
    """The hash of a full page, chained to its parent's."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update((parent or 0).to_bytes(8, "big"))
    digest.update(np.asarray(tokens, dtype="<i8").tobytes())
    return (int.from_bytes(digest.digest(), "big") & (2**63 - 1)) or 1


def page_hashes(tokens: list[int], page_size: int) -> list[int]:
    """The block hashes of every full page of `tokens`, each chained to the one before (as the trie makes them)."""
    hashes: list[int] = []
    for start in range(0, len(tokens) // page_size * page_size, page_size):
        hashes.append(block_hash(hashes[-1] if hashes else None, tuple(tokens[start:start + page_size])))
    return hashes


@dataclass(frozen=True)
class BlockStored:
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    medium: str = MEDIUM_PAGE_POOL

    def fields(self) -> list:
        return ["BlockStored", self.block_hashes, self.parent_block_hash, self.token_ids, self.block_size, None,
                self.medium]


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: list[int]
    medium: str = MEDIUM_PAGE_POOL

    def fields(self) -> list:
        return ["BlockRemoved", self.block_hashes, self.medium]


@dataclass(frozen=True)
class AllBlocksCleared:
    def fields(self) -> list:
        return ["AllBlocksCleared"]


KvEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]


def encode_batch(ts: float, events: list[KvEvent], data_parallel_rank: int = 0) -> bytes:
    return msgpack.packb([ts, [e.fields() for e in events], data_parallel_rank])


@dataclass
class KvEventsConfig:
    """Where the engine publishes its KV events (vLLM's KVEventsConfig, ZMQ publisher only).

    `endpoint` empty: off. The PUB socket and the replay ROUTER socket are bound by the engine; an endpoint
    names its address, loopback unless the operator writes another.
    """

    endpoint: str = ""
    replay_endpoint: str = ""
    topic: str = ""
    buffer_steps: int = 10_000  # batches kept for replay

    @property
    def enabled(self) -> bool:
        return bool(self.endpoint)

    def validate(self) -> None:
        for name in ("endpoint", "replay_endpoint"):
            value = getattr(self, name)
            if value and not value.startswith(("tcp://", "ipc://", "inproc://")):
                raise ValueError(f"kv_events_{name} must be a ZMQ address (tcp://host:port, ipc://path), "
                                 f"got {value!r}")
        if self.replay_endpoint and not self.endpoint:
            raise ValueError("kv_events_replay_endpoint needs kv_events_endpoint")
        if self.buffer_steps <= 0:
            raise ValueError("kv_events_buffer_steps must be greater than zero")
