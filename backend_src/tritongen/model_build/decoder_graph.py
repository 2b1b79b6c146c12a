"""Llama decoder as an ONNX graph, in two attention layouts.

`concat` is the interchange format (the ONNX convention in docs/contract.md): past/present KV that
grow by concatenation, an attention mask and position ids; the naming that
optimum and onnxruntime-genai use, so the file runs unchanged in those peers.

`gqa` is the fast layout the engine serves: one
com.microsoft.GroupQueryAttention per layer (rotary inside the op, ragged
rows through `seqlens_k`), with past and present of shape
[B, kv_heads, max_len, head_dim] meant to be bound to one shared buffer.

Both return the residual stream after a few layers for speculative heads.
`concat` returns logits for every position. `gqa` returns them for the last
`num_logits_to_keep` positions (an int64 [1] input; 0: every position,
which speculative verification needs): a prompt chunk needs only its last
one, and the LM head over every position is about a fifth of a prompt's work.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .llama_weights import LlamaSpec, LlamaWeights, hidden_state_layers

OPSET = 18
F32_MIN = float(np.finfo(np.float32).min)
ATTENTION_LAYOUTS = ("concat", "gqa")


class QkvWeights(Protocol):
    """What an attention layer reads of a layer's weights (LayerWeights has them): q, k, v as [out, in]."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray


