"""What onnxruntime's profile says about a run on the GPU: which provider ran each op type, and what the
Memcpy nodes the CUDA provider inserts moved between host and device during each decode call.

A KV buffer bound on the host would show up as a Memcpy node whose tensor has the KV's shape
(rows, kv heads, length, head dim) in every decode call: with the buffers in CUDA memory there is none, and
what is left are the small feeds (token ids, lengths) and whatever the graph itself keeps on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

MEMCPY_OPS = ("MemcpyFromHost", "MemcpyToHost")


@dataclass(frozen=True)
class CallCopies:
    """The Memcpy nodes of one decode call."""

    nodes: int
    bytes: int
    kv_shaped: int  # of those, tensors shaped like a KV buffer


def placed(events: list[dict], ops: tuple[str, ...]) -> dict[str, set[str]]:
    """The providers that ran each of `ops` in the profile."""
    found: dict[str, set[str]] = {op: set() for op in ops}
    for event in events:
        args = event.get("args", {})
        if event.get("cat") == "Node" and args.get("op_name") in found:
            found[args["op_name"]].add(args.get("provider", "?"))
    return found


def kv_shaped(shapes: list[dict], kv_heads: int, head_dim: int) -> bool:
    """Whether any of a node's output shapes ({dtype: dims}) is [rows, kv_heads, length, head_dim]."""
    return any(len(dims) == 4 and dims[1] == kv_heads and dims[3] == head_dim
               for shape in shapes for dims in shape.values())


def decode_copies(events: list[dict], kv_heads: int, head_dim: int, skip_calls: int = 1) -> list[CallCopies]:
    """Per session call (model_run), after the first `skip_calls` (the prefill), its Memcpy nodes."""
    calls = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                   key=lambda e: e["ts"])[skip_calls:]
    copies = [e for e in events if e.get("cat") == "Node" and e.get("args", {}).get("op_name") in MEMCPY_OPS]
    out = []
    for call in calls:
        start, end = call["ts"], call["ts"] + call["dur"]
        inside = [e["args"] for e in copies if start <= e["ts"] <= end]
        out.append(CallCopies(len(inside), sum(int(a.get("output_size", 0)) for a in inside),
                              sum(kv_shaped(a.get("output_type_shape", []), kv_heads, head_dim) for a in inside)))
    return out
