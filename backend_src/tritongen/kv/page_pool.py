"""A fixed pool of KV pages with reference counts and LRU reuse of cached pages.

A page holds `page_size` tokens of KV for every layer. A page whose count
drops to zero but whose content the prefix cache knows stays readable
until the pool needs it (least recently released first), so repeated
prefixes are copied back instead of recomputed.

Layout of `data`: [page, layer, key|value, kv_head, token, head_dim] in the
codec's storage dtype; a quantized dtype adds `scales` [page, layer,
key|value, kv_head, token] (one per token and head, so appending never
requantises). Pages are read and written in f32 through the codec.
"""

from __future__ import annotations

import mmap
from collections import OrderedDict, deque
from typing import Callable

import numpy as np

from .codec import KvCodec, codec


class PagePool:
    def __init__(self, num_pages: int, page_size: int, num_layers: int, num_kv_heads: int, head_dim: int,
                 kv_dtype: str = "f32"):
        if num_pages <= 0 or page_size <= 0:
            raise ValueError("num_gpu_pages and page_size must be greater than zero")
        self.num_pages, self.page_size = num_pages, page_size
        self.codec: KvCodec = codec(kv_dtype)
        shape = (num_pages, num_layers, 2, num_kv_heads, page_size, head_dim)
        self.data = resident_zeros(shape, self.codec.storage)
        self.scales = np.ones(shape[:-1], np.float32) if self.codec.scaled else None
        self.refcount = np.zeros(num_pages, np.int32)
        self._free: deque[int] = deque(range(num_pages))
        self._cached_idle: OrderedDict[int, None] = OrderedDict()  # refcount 0, content kept; LRU first
        self.on_reuse: Callable[[int], None] = lambda page: None  # tells the prefix cache a page is gone

    @property
    def bytes_per_token(self) -> int:
        scales = self.scales[0].nbytes if self.scales is not None else 0
        return (self.data[0].nbytes + scales) // self.page_size

    def write(self, page: int, kv: np.ndarray, start: int = 0) -> None:
        """Store f32 KV [layers, 2, kv_heads, n, head_dim] at token offset `start` of a page."""
        end = start + kv.shape[3]
        data, scales = self.codec.encode(kv)
        self.data[page][:, :, :, start:end] = data
        if scales is not None:
            assert self.scales is not None  # the codec returns scales only when it is scaled
            self.scales[page][:, :, :, start:end] = scales

    def read(self, page: int, n: int) -> np.ndarray:
        """The first n tokens of a page as f32 [layers, 2, kv_heads, n, head_dim]."""
        scales = self.scales[page][:, :, :, :n] if self.scales is not None else None
        return self.codec.decode(self.data[page][:, :, :, :n], scales)

    def num_available(self) -> int:
        return len(self._free) + len(self._cached_idle)

    def num_used(self) -> int:
        return self.num_pages - self.num_available()

    def is_idle_cached(self, page: int) -> bool:
        return page in self._cached_idle

    def allocate(self) -> int | None:
        """A page with refcount 1, or None when every page is referenced."""
        if self._free:
            page = self._free.popleft()
        elif self._cached_idle:
            page, _ = self._cached_idle.popitem(last=False)
            self.on_reuse(page)
        else:
            return None
        self.refcount[page] = 1
        return page

    def acquire(self, page: int) -> None:
        if self.refcount[page] == 0:
            self._cached_idle.pop(page, None)
        self.refcount[page] += 1

    def release(self, page: int, cached: bool) -> None:
        """Drop one reference; an unreferenced page stays readable if the prefix cache holds it."""
        self.refcount[page] -= 1
        if self.refcount[page] < 0:
            raise RuntimeError(f"page {page} released more often than acquired")
        if self.refcount[page] == 0:
            if cached:
                self._cached_idle[page] = None
            else:
                self._free.append(page)

    def forget(self, page: int) -> None:
        """The prefix cache dropped this page: if nobody references it, it is plain free space."""
        if self._cached_idle.pop(page, "absent") is None:
            self._free.append(page)


def resident_zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """Zeros already in memory, so no decode step pays first-touch page faults for the pool.

    The kernel maps and zeroes the whole region at once (MAP_POPULATE). Filling an empty numpy array
    instead costs about three times as long on a large pool: numpy asks for transparent huge pages and
    each first touch may wait for the kernel to compact memory into one.
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    region = mmap.mmap(-1, max(nbytes, 1), flags=flags)
    return np.frombuffer(region, dtype, count=int(np.prod(shape))).reshape(shape)
