"""KV page storage dtypes: f32, f16, int8 and the two fp8 formats (onnx-genai-engine's KvDType, plus f16).

Quantized formats keep one f32 scale per token and head (over head_dim),
so appending a token never requantises the tokens already stored. fp8 is
a software codec over ml_dtypes' float8 types, scaled into their range.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

KV_DTYPES = ("f32", "f16", "int8", "fp8_e4m3fn", "fp8_e5m2")


@dataclass(frozen=True)
class KvCodec:
    name: str
    storage: np.dtype
    scaled: bool
    max_value: float = 0.0  # the largest magnitude the scaled format represents

    def encode(self, kv: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """f32 [..., tokens, head_dim] -> (stored values, scales [..., tokens] or None)."""
        if not self.scaled:
            return kv.astype(self.storage, copy=False), None  # f32: the caller's copy into the page is the only one
        amax = np.abs(kv).max(axis=-1)
        scales = np.where(amax > 0, amax / self.max_value, 1.0).astype(np.float32)
        scaled = kv / scales[..., None]
        if self.storage == np.int8:
            return np.clip(np.rint(scaled), -127, 127).astype(np.int8), scales
        return scaled.astype(self.storage), scales

    def decode(self, data: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
        values = data.astype(np.float32)
        return values if scales is None else values * scales[..., None]

    def bytes_per_value(self, head_dim: int) -> float:
        """Bytes per stored KV element, scales included."""
        return np.dtype(self.storage).itemsize + (4 / head_dim if self.scaled else 0)


def codec(name: str) -> KvCodec:
    if name == "f32":
        return KvCodec("f32", np.dtype(np.float32), False)
    if name == "f16":
        return KvCodec("f16", np.dtype(np.float16), False)
    if name == "int8":
        return KvCodec("int8", np.dtype(np.int8), True, 127.0)
    if name == "fp8_e4m3fn":
        fp8 = ml_dtypes.float8_e4m3fn
        return KvCodec(name, np.dtype(fp8), True, float(ml_dtypes.finfo(fp8).max))
    if name == "fp8_e5m2":
        fp8 = ml_dtypes.float8_e5m2
        return KvCodec(name, np.dtype(fp8), True, float(ml_dtypes.finfo(fp8).max))
    raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_DTYPES)}, got {name!r}")
