"""A little-endian GGUF file's metadata and tensors, read in one pass over its header.

gguf's GGUFReader keeps every metadata item as numpy views of the file, two per string: SmolLM2's
token and merge lists (about 98,000 strings) take it some 3 s to open. Here values are unpacked from
the mapped bytes directly, and each tensor is one read-only view of the map, shaped as GGUFReader
shapes it (rows reversed from the header's dims; quantized rows as their bytes) so `dequantize` takes it.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType
from gguf.quants import quant_shape_to_byte_shape

_VERSIONS = (2, 3)  # a big-endian file's version reads as neither
_SCALARS = {GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
            GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f",
            GGUFValueType.BOOL: "?", GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q",
            GGUFValueType.FLOAT64: "d"}
_UNQUANTIZED: dict[GGMLQuantizationType, type[np.generic]] = {
    GGMLQuantizationType.F16: np.float16, GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8, GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64}


@dataclass(frozen=True)
class GgufTensor:
    name: str
    tensor_type: GGMLQuantizationType
    data: np.ndarray


class _Cursor:
    """Little-endian values read forward from a buffer."""

    def __init__(self, buffer: mmap.mmap):
        self.buffer, self.offset = buffer, 0

    def take(self, code: str, count: int = 1) -> tuple:
        fmt = f"<{count}{code}"
        values = struct.unpack_from(fmt, self.buffer, self.offset)
        self.offset += struct.calcsize(fmt)
        return values

    def string(self) -> str:
        (size,) = self.take("Q")
        start, self.offset = self.offset, self.offset + size
        return self.buffer[start:self.offset].decode("utf-8")

    def value(self, kind: GGUFValueType) -> Any:
        if kind == GGUFValueType.STRING:
            return self.string()
        if kind == GGUFValueType.ARRAY:
            (item,), (count,) = self.take("I"), self.take("Q")
            item = GGUFValueType(item)
            if item in _SCALARS:
                return list(self.take(_SCALARS[item], count))
            return [self.value(item) for _ in range(count)]
        return self.take(_SCALARS[kind])[0]


class GgufFile:
    """`fields`: every metadata value by key (strings, numbers, lists); `tensors`: by name, in file order."""

    def __init__(self, path: str | Path):
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        cursor = _Cursor(self._map)
        (magic,), (version,) = cursor.take("I"), cursor.take("I")
        if magic != GGUF_MAGIC or version not in _VERSIONS:
            raise ValueError(f"{path} is not a little-endian GGUF file of version 2 or 3")
        tensor_count, field_count = cursor.take("Q", 2)
        self.fields: dict[str, Any] = {}
        for _ in range(field_count):
            key = cursor.string()
            if key in self.fields:
                raise ValueError(f"{path}: metadata key {key!r} twice")
            self.fields[key] = cursor.value(GGUFValueType(cursor.take("I")[0]))
        infos = []
        for _ in range(tensor_count):
            name = cursor.string()
            (dims,) = cursor.take("I")
            infos.append((name, cursor.take("Q", dims), GGMLQuantizationType(cursor.take("I")[0]), cursor.take("Q")[0]))
        alignment = self.fields.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"{path}: general.alignment {alignment!r} is not a power of two")
        start = -(-cursor.offset // alignment) * alignment
        self.tensors: dict[str, GgufTensor] = {}
        for name, dims, kind, offset in infos:
            if name in self.tensors:
                raise ValueError(f"{path}: tensor {name!r} twice")
            self.tensors[name] = GgufTensor(name, kind, self._view(start + offset, tuple(reversed(dims)), kind))

    def field(self, key: str) -> Any:
        """A metadata value; None when the file has no such key."""
        return self.fields.get(key)

    def _view(self, offset: int, shape: tuple[int, ...], kind: GGMLQuantizationType) -> np.ndarray:
        dtype = _UNQUANTIZED.get(kind)
        if dtype is None:  # quantized: each row as the bytes of its blocks
            dtype, shape = np.uint8, quant_shape_to_byte_shape(shape, kind)
        return np.frombuffer(self._map, dtype, int(np.prod(shape)), offset).reshape(shape)
