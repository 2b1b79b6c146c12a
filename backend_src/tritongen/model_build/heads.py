"""Speculative heads for a llama target: MTP, EAGLE-3 and a shared-KV assistant.

The weights are seeded random (the LM heads start as the target's tied
embedding), except an EAGLE-3 head built from trained weights
(`build_eagle3_head(weights=...)`, SmolLM2's: eagle3_smollm2.npz, trained by
scripts/eagle3/). Every proposed token is verified by the target, so greedy
output stays exact whatever the weights; only the acceptance rate depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper

from .decoder_graph import F32_MIN, OPSET, ConcatAttention, Graph, rms_norm, rope_tables, rotary, split_heads, swiglu
from .llama_weights import LlamaSpec


@dataclass
class _Qkv:
    """The attention projections of a head's layer, all its attention block reads."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray


def _value(name: str, dims: list, dtype=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


class _Head:
    """Shared scaffolding: a Graph, seeded (or given) weights, one llama layer.

    `weights`: initializer name -> array, used instead of the seeded values wherever a name is present."""

    def __init__(self, spec: LlamaSpec, seed: int, weights: dict[str, np.ndarray] | None = None):
        self.spec = replace(spec, num_layers=1)
        self.g = Graph()
        self.rng = np.random.default_rng(seed)
        self.weights = weights or {}
        g = self.g
        g.const("c_two", np.float32(2.0))
        g.const("c_eps", np.float32(spec.rms_eps))
        g.const("c_axis_last", np.array([-1], np.int64))

    def given(self, name: str, seeded: np.ndarray) -> np.ndarray:
        if name not in self.weights:
            return seeded
        value = np.asarray(self.weights[name], np.float32)
        if value.shape != seeded.shape:
            raise ValueError(f"head weight {name}: shape {value.shape}, the graph needs {seeded.shape}")
        return value

    def matrix(self, name: str, rows: int, cols: int) -> str:
        seeded = (self.rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)
        return self.g.const(name, self.given(name, seeded))

    def norm_weight(self, name: str) -> str:
        return self.g.const(name, self.given(name, np.ones(self.spec.hidden_size, np.float32)))

    def mlp(self, x: str) -> str:
        h, ff = self.spec.hidden_size, self.spec.intermediate_size
        self.matrix("mlp.gate_t", h, ff)
        self.matrix("mlp.up_t", h, ff)
        self.matrix("mlp.down_t", ff, h)
        return self.g.op("Add", [x, swiglu(self.g, rms_norm(self.g, x, self.norm_weight("mlp.norm")), "mlp.")])

    def logits(self, x: str, lm_head: np.ndarray, d2t: np.ndarray | None = None) -> str:
        """Logits over the target's vocabulary. With `d2t` (draft row -> target id), `lm_head` has one row per
        draft token and the rows' logits are scattered into a full-width row holding float32 min elsewhere."""
        g = self.g
        g.const("lm_head", lm_head)
        last = rms_norm(g, x, self.norm_weight("final_norm"))
        flat = g.op("Reshape", [last, g.const("c_flat", np.array([-1, self.spec.hidden_size], np.int64))])
        rows = g.op("Gemm", [flat, "lm_head"], transB=1)
        if d2t is not None:
            full = g.op("Concat", [g.op("Shape", [flat], start=0, end=1),
                                   g.const("c_full_vocab", np.array([self.spec.vocab_size], np.int64))], axis=0)
            floor = helper.make_tensor("floor", TensorProto.FLOAT, [1], [F32_MIN])
            index = g.op("Expand", [g.const("d2t", np.asarray(d2t, np.int64).reshape(1, -1)), g.op("Shape", [rows])])
            rows = g.op("ScatterElements", [g.op("ConstantOfShape", [full], value=floor), index, rows], axis=1)
        vocab = self.spec.vocab_size if d2t is not None else lm_head.shape[0]
        shape = g.op("Concat", [g.op("Shape", [x], start=0, end=2),
                                g.const("c_vocab", np.array([vocab], np.int64))], axis=0)
        return g.op("Reshape", [rows, shape], out="logits")

    def concat_attention_layer(self, x: str, sequence_input: str) -> str:
        """One attention block over the head's own concat past/present (grow-cache)."""
        s, r = self.spec, self.rng
        h, kv = s.hidden_size, s.num_kv_heads * s.head_dim
        mat = lambda o, i: (r.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)  # noqa: E731
        q, k, v = mat(h, h), mat(kv, h), mat(kv, h)
        lw = _Qkv(*(self.given(f"layers.0.{n}_t", w.T).T for n, w in (("q", q), ("k", k), ("v", v))))
        attn = ConcatAttention(self.g, s, sequence_input)
        ctx = attn.layer(self.g, 0, lw, rms_norm(self.g, x, self.norm_weight("attn_norm")))
        return self.g.op("Add", [x, self.g.op("MatMul", [ctx, self.matrix("attn.o_t", h, h)])])

    def kv_io(self) -> tuple[list, list]:
        s = self.spec
        dims = lambda length: ["batch", s.num_kv_heads, length, s.head_dim]  # noqa: E731
        inputs = [_value("attention_mask", ["batch", "total"], TensorProto.INT64),
                  _value("position_ids", ["batch", "seq"], TensorProto.INT64),
                  _value("past_key_values.0.key", dims("past")), _value("past_key_values.0.value", dims("past"))]
        outputs = [_value("present.0.key", dims("total")), _value("present.0.value", dims("total"))]
        return inputs, outputs

    def model(self, name: str, inputs: list, outputs: list) -> onnx.ModelProto:
        graph = helper.make_graph(self.g.nodes, name, inputs, outputs, self.g.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tritongen")
        model.ir_version = 9
        return model


def build_mtp_head(spec: LlamaSpec, seed: int = 0) -> onnx.ModelProto:
    """hidden_states (target, last position) + inputs_embeds (next token) -> hidden_out; logits come
    from the target's LM head outside the graph. Its own past grows across draft steps (grow-cache);
    fed an empty past each step it threads only the hidden state (hidden-threaded)."""
    head, h = _Head(spec, seed), spec.hidden_size
    g = head.g
    fused = g.op("Concat", [rms_norm(g, "hidden_states", head.norm_weight("hidden_norm")),
                            rms_norm(g, "inputs_embeds", head.norm_weight("embed_norm"))], axis=-1)
    x = g.op("MatMul", [fused, head.matrix("fc_t", 2 * h, h)])
    x = head.mlp(head.concat_attention_layer(x, "inputs_embeds"))
    g.op("Identity", [rms_norm(g, x, head.norm_weight("out_norm"))], out="hidden_out")
    kv_in, kv_out = head.kv_io()
    inputs = [_value("hidden_states", ["batch", "seq", h]), _value("inputs_embeds", ["batch", "seq", h])] + kv_in
    return head.model("mtp_head", inputs, [_value("hidden_out", ["batch", "seq", h])] + kv_out)


def build_eagle3_head(spec: LlamaSpec, lm_head: np.ndarray, seed: int = 0,
                      weights: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """First step: fc(concat(low, mid, high target hidden)); later steps: its own hidden_out, recycled.

    `weights` (trained; initializer names as below, matrices [in, out]) replace the seeded ones. With a `d2t`
    entry (draft row -> target id) the LM head has one row per draft token (theirs, or by default the rows
    d2t of the given `lm_head`, the target's tied embedding) and the graph scatters the draft logits into
    the full vocabulary (the rest float32 min), so the proposer sees the target's ids."""
    head, h = _Head(spec, seed, weights), spec.hidden_size
    d2t = (weights or {}).get("d2t")
    if d2t is not None:
        lm_head = np.asarray(head.weights.get("lm_head", lm_head[d2t]), np.float32)
    g = head.g
    target = g.op("MatMul", ["target_hidden", head.matrix("fc3_t", 3 * h, h)])
    use = "use_target"
    one_minus = g.op("Sub", [g.const("c_one_f", np.float32(1.0)), use])
    fused = g.op("Add", [g.op("Mul", [target, use]), g.op("Mul", ["draft_hidden", one_minus])])
    x = g.op("MatMul", [g.op("Concat", [rms_norm(g, "inputs_embeds", head.norm_weight("embed_norm")),
                                        rms_norm(g, fused, head.norm_weight("hidden_norm"))], axis=-1),
                        head.matrix("fc_t", 2 * h, h)])
    x = head.mlp(head.concat_attention_layer(x, "inputs_embeds"))
    g.op("Identity", [x], out="hidden_out")
    head.logits(x, lm_head, d2t)
    kv_in, kv_out = head.kv_io()
    inputs = [_value("target_hidden", ["batch", "seq", 3 * h]), _value("draft_hidden", ["batch", "seq", h]),
              _value("use_target", [1]), _value("inputs_embeds", ["batch", "seq", h])] + kv_in
    vocab = spec.vocab_size if d2t is not None else lm_head.shape[0]
    outputs = [_value("logits", ["batch", "seq", vocab]), _value("hidden_out", ["batch", "seq", h])]
    return head.model("eagle3_head", inputs, outputs + kv_out)


def build_shared_kv_head(spec: LlamaSpec, lm_head: np.ndarray, group: str = "full_attention",
                         seed: int = 0) -> onnx.ModelProto:
    """inputs_embeds = concat(target_embedding(token), hidden) -> logits, projected_state.

    Owns no KV: its one attention block reads the target's (already rotated)
    keys and values of the bound layer, the first `kv_length` positions.
    """
    head, s = _Head(spec, seed), spec
    g, h, hd, nh, kvh = head.g, s.hidden_size, s.head_dim, s.num_heads, s.num_kv_heads
    g.const("c_zero", np.array([0], np.int64))
    g.const("c_one", np.array([1], np.int64))
    g.const("c_half", np.array([hd // 2], np.int64))
    g.const("c_big", np.array([np.iinfo(np.int64).max], np.int64))
    x = g.op("MatMul", ["inputs_embeds", head.matrix("fc_t", 2 * h, h)])
    cos, sin = rope_tables(g, s)
    xn = rms_norm(g, x, head.norm_weight("attn_norm"))
    q = rotary(g, split_heads(g, g.op("MatMul", [xn, head.matrix("q_t", h, h)]), nh, hd), cos, sin)
    q = g.op("Reshape", [g.op("Mul", [q, g.const("c_scale", np.float32(1 / np.sqrt(hd)))]),
                         g.const("qg_shape", np.array([0, kvh, nh // kvh, -1, hd], np.int64))])
    key, value = f"shared_kv.{group}.key", f"shared_kv.{group}.value"
    ax2 = g.const("ax2", np.array([2], np.int64))
    scores = g.op("MatMul", [q, g.op("Unsqueeze", [g.op("Transpose", [key], perm=[0, 1, 3, 2]), ax2])])
    # Mask [b, 1, 1, 1, L]: only the target's first kv_length positions are real.
    length = g.op("Squeeze", [g.op("Shape", [key], start=2, end=3)])
    cols = g.op("Range", [g.const("c_zero_s", np.int64(0)), length, g.const("c_one_s", np.int64(1))])
    real = g.op("Less", [g.op("Unsqueeze", [cols, "c_zero"]), g.op("Unsqueeze", ["kv_length", "c_axis_last"])])
    real = g.op("Unsqueeze", [real, g.const("mask_axes", np.array([1, 2, 3], np.int64))])
    bias = g.op("Where", [real, g.const("c_f0", np.float32(0)),
                          g.const("c_fmin", np.float32(np.finfo(np.float32).min))])
    probs = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)
    ctx = g.op("MatMul", [probs, g.op("Unsqueeze", [value, ax2])])
    ctx = g.op("Reshape", [ctx, g.const("ctx_shape", np.array([0, nh, -1, hd], np.int64))])
    ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]),
                           g.const("merge", np.array([0, 0, h], np.int64))])
    x = head.mlp(g.op("Add", [x, g.op("MatMul", [ctx, head.matrix("o_t", h, h)])]))
    g.op("Identity", [x], out="projected_state")
    head.logits(x, lm_head)
    kv_dims = ["batch", kvh, "kv_len", hd]
    inputs = [_value("inputs_embeds", ["batch", "seq", 2 * h]), _value(key, kv_dims), _value(value, kv_dims),
              _value("kv_length", ["batch"], TensorProto.INT64),
              _value("position_ids", ["batch", "seq"], TensorProto.INT64)]
    outputs = [_value("logits", ["batch", "seq", lm_head.shape[0]]), _value("projected_state", ["batch", "seq", h])]
    return head.model("shared_kv_head", inputs, outputs)