class Graph:
    """Accumulates nodes and initializers with unique, readable names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, domain: str = "", outputs: int = 1, **attrs):
        self._count += 1
        outs = [out] if out else [f"{op_type.lower()}_{self._count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"n{self._count}_{op_type}", domain=domain,
                                           **attrs))
        return outs[0] if outputs == 1 else outs


def rms_norm(g: Graph, x: str, weight: str) -> str:
    """Pow-ReduceMean-Add-Sqrt-Div-Mul: the pattern onnxruntime fuses."""
    mean = g.op("ReduceMean", [g.op("Pow", [x, "c_two"]), "c_axis_last"], keepdims=1)
    std = g.op("Sqrt", [g.op("Add", [mean, "c_eps"])])
    return g.op("Mul", [g.op("Div", [x, std]), weight])


def split_heads(g: Graph, x: str, n: int, head_dim: int) -> str:
    """[b, s, n*d] -> [b, n, s, d]."""
    shaped = g.op("Reshape", [x, g.const(f"shape_heads_{g._count}", np.array([0, 0, n, head_dim], np.int64))])
    return g.op("Transpose", [shaped], perm=[0, 2, 1, 3])


def rotary(g: Graph, x: str, cos: str, sin: str) -> str:
    x1 = g.op("Slice", [x, "c_zero", "c_half", "c_axis_last"])
    x2 = g.op("Slice", [x, "c_half", "c_big", "c_axis_last"])
    rotated = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])


def swiglu(g: Graph, xn: str, prefix: str) -> str:
    """The llama MLP: down(silu(gate(x)) * up(x)), weights `{prefix}gate_t|up_t|down_t`."""
    gate = g.op("MatMul", [xn, prefix + "gate_t"])
    act = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
    return g.op("MatMul", [g.op("Mul", [act, g.op("MatMul", [xn, prefix + "up_t"])]), prefix + "down_t"])


def rope_tables(g: Graph, spec: LlamaSpec) -> tuple[str, str]:
    """cos and sin [b, 1, s, head_dim] for rotate-half rotary at `position_ids`."""
    hd = spec.head_dim
    inv_freq = 1.0 / (spec.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    g.const("inv_freq", inv_freq.astype(np.float32).reshape(1, 1, -1))
    pos = g.op("Cast", ["position_ids"], to=TensorProto.FLOAT)
    freqs = g.op("Mul", [g.op("Unsqueeze", [pos, "c_axis_last"]), "inv_freq"])
    angles = g.op("Unsqueeze", [g.op("Concat", [freqs, freqs], axis=-1), "c_one"])
    return g.op("Cos", [angles], out="rope_cos"), g.op("Sin", [angles], out="rope_sin")


class ConcatAttention:
    """Rotary and mask from position_ids / attention_mask; KV grows by Concat."""

    def __init__(self, g: Graph, spec: LlamaSpec, sequence_input: str = "input_ids"):
        self.spec = spec
        hd = spec.head_dim
        g.const("c_zero", np.array([0], np.int64))
        g.const("c_one", np.array([1], np.int64))
        g.const("c_half", np.array([hd // 2], np.int64))
        g.const("c_big", np.array([np.iinfo(np.int64).max], np.int64))
        g.const("c_scale", np.float32(1.0 / np.sqrt(hd)))
        self.cos, self.sin = rope_tables(g, spec)
        # Additive mask [b, 1, 1, s, T]: query i sits at column T - s + i and sees
        # the columns up to its own that attention_mask marks as real.
        g.const("c_zero_s", np.int64(0))
        g.const("c_one_s", np.int64(1))
        s_len = g.op("Squeeze", [g.op("Shape", [sequence_input], start=1, end=2)])
        t_len = g.op("Squeeze", [g.op("Shape", ["attention_mask"], start=1, end=2)])
        q_idx = g.op("Add", [g.op("Range", ["c_zero_s", s_len, "c_one_s"]), g.op("Sub", [t_len, s_len])])
        k_idx = g.op("Range", ["c_zero_s", t_len, "c_one_s"])
        causal = g.op("LessOrEqual", [g.op("Unsqueeze", [k_idx, "c_zero"]), g.op("Unsqueeze", [q_idx, "c_axis_last"])])
        axes = g.const("c_mask_axes", np.array([1, 2, 3], np.int64))
        real = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", axes])], to=TensorProto.BOOL)
        allowed = g.op("And", [causal, real])
        self.mask = g.op("Where", [allowed, g.const("c_f0", np.float32(0.0)), g.const("c_fmin", np.float32(F32_MIN))])

    def inputs(self) -> list[onnx.ValueInfoProto]:
        return [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
                helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])]

    kv_length = "past"
    present_length = "total"

    def layer(self, g: Graph, i: int, lw: QkvWeights, xn: str) -> str:
        spec, p = self.spec, f"layers.{i}."
        hd, nh, kvh = spec.head_dim, spec.num_heads, spec.num_kv_heads
        for name in ("q", "k", "v"):
            g.const(p + name + "_t", np.ascontiguousarray(getattr(lw, name).T))
        q = rotary(g, split_heads(g, g.op("MatMul", [xn, p + "q_t"]), nh, hd), self.cos, self.sin)
        k = rotary(g, split_heads(g, g.op("MatMul", [xn, p + "k_t"]), kvh, hd), self.cos, self.sin)
        v = split_heads(g, g.op("MatMul", [xn, p + "v_t"]), kvh, hd)
        k_all = g.op("Concat", [f"past_key_values.{i}.key", k], out=f"present.{i}.key", axis=2)
        v_all = g.op("Concat", [f"past_key_values.{i}.value", v], out=f"present.{i}.value", axis=2)
        # Grouped heads: fold the query heads of one KV head into one axis, no KV repeat.
        q_grouped = g.op("Reshape", [g.op("Mul", [q, "c_scale"]),
                                     g.const(p + "qg_shape", np.array([0, kvh, nh // kvh, -1, hd], np.int64))])
        ax2 = g.const(p + "ax2", np.array([2], np.int64))
        k_t = g.op("Unsqueeze", [g.op("Transpose", [k_all], perm=[0, 1, 3, 2]), ax2])
        probs = g.op("Softmax", [g.op("Add", [g.op("MatMul", [q_grouped, k_t]), self.mask])], axis=-1)
        ctx = g.op("MatMul", [probs, g.op("Unsqueeze", [v_all, ax2])])
        ctx = g.op("Reshape", [ctx, g.const(p + "ctx_shape", np.array([0, nh, -1, hd], np.int64))])
        return g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]),
                                g.const(p + "merge", np.array([0, 0, nh * hd], np.int64))])


class _GqaAttention:
    """GroupQueryAttention with packed QKV; rotary from the op's cos/sin caches."""

    def __init__(self, g: Graph, spec: LlamaSpec):
        self.spec = spec
        hd = spec.head_dim
        if hd % 16:
            raise ValueError(f"GroupQueryAttention on CPU needs head_dim % 16 == 0, got {hd}")
        inv_freq = 1.0 / (spec.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        angles = np.arange(spec.max_position, dtype=np.float64)[:, None] * inv_freq[None, :]
        g.const("cos_cache", np.cos(angles).astype(np.float32))
        g.const("sin_cache", np.sin(angles).astype(np.float32))
        # GroupQueryAttention takes a scalar; the graph takes [1], which a Triton config can declare for a
        # non-batching model (Triton supports no rank-0 input there).
        g.op("Squeeze", ["total_sequence_length", g.const("c_squeeze_axis", np.array([0], np.int64))],
             out="total_sequence_length_scalar")

    def inputs(self) -> list[onnx.ValueInfoProto]:
        return [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
                helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [1]),
                helper.make_tensor_value_info("num_logits_to_keep", TensorProto.INT64, [1])]

    kv_length = "max_length"
    present_length = "max_length"

    def layer(self, g: Graph, i: int, lw: QkvWeights, xn: str) -> str:
        spec, p = self.spec, f"layers.{i}."
        g.const(p + "qkv_t", np.ascontiguousarray(np.concatenate([lw.q, lw.k, lw.v], axis=0).T))
        qkv = g.op("MatMul", [xn, p + "qkv_t"])
        attn = g.op("GroupQueryAttention",
                    [qkv, "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value", "seqlens_k",
                     "total_sequence_length_scalar", "cos_cache", "sin_cache"],
                    domain="com.microsoft", outputs=3, num_heads=spec.num_heads, kv_num_heads=spec.num_kv_heads,
                    do_rotary=1, rotary_interleaved=0)
        g.nodes[-1].output[1:] = [f"present.{i}.key", f"present.{i}.value"]
        return attn[0]


