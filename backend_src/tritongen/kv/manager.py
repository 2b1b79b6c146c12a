"""Ties the slot KV of running sequences to the page store: reservation, prefix reuse, sessions.

Pages are the accounting unit (a running sequence holds pages for every
computed token) and the host-side copy of KV: a page is written from the
slot once it is full, then registered in the prefix trie so later requests
(or this one, after preemption) copy it back instead of recomputing.
A finished session keeps its pages pinned, partial last page included, within
bounds: pages per session, pages over all sessions (least recently used pins
go first), and an idle time after which a pin is released.

Every copy between slot rows and the store is listed as a slot operation
(slot_ops) rather than done: the scheduler decides, the model runner copies
before its model calls, and what the scheduler decides after a step is
copied before the step ends (`apply`).
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from .connector import CachePriority, KvCacheConnector, KvCacheKey, KvStoreEntry, chunk_keys
from .kv_events import BlockStored, page_hashes
from .page_pool import PagePool
from .prefix_cache import Node, PrefixCache
from .protocols import PagedSequence, SlotListener, SlotRows
from .slot_ops import LoadChunk, LoadPage, MoveSlot, ReleaseSlot, SavePage, SlotOp, StoreChunk


@dataclass
class SessionPin:
    tokens: list[int]  # tokens whose KV the pages hold
    pages: list[int]
    pinned_at: float = 0.0  # monotonic time the turn ended


@dataclass
class SessionLimits:
    max_pages: int  # per session
    max_total_pages: int  # over all sessions
    idle_seconds: float


@dataclass
class ConnectorLink:
    """How this engine uses its KV connector: key namespace, chunking, the recompute baseline."""

    connector: KvCacheConnector
    model_id: str
    num_layers: int
    chunk_size: int
    store_priority: CachePriority
    recompute_ms_per_token: float
    chunk_shape: tuple[int, ...]  # [layers, 2, kv_heads, chunk_size, head_dim]

    def shape_of(self, key: KvCacheKey) -> tuple[int, ...]:
        """The shape a fetched chunk must have (a prompt's last chunk may be shorter)."""
        return (*self.chunk_shape[:3], key.num_tokens, self.chunk_shape[4])


class KvManager:
    def __init__(self, pool: PagePool, slots: SlotRows, link: ConnectorLink | None = None,
                 session_limits: SessionLimits | None = None):
        self.pool = pool
        self.session_limits = session_limits or SessionLimits(pool.num_pages, pool.num_pages, float("inf"))
        self.cache = PrefixCache(pool)
        self.slots = slots
        self.slot_listeners: list[SlotListener] = []  # per-slot state beside the KV (speculative proposers)
        self.ops: list[SlotOp] = []  # copies decided and not yet performed, in order
        self.link = link
        self.sessions: OrderedDict[str, SessionPin] = OrderedDict()
        # unavailable: a lookup missed because the connector is not healthy (a remote store down, backing off).
        self.connector_stats = {"hit_cpu": 0, "hit_disk": 0, "hit_redis": 0, "miss": 0, "unavailable": 0,
                                "fetched_bytes": 0, "decided_fetch": 0, "decided_recompute": 0, "fetch_failed": 0,
                                "stored_chunks": 0}

    def take_ops(self) -> list[SlotOp]:
        ops, self.ops = self.ops, []
        return ops

    def apply(self, ops: list[SlotOp]) -> None:
        """Perform listed copies in their order; each reads its source now."""
        for op in ops:
            if isinstance(op, LoadPage):
                self.slots.write(op.slot, op.start, self.pool.read(op.page, op.num_tokens))
            elif isinstance(op, LoadChunk):
                self.slots.write(op.slot, op.start, op.kv)
            elif isinstance(op, SavePage):
                self.pool.write(op.page, self.slots.read(op.slot, op.start, op.end))
            elif isinstance(op, StoreChunk):
                kv = self.slots.read(op.slot, op.start, op.start + op.key.num_tokens)
                assert self.link is not None  # only a linked manager lists connector stores
                self.link.connector.store(KvStoreEntry(op.key, kv, op.priority, op.blocks))
            elif isinstance(op, MoveSlot):
                self.slots.move(op.src, op.dst, op.length)
                for listener in self.slot_listeners:
                    listener.move(op.src, op.dst, op.length)
            else:
                for listener in self.slot_listeners:
                    listener.release(op.slot)

    def vacate(self, slot: int, last_slot: int | None, length: int) -> None:
        """A sequence left `slot`; the batch's last row (at `last_slot`, `length` tokens) moves into it."""
        self.ops.append(ReleaseSlot(slot))
        if last_slot is not None:
            self.ops.append(MoveSlot(last_slot, slot, length))

    @property
    def page_size(self) -> int:
        return self.pool.page_size

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    # ---- admission -----------------------------------------------------------

    def reusable(self, seq: PagedSequence) -> tuple[list[int], int, SessionPin | Node]:
        """(pages holding reusable KV, tokens reused, trie node or session pin) for a sequence about to run.

        With a session pin the last page may be partly reused (its tail is
        copied to the slot, the page itself is not kept: the new turn writes there).
        """
        limit = seq.prefill_target - 1  # at least one token is computed, for its logits
        pin = self.sessions.get(seq.session_id) if seq.session_id else None
        if pin is not None:
            common = 0
            for a, b in zip(pin.tokens, seq.tokens[:limit]):
                if a != b:
                    break
                common += 1
            return pin.pages[: self.pages_for(common)], common, pin
        pages, node = self.cache.match(seq.tokens[:limit])
        return pages, len(pages) * self.page_size, node

    def can_admit(self, seq: PagedSequence) -> bool:
        """Whether admitting `seq` now finds every page it needs, evicting session pins if it must.

        The one count admission trusts: pages it reuses are kept out of what
        eviction would free (admission holds them), and a page held by several
        pins frees only when all of them go. `admit` then never comes up short.
        """
        pages, reused, source = self.reusable(seq)
        if isinstance(source, SessionPin):
            held = pages[: reused // self.page_size]  # the pin's full pages pass to the sequence
            needed = self.pages_for(seq.prefill_target + 1) - len(held)
        else:
            held = pages
            idle_reused = sum(1 for p in pages if self.pool.is_idle_cached(p))  # leave the free count when held
            needed = self.pages_for(seq.prefill_target + 1) - len(pages) + idle_reused
        return needed <= self.pool.num_available() + self.evictable_pages(set(held))

    def evictable_pages(self, held: AbstractSet[int] = frozenset()) -> int:
        """Pages that evicting every session pin would hand back to the pool, apart from `held`."""
        pins = Counter(p for pin in self.sessions.values() for p in pin.pages)
        return sum(1 for page, n in pins.items() if page not in held and self.pool.refcount[page] == n)

    def admit(self, seq: PagedSequence, slot: int) -> bool:
        """Place a sequence in `slot`: list the copies of the KV that exists, reserve pages for the rest of its
        prompt.

        False, with nothing held, only if `can_admit` was wrong (the engine counts it; tests expect none).
        """
        pages, reused, source = self.reusable(seq)
        for i, page in enumerate(pages):
            start = i * self.page_size
            self.ops.append(LoadPage(slot, start, page, min(self.page_size, reused - start)))
        if isinstance(source, SessionPin):
            assert seq.session_id is not None  # a pin is only looked up under the sequence's session id
            del self.sessions[seq.session_id]
            keep = reused // self.page_size  # full pages stay valid; a partial one will be rewritten
            for page in source.pages[keep:]:
                self.pool.release(page, page in self.cache)
            pages, node = pages[:keep], None
        else:
            for page in pages:
                self.pool.acquire(page)
            node = source
            reused = self._fetch_from_connector(seq, slot, reused)
        seq.slot, seq.pages, seq.num_cached_pages, seq.cache_node = slot, list(pages), len(pages), node
        if not self.reserve(seq, seq.prefill_target):
            self._drop_pages(seq)
            return False
        seq.num_computed = reused
        if seq.num_preemptions == 0:
            seq.prefix_hit_len = reused
        return True

    def _keys(self, seq: PagedSequence, link: ConnectorLink) -> list[KvCacheKey]:
        """Keys of the prompt's complete chunks and of the whole pages after them."""
        if seq.chunk_keys is None:
            seq.chunk_keys = chunk_keys(link.model_id, link.num_layers, seq.prompt_ids, link.chunk_size,
                                        self.page_size)
        return seq.chunk_keys

    @staticmethod
    def _start(key: KvCacheKey, link: ConnectorLink) -> int:
        return key.chunk_index * link.chunk_size

    def _fetch_from_connector(self, seq: PagedSequence, slot: int, reused: int) -> int:
        """Extend the in-process hit with chunks the connector holds, while fetching beats recomputing.

        Whole pages only, and at least one prompt token left to compute (for its logits): a chunk that runs
        past that is fetched and only its leading pages used, so a repeated prompt reuses all but one page.
        """
        if self.link is None:
            return reused
        link, stats = self.link, self.connector_stats
        limit = (seq.prefill_target - 1) // self.page_size * self.page_size
        keys = [k for k in self._keys(seq, link)[reused // link.chunk_size:]
                if self._start(k, link) < limit and min(self._start(k, link) + k.num_tokens, limit) > reused]
        for key, location in zip(keys, link.connector.lookup_batch(keys)):
            if not location.found:
                stats["miss" if link.connector.health() else "unavailable"] += 1
                break
            if location.estimated_load_ms >= link.recompute_ms_per_token * key.num_tokens:
                stats["decided_recompute"] += 1
                break
            fetched = link.connector.fetch(key)
            if fetched is None or fetched.kv.shape != link.shape_of(key):  # vanished, corrupt: recompute from here
                stats["fetch_failed"] += 1
                break
            stats["decided_fetch"] += 1
            stats[f"hit_{fetched.tier}"] += 1
            stats["fetched_bytes"] += location.size_bytes  # as stored: the page dtype, compressed or not
            start = self._start(key, link)
            reused = min(start + key.num_tokens, limit)
            self.ops.append(LoadChunk(slot, start, fetched.kv[:, :, :, :reused - start]))
            seq.chunks_stored = max(seq.chunks_stored, key.chunk_index + 1)  # already held by the connector
        return reused

    def _store_prompt_chunks(self, seq: PagedSequence, link: ConnectorLink, slot: int) -> None:
        """Offer each prompt chunk whose tokens are all computed to the connector once, asking what it holds in
        one batch (the store itself runs in the background; an unhealthy connector is not offered any)."""
        computed = min(seq.num_computed, len(seq.prompt_ids))
        keys = self._keys(seq, link)[seq.chunks_stored:]
        ready = [k for k in keys if self._start(k, link) + k.num_tokens <= computed]
        offered = ready if ready and link.connector.health() else []
        for key, location in zip(offered, link.connector.lookup_batch(offered)):
            if not location.found:
                start = self._start(key, link)
                self.ops.append(StoreChunk(key, slot, start, link.store_priority, self._chunk_blocks(seq, key, start)))
                self.connector_stats["stored_chunks"] += 1
        seq.chunks_stored += len(ready)

    def _chunk_blocks(self, seq: PagedSequence, key: KvCacheKey, start: int) -> BlockStored | None:
        """A stored chunk's pages as the event its tiers announce, hashed as the prefix trie hashes them; None
        while the engine publishes no events."""
        if self.cache.events is None:
            return None
        ps, end = self.page_size, start + key.num_tokens
        hashes = page_hashes(seq.prompt_ids[:end], ps)
        first = start // ps
        return BlockStored(hashes[first:], hashes[first - 1] if first else None, seq.prompt_ids[start:end], ps)

    def reserve(self, seq: PagedSequence, num_tokens: int) -> bool:
        """Make the page table cover `num_tokens`, evicting session pins if it must; False if the pool runs dry
        (the pages found so far stay in the table)."""
        while len(seq.pages) < self.pages_for(num_tokens):
            page = self.pool.allocate()
            if page is None:
                page = self._evict_session_and_allocate()
            if page is None:
                return False
            seq.pages.append(page)
        return True

    def _evict_session_and_allocate(self) -> int | None:
        while self.sessions:
            self._unpin_oldest()
            page = self.pool.allocate()
            if page is not None:
                return page
        return None

    # ---- while running -------------------------------------------------------

    def commit_full_pages(self, seq: PagedSequence) -> None:
        """List the copies of newly completed pages from the slot to the store; offer them to the prefix trie."""
        slot = seq.slot
        assert slot is not None  # only a placed sequence (admitted, not yet released) computes KV
        ps = self.page_size
        full = seq.num_computed // ps
        while seq.num_cached_pages < full:
            i = seq.num_cached_pages
            page = seq.pages[i]
            self.ops.append(SavePage(page, slot, i * ps, (i + 1) * ps))
            if seq.cache_node is not None:
                node = self.cache.insert(seq.cache_node, tuple(seq.tokens[i * ps:(i + 1) * ps]), page)
                seq.cache_node = node
            seq.num_cached_pages += 1
        if self.link is not None:
            self._store_prompt_chunks(seq, self.link, slot)

    def release(self, seq: PagedSequence, keep_session: bool) -> None:
        """A sequence leaves its slot: pin its KV (up to the per-session bound) for its session, or hand its pages
        back to the pool."""
        self.commit_full_pages(seq)
        ps = self.page_size
        kept_tokens = min(seq.num_computed, self.session_limits.max_pages * ps)
        if keep_session and seq.session_id and kept_tokens:
            kept = self.pages_for(kept_tokens)
            if kept_tokens % ps:
                assert seq.slot is not None  # commit_full_pages above checked it
                page = seq.pages[kept - 1]
                self.ops.append(SavePage(page, seq.slot, (kept - 1) * ps, kept_tokens))
            for page in seq.pages[kept:]:
                self.pool.release(page, page in self.cache)
            self.sessions[seq.session_id] = SessionPin(seq.tokens[:kept_tokens], seq.pages[:kept], time.monotonic())
            seq.pages = []
            while len({p for pin in self.sessions.values() for p in pin.pages}) > self.session_limits.max_total_pages:
                self._unpin_oldest()
        self._drop_pages(seq)

    def expire_sessions(self, now: float) -> float | None:
        """Release pins idle longer than the bound; seconds until the next one expires (None: no pin)."""
        idle = self.session_limits.idle_seconds
        while self.sessions and next(iter(self.sessions.values())).pinned_at + idle <= now:
            self._unpin_oldest()
        return next(iter(self.sessions.values())).pinned_at + idle - now if self.sessions else None

    def _unpin_oldest(self) -> None:
        _, pin = self.sessions.popitem(last=False)
        for page in pin.pages:
            self.pool.release(page, page in self.cache)

    def _drop_pages(self, seq: PagedSequence) -> None:
        """Release the pages the sequence still holds; it has no KV placement afterwards."""
        for page in seq.pages:
            self.pool.release(page, page in self.cache)
        seq.pages, seq.num_cached_pages, seq.cache_node, seq.num_computed = [], 0, None, 0

    def close_session(self, session_id: str) -> bool:
        pin = self.sessions.pop(session_id, None)
        if pin is None:
            return False
        for page in pin.pages:
            self.pool.release(page, page in self.cache)
        return True
