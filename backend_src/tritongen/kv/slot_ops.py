"""The KV copies a scheduling decision implies, as records performed later and in order.

Deciding (which pages a sequence reuses, which slot it takes, which sequence
moves into a freed slot) is bookkeeping; copying KV between slot rows and the
page store is work, done by whoever runs the step. Each record reads its
source when it is performed, not when it is listed, so a list performed in
order copies exactly what immediate copies would have: a page committed from
a slot before that slot is overwritten, a moved row before an admitted
prefix lands in its old place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .connector import CachePriority, KvCacheKey
from .kv_events import BlockStored


@dataclass(frozen=True)
class LoadPage:
    """Tokens [start, start + num_tokens) of a slot from a page of the store."""

    slot: int
    start: int
    page: int
    num_tokens: int


@dataclass(frozen=True)
class LoadChunk:
    """KV fetched from the connector, written at `start` of a slot."""

    slot: int
    start: int
    kv: np.ndarray


@dataclass(frozen=True)
class SavePage:
    """Tokens [start, end) of a slot into a page of the store (a full page, or a pinned session's tail)."""

    page: int
    slot: int
    start: int
    end: int


@dataclass(frozen=True)
class StoreChunk:
    """A computed prompt chunk of a slot, offered to the connector."""

    key: KvCacheKey
    slot: int
    start: int
    priority: CachePriority
    blocks: BlockStored | None


@dataclass(frozen=True)
class MoveSlot:
    """The first `length` tokens of slot src into slot dst: the last running row fills a freed slot."""

    src: int
    dst: int
    length: int


@dataclass(frozen=True)
class ReleaseSlot:
    """A sequence left `slot`: per-slot state beside the KV (a draft model's) forgets it."""

    slot: int


SlotOp = LoadPage | LoadChunk | SavePage | StoreChunk | MoveSlot | ReleaseSlot
