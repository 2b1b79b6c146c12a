"""A chunk's KV as bytes in a page dtype: the codec's stored values, then (scaled dtypes) its f32 scales.

Every connector tier stores chunks this way, so a chunk costs the dtype's bytes rather than f32's, and a
fetched chunk decodes to exactly what the page store gives for the same KV (the same codec, encode then decode).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .codec import KvCodec


def chunk_nbytes(kv_codec: KvCodec, shape: Sequence[int]) -> int:
    """Bytes of a chunk of `shape` [layers, 2, kv_heads, tokens, head_dim], scales included (exact integers:
    a forged header's shape never overflows)."""
    values = math.prod(shape)
    return values * kv_codec.storage.itemsize + (4 * (values // shape[-1]) if kv_codec.scaled else 0)


def encode_chunk(kv_codec: KvCodec, kv: np.ndarray) -> bytes:
    """f32 KV -> the stored values' bytes (little-endian), then the scales'."""
    data, scales = kv_codec.encode(np.asarray(kv, np.float32))
    raw = np.ascontiguousarray(data, kv_codec.storage.newbyteorder("<")).tobytes()
    return raw if scales is None else raw + np.ascontiguousarray(scales, "<f4").tobytes()


def decode_chunk(kv_codec: KvCodec, shape: Sequence[int], raw: bytes | memoryview) -> np.ndarray:
    """The f32 KV `encode_chunk` wrote; ValueError if `raw` is not exactly a chunk of `shape`."""
    if len(raw) != chunk_nbytes(kv_codec, shape):
        raise ValueError(f"{len(raw)} bytes do not hold a {kv_codec.name} chunk of shape {list(shape)}")
    count = math.prod(shape)
    data = np.frombuffer(raw, kv_codec.storage.newbyteorder("<"), count=count).reshape(shape)
    scales = None
    if kv_codec.scaled:
        offset = count * kv_codec.storage.itemsize
        scales = np.frombuffer(raw, "<f4", offset=offset).reshape(tuple(shape[:-1]))
    return kv_codec.decode(data, scales)
