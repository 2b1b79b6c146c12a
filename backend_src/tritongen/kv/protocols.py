"""What the KV layer needs of the layers above it, so that it imports none of them.

The page manager copies KV between a sequence's slot rows and the page store;
it reads and updates a running sequence's placement. The engine's `Sequence`
and the runtime's slot decoders satisfy these protocols.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .connector import KvCacheKey
from .prefix_cache import Node


class SlotRows(Protocol):
    """The running batch's KV rows, one slot per sequence."""

    def read(self, slot: int, start: int, end: int) -> np.ndarray:
        """Tokens [start, end) of a slot as [layers, 2, kv_heads, tokens, head_dim]."""

    def write(self, slot: int, start: int, kv: np.ndarray) -> None:
        """Put KV in that shape at `start` of a slot."""

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy the first `length` tokens of slot src into slot dst."""


class PagedSequence(Protocol):
    """A sequence's tokens and where its KV lives."""

    prompt_ids: list[int]
    tokens: list[int]
    num_computed: int
    num_preemptions: int
    slot: int | None
    pages: list[int]
    num_cached_pages: int
    cache_node: Node | None
    prefix_hit_len: int
    session_id: str | None
    chunk_keys: list[KvCacheKey] | None
    chunks_stored: int

    @property
    def prefill_target(self) -> int:
        """Tokens whose KV the prompt phase computes."""


class SlotListener(Protocol):
    """State kept per slot beside the KV (a draft model's own KV), told when rows move or leave."""

    def move(self, src: int, dst: int, length: int) -> None:
        """The sequence in slot src now lives in slot dst."""

    def release(self, slot: int) -> None:
        """The sequence in `slot` left the running batch."""
