"""Llama decoder as an ONNX graph in the past/present ("concat") convention.

Inputs and outputs follow the naming optimum and onnxruntime-genai use
(DESIGN section 4), so the file runs unchanged in those peers. Logits are
returned for every position (speculative verification needs them), and the
residual stream after a few layers is exposed for speculative heads.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .llama_weights import LlamaWeights, hidden_state_layers

OPSET = 18
F32_MIN = float(np.finfo(np.float32).min)


class _Graph:
    """Accumulates nodes and initializers with unique, readable names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        self._count += 1
        out = out or f"{op_type.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self._count}_{op_type}", **attrs))
        return out


def _rms_norm(g: _Graph, x: str, weight: str, eps: str) -> str:
    """Pow-ReduceMean-Add-Sqrt-Div-Mul: the pattern onnxruntime fuses."""
    sq = g.op("Pow", [x, "c_two"])
    mean = g.op("ReduceMean", [sq, "c_axis_last"], keepdims=1)
    std = g.op("Sqrt", [g.op("Add", [mean, eps])])
    return g.op("Mul", [g.op("Div", [x, std]), weight])


def _linear(g: _Graph, x: str, weight_t: str) -> str:
    return g.op("MatMul", [x, weight_t])


def _heads(g: _Graph, x: str, n: int, head_dim: int) -> str:
    """[b, s, n*d] -> [b, n, s, d]."""
    shaped = g.op("Reshape", [x, g.const(f"shape_heads_{n}_{g._count}", np.array([0, 0, n, head_dim], np.int64))])
    return g.op("Transpose", [shaped], perm=[0, 2, 1, 3])


def _rotary(g: _Graph, x: str, cos: str, sin: str) -> str:
    x1 = g.op("Slice", [x, "c_zero", "c_half", "c_axis_last"])
    x2 = g.op("Slice", [x, "c_half", "c_big", "c_axis_last"])
    rotated = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])


