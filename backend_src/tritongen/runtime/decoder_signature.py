"""What a decoder graph takes and gives, checked at load: the KV layout to use, its dtypes and dimensions.

A graph is served in the slot layout (one KV buffer per layer bound as past
and present, no copies) when its attention is GroupQueryAttention: our
builder's graphs take `seqlens_k` and `total_sequence_length`,
onnxruntime-genai's take a right-padded `attention_mask` whose row sums are
the rows' lengths. Any other graph in the past/present convention (Optimum's
concat exports) is served in the concat layout. Whatever else a graph asks
for is refused at load, naming the file and the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .graph_ops import graph_op_types

_KV = re.compile(r"past_key_values\.(\d+)\.(key|value)$")
_KNOWN = {"input_ids", "attention_mask", "position_ids", "seqlens_k", "total_sequence_length", "num_logits_to_keep"}
_FLOATS = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


@dataclass(frozen=True)
class DecoderShape:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int


@dataclass(frozen=True)
class DecoderSignature:
    shape: DecoderShape
    layout: str  # "slots" (GroupQueryAttention over shared buffers) or "concat"
    inputs: frozenset[str]
    kv_dtype: type  # np.float32 or np.float16, as the graph takes its KV
    logits_dtype: type


def open_session(model_path: Path, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
    try:
        return ort.InferenceSession(str(model_path), options, providers=providers)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types: an unsupported op, a bad file
        raise ValueError(f"{model_path}: onnxruntime cannot load this graph: {exc}") from None


@lru_cache(maxsize=8)
def uses_group_query_attention(model_path: Path) -> bool:
    """Whether the graph's attention is GroupQueryAttention (its node list only; weights are not read).

    A file that is not an ONNX model is left to onnxruntime, whose load error then names the fault."""
    try:
        return "GroupQueryAttention" in graph_op_types(model_path)
    except Exception:  # noqa: BLE001 - a short, empty or foreign file: reported by open_session instead
        return False


def signature(session: ort.InferenceSession, model_path: Path, head_dim: int | None = None,
              vocab_size: int | None = None) -> DecoderSignature:
    """The graph's shape and feeds; ValueError naming the file and the input for anything it cannot serve."""
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = {o.name: o for o in session.get_outputs()}
    unknown = sorted(n for n in inputs if n not in _KNOWN and not _KV.match(n))
    if unknown:
        raise ValueError(f"{model_path}: unknown input(s) {', '.join(unknown)} (a decoder takes input_ids, "
                         "attention_mask or seqlens_k, position_ids and past_key_values.N.key|value)")
    for name in ("input_ids", "past_key_values.0.key"):
        if name not in inputs:
            raise ValueError(f"{model_path}: no {name} input: not a decoder with a KV cache")
    if "logits" not in outputs:
        raise ValueError(f"{model_path}: no logits output")
    if "seqlens_k" not in inputs and "attention_mask" not in inputs:
        raise ValueError(f"{model_path}: neither attention_mask nor seqlens_k: the rows' lengths cannot be given")
    num_layers = sum(1 for n in inputs if n.startswith("past_key_values.") and n.endswith(".key"))
    for i in range(num_layers):
        for part in ("key", "value"):
            for name in (f"past_key_values.{i}.{part}", f"present.{i}.{part}"):
                if name not in inputs and name not in outputs:
                    raise ValueError(f"{model_path}: {name} is missing (layers 0..{num_layers - 1} need it)")
    kv = inputs["past_key_values.0.key"]
    if kv.type not in _FLOATS or outputs["logits"].type not in _FLOATS:
        raise ValueError(f"{model_path}: KV {kv.type} / logits {outputs['logits'].type}: only float32 and float16 "
                         "are served")
    kv_heads, graph_head_dim = kv.shape[1], kv.shape[3]
    if not isinstance(kv_heads, int):
        raise ValueError(f"{model_path}: past_key_values.0.key has a symbolic head count ({kv_heads})")
    if not isinstance(graph_head_dim, int):
        if head_dim is None:
            raise ValueError(f"{model_path}: the KV head dimension is symbolic ({graph_head_dim}) and the folder's "
                             "metadata does not give it (genai_config.json head_size or config.json head_dim)")
        graph_head_dim = head_dim
    vocab = outputs["logits"].shape[-1]
    vocab = vocab if isinstance(vocab, int) else vocab_size
    if vocab is None:
        raise ValueError(f"{model_path}: the logits' vocabulary dimension is symbolic and no vocab size is known")
    if "seqlens_k" in inputs or uses_group_query_attention(model_path):
        layout = "slots"
    elif "position_ids" in inputs:
        layout = "concat"
    else:
        raise ValueError(f"{model_path}: a concat past/present graph without position_ids: its positions cannot "
                         "be given for left-padded rows")
    return DecoderSignature(DecoderShape(num_layers, kv_heads, graph_head_dim, int(vocab)), layout,
                            frozenset(inputs), _FLOATS[kv.type], _FLOATS[outputs["logits"].type])