def last_positions(g: Graph, x: str) -> str:
    """x [b, s, h] -> its last `num_logits_to_keep` positions ([1]; 0: all of them)."""
    start = g.op("Neg", ["num_logits_to_keep"])
    end = g.const("c_keep_end", np.array([np.iinfo(np.int64).max], np.int64))
    return g.op("Slice", [x, start, end, g.const("c_seq_axis", np.array([1], np.int64))])


def build_decoder(weights: LlamaWeights, hidden_layers: tuple[int, ...] | None = None,
                  attention: str = "concat") -> onnx.ModelProto:
    if attention not in ATTENTION_LAYOUTS:
        raise ValueError(f"attention must be one of {ATTENTION_LAYOUTS}, got {attention!r}")
    spec = weights.spec
    hd, kvh = spec.head_dim, spec.num_kv_heads
    hidden_layers = hidden_state_layers(spec.num_layers) if hidden_layers is None else hidden_layers
    g = Graph()
    g.const("c_two", np.float32(2.0))
    g.const("c_eps", np.float32(spec.rms_eps))
    g.const("c_axis_last", np.array([-1], np.int64))
    g.const("embedding", weights.embedding)
    attn = (ConcatAttention if attention == "concat" else _GqaAttention)(g, spec)

    x = g.op("Gather", ["embedding", "input_ids"], out="embeddings")
    hidden_outputs = []
    for i, lw in enumerate(weights.layers):
        p = f"layers.{i}."
        for name in ("attn_norm", "ffn_norm"):
            g.const(p + name, getattr(lw, name))
        for name in ("o", "gate", "up", "down"):
            g.const(p + name + "_t", np.ascontiguousarray(getattr(lw, name).T))
        ctx = attn.layer(g, i, lw, rms_norm(g, x, p + "attn_norm"))
        x = g.op("Add", [x, g.op("MatMul", [ctx, p + "o_t"])])
        x = g.op("Add", [x, swiglu(g, rms_norm(g, x, p + "ffn_norm"), p)])
        if i in hidden_layers:
            hidden_outputs.append(g.op("Identity", [x], out=f"hidden_states.{i}"))

    g.const("final_norm", weights.final_norm)
    last = rms_norm(g, x, "final_norm")
    g.op("Identity", [last], out="last_hidden_state")
    if attention == "gqa":
        last = last_positions(g, last)
    flat = g.op("Reshape", [last, g.const("c_flat", np.array([-1, spec.hidden_size], np.int64))])
    logits2d = g.op("Gemm", [flat, "embedding"], transB=1)  # tied LM head: the embedding is stored once
    out_shape = g.op("Concat", [g.op("Shape", ["input_ids"], start=0, end=1),
                                g.const("c_vocab", np.array([-1, spec.vocab_size], np.int64))], axis=0)
    g.op("Reshape", [logits2d, out_shape], out="logits")

    def kv(name: str, length: str):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", kvh, length, hd])

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])] + attn.inputs()
    logits_seq = "seq" if attention == "concat" else "kept_seq"
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", logits_seq, spec.vocab_size])]
    for i in range(spec.num_layers):
        inputs += [kv(f"past_key_values.{i}.key", attn.kv_length), kv(f"past_key_values.{i}.value", attn.kv_length)]
        outputs += [kv(f"present.{i}.key", attn.present_length), kv(f"present.{i}.value", attn.present_length)]
    hidden = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", spec.hidden_size])
              for n in ["last_hidden_state", *hidden_outputs]]
    graph = helper.make_graph(g.nodes, f"llama_decoder_{attention}", inputs, outputs + hidden, g.inits)
    opsets = [helper.make_opsetid("", OPSET)]
    if attention == "gqa":
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="tritongen")
    model.ir_version = 9
    return model