def build_decoder(weights: LlamaWeights, hidden_layers: tuple[int, ...] | None = None) -> onnx.ModelProto:
    spec = weights.spec
    hd, nh, kvh = spec.head_dim, spec.num_heads, spec.num_kv_heads
    n_rep = nh // kvh
    hidden_layers = hidden_state_layers(spec.num_layers) if hidden_layers is None else hidden_layers
    g = _Graph()
    g.const("c_two", np.float32(2.0))
    g.const("c_eps", np.float32(spec.rms_eps))
    g.const("c_axis_last", np.array([-1], np.int64))
    g.const("c_zero", np.array([0], np.int64))
    g.const("c_one", np.array([1], np.int64))
    g.const("c_half", np.array([hd // 2], np.int64))
    g.const("c_big", np.array([np.iinfo(np.int64).max], np.int64))
    g.const("c_scale", np.float32(1.0 / np.sqrt(hd)))
    g.const("embedding", weights.embedding)

    # Rotary tables from position_ids: [b, 1, s, hd].
    inv_freq = 1.0 / (spec.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    g.const("inv_freq", inv_freq.astype(np.float32).reshape(1, 1, -1))
    pos = g.op("Cast", ["position_ids"], to=TensorProto.FLOAT)
    freqs = g.op("Mul", [g.op("Unsqueeze", [pos, "c_axis_last"]), "inv_freq"])
    angles = g.op("Unsqueeze", [g.op("Concat", [freqs, freqs], axis=-1), "c_one"])
    cos = g.op("Cos", [angles], out="rope_cos")
    sin = g.op("Sin", [angles], out="rope_sin")

    # Additive mask [b, 1, 1, s, T]: query i sits at column T - s + i; it sees
    # columns up to its own that attention_mask marks as real.
    seq_len = g.op("Shape", ["input_ids"], start=1, end=2)
    total_len = g.op("Shape", ["attention_mask"], start=1, end=2)
    g.const("c_zero_s", np.int64(0))
    g.const("c_one_s", np.int64(1))
    s_scalar = g.op("Squeeze", [seq_len])
    t_scalar = g.op("Squeeze", [total_len])
    q_idx = g.op("Add", [g.op("Range", ["c_zero_s", s_scalar, "c_one_s"]), g.op("Sub", [t_scalar, s_scalar])])
    k_idx = g.op("Range", ["c_zero_s", t_scalar, "c_one_s"])
    causal = g.op("LessOrEqual", [g.op("Unsqueeze", [k_idx, "c_zero"]), g.op("Unsqueeze", [q_idx, "c_axis_last"])])
    real = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", g.const("c_mask_axes", np.array([1, 2, 3], np.int64))])], to=TensorProto.BOOL)
    allowed = g.op("And", [causal, real])
    mask = g.op("Where", [allowed, g.const("c_f0", np.float32(0.0)), g.const("c_fmin", np.float32(F32_MIN))], out="attn_bias")

    x = g.op("Gather", ["embedding", "input_ids"], out="embeddings")
    hidden_outputs = []
    for i, lw in enumerate(weights.layers):
        p = f"layers.{i}."
        for name in ("attn_norm", "ffn_norm"):
            g.const(p + name, getattr(lw, name))
        for name in ("q", "k", "v", "o", "gate", "up", "down"):
            g.const(p + name + "_t", np.ascontiguousarray(getattr(lw, name).T))
        xn = _rms_norm(g, x, p + "attn_norm", "c_eps")
        q = _rotary(g, _heads(g, _linear(g, xn, p + "q_t"), nh, hd), cos, sin)
        k = _rotary(g, _heads(g, _linear(g, xn, p + "k_t"), kvh, hd), cos, sin)
        v = _heads(g, _linear(g, xn, p + "v_t"), kvh, hd)
        k_all = g.op("Concat", [f"past_key_values.{i}.key", k], out=f"present.{i}.key", axis=2)
        v_all = g.op("Concat", [f"past_key_values.{i}.value", v], out=f"present.{i}.value", axis=2)
        # Grouped heads: fold the n_rep query heads of a KV head into one axis.
        q_grouped = g.op("Reshape", [g.op("Mul", [q, "c_scale"]), g.const(p + "qg_shape", np.array([0, kvh, n_rep, -1, hd], np.int64))])
        k_t = g.op("Unsqueeze", [g.op("Transpose", [k_all], perm=[0, 1, 3, 2]), g.const(p + "ax2", np.array([2], np.int64))])
        scores = g.op("Add", [g.op("MatMul", [q_grouped, k_t]), mask])
        probs = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("MatMul", [probs, g.op("Unsqueeze", [v_all, p + "ax2"])])
        ctx = g.op("Reshape", [ctx, g.const(p + "ctx_shape", np.array([0, nh, -1, hd], np.int64))])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), g.const(p + "merge", np.array([0, 0, nh * hd], np.int64))])
        x = g.op("Add", [x, _linear(g, ctx, p + "o_t")])
        xn = _rms_norm(g, x, p + "ffn_norm", "c_eps")
        gate = _linear(g, xn, p + "gate_t")
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
        x = g.op("Add", [x, _linear(g, g.op("Mul", [act, _linear(g, xn, p + "up_t")]), p + "down_t")])
        if i in hidden_layers:
            hidden_outputs.append(g.op("Identity", [x], out=f"hidden_states.{i}"))

    g.const("final_norm", weights.final_norm)
    last = _rms_norm(g, x, "final_norm", "c_eps")
    g.op("Identity", [last], out="last_hidden_state")
    flat = g.op("Reshape", [last, g.const("c_flat", np.array([-1, spec.hidden_size], np.int64))])
    logits2d = g.op("Gemm", [flat, "embedding"], transB=1)
    batch_seq = g.op("Shape", ["input_ids"])
    out_shape = g.op("Concat", [batch_seq, g.const("c_vocab", np.array([spec.vocab_size], np.int64))], axis=0)
    g.op("Reshape", [logits2d, out_shape], out="logits")

    kv = lambda name, length: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", kvh, length, hd])  # noqa: E731
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", spec.vocab_size])]
    for i in range(spec.num_layers):
        inputs += [kv(f"past_key_values.{i}.key", "past"), kv(f"past_key_values.{i}.value", "past")]
        outputs += [kv(f"present.{i}.key", "total"), kv(f"present.{i}.value", "total")]
    hidden = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "seq", spec.hidden_size])  # noqa: E731
    outputs += [hidden("last_hidden_state")] + [hidden(n) for n in hidden_outputs]
    graph = helper.make_graph(g.nodes, "llama_decoder", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tritongen")
    model.ir_version = 9
    return model
