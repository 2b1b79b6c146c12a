"""The operator types of an ONNX graph's top level, read without its weights.

Choosing the KV layout needs only the graph's node list, but `onnx.load`
reads and parses the whole file, weights included (about 0.8 s for
SmolLM2's 540 MB graph, at every engine open). The file is a protobuf
message: this walks its wire format over a memory map, skips every field
but the graph's nodes, and parses each node with onnx's own NodeProto.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import onnx

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_NODE = 1  # GraphProto.node
_LENGTH_DELIMITED, _VARINT, _FIXED64, _FIXED32 = 2, 0, 1, 5


def _varint(buf, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf, start: int, end: int):
    """(field number, payload start, payload end) of each length-delimited field in buf[start:end]; other
    fields are skipped."""
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        kind = tag & 7
        if kind == _LENGTH_DELIMITED:
            length, pos = _varint(buf, pos)
            yield tag >> 3, pos, pos + length
            pos += length
        elif kind == _VARINT:
            _, pos = _varint(buf, pos)
        elif kind in (_FIXED64, _FIXED32):
            pos += 8 if kind == _FIXED64 else 4
        else:
            raise ValueError(f"unexpected protobuf wire type {kind}")
    if pos != end:
        raise ValueError("truncated protobuf message")


def graph_op_types(model_path: Path) -> set[str]:
    """The op_type of every node at the graph's top level; ValueError for a file that is not such a message."""
    with open(model_path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        ops = set()
        for field, start, end in _fields(buf, 0, len(buf)):
            if field != _MODEL_GRAPH:
                continue
            for inner, node_start, node_end in _fields(buf, start, end):
                if inner == _GRAPH_NODE:
                    ops.add(onnx.NodeProto.FromString(buf[node_start:node_end]).op_type)
        return ops
