"""The converted SmolLM2 ONNX model against an independent numpy forward pass.

The reference reads the GGUF tensors in their stored layout and applies
rotary the way llama.cpp does for that layout (adjacent pairs), so a wrong
un-permutation in the builder cannot hide behind shared code.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from conftest import smollm2_gguf

PROMPT_IDS = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]


class GgufLlama:
    def __init__(self, path):
        reader = GGUFReader(str(path))
        self.meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("llama.")}
        self.t = {t.name: t for t in reader.tensors}
        self.n_layers = self.meta["llama.block_count"]
        self.n_head = self.meta["llama.attention.head_count"]
        self.n_kv = self.meta["llama.attention.head_count_kv"]
        self.eps = self.meta["llama.attention.layer_norm_rms_epsilon"]
        self.base = self.meta["llama.rope.freq_base"]

    def w(self, name):
        t = self.t[name]
        return dequantize(t.data, t.tensor_type).astype(np.float64)

    def norm(self, x, weight):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * weight

    def rope_pairs(self, x, positions):
        """x [heads, seq, d]: rotate adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i/d)."""
        d = x.shape[-1]
        theta = positions[:, None] * self.base ** (-np.arange(0, d, 2) / d)
        c, s = np.cos(theta), np.sin(theta)
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = even * c - odd * s
        out[..., 1::2] = even * s + odd * c
        return out

    def logits(self, ids):
        x = self.w("token_embd.weight")[ids]
        n, hd = len(ids), x.shape[1] // self.n_head
        pos = np.arange(n, dtype=np.float64)
        causal = np.triu(np.full((n, n), -np.inf), 1)
        for i in range(self.n_layers):
            p = f"blk.{i}."
            h = self.norm(x, self.w(p + "attn_norm.weight"))
            q = (h @ self.w(p + "attn_q.weight").T).reshape(n, self.n_head, hd).transpose(1, 0, 2)
            k = (h @ self.w(p + "attn_k.weight").T).reshape(n, self.n_kv, hd).transpose(1, 0, 2)
            v = (h @ self.w(p + "attn_v.weight").T).reshape(n, self.n_kv, hd).transpose(1, 0, 2)
            q, k = self.rope_pairs(q, pos), self.rope_pairs(k, pos)
            rep = self.n_head // self.n_kv
            k, v = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + causal
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            attn = (probs @ v).transpose(1, 0, 2).reshape(n, -1)
            x = x + attn @ self.w(p + "attn_output.weight").T
            h = self.norm(x, self.w(p + "ffn_norm.weight"))
            gate = h @ self.w(p + "ffn_gate.weight").T
            x = (
                x
                + ((gate / (1 + np.exp(-gate))) * (h @ self.w(p + "ffn_up.weight").T)) @ self.w(p + "ffn_down.weight").T
            )
        x = self.norm(x, self.w("output_norm.weight"))
        return x @ self.w("token_embd.weight").T


def run_onnx(session, ids, past=None, past_len=0):
    n_layers = sum(1 for i in session.get_inputs() if i.name.endswith(".key"))
    feeds = {
        "input_ids": np.array([ids], dtype=np.int64),
        "attention_mask": np.ones((1, past_len + len(ids)), dtype=np.int64),
        "position_ids": np.arange(past_len, past_len + len(ids), dtype=np.int64)[None],
    }
    for i in range(n_layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = (
                past[f"present.{i}.{kind}"] if past else np.zeros((1, 3, 0, 64), np.float32)
            )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


@pytest.fixture(scope="module")
def session(target_folder):
    return ort.InferenceSession(str(target_folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"])


@pytest.mark.slow
def test_onnx_logits_match_independent_gguf_reference(session):
    reference = GgufLlama(smollm2_gguf()).logits(PROMPT_IDS)
    ours = run_onnx(session, PROMPT_IDS)["logits"][0]
    diff = np.abs(ours - reference).max()
    print(f"max |onnx - reference| = {diff:.2e} over {ours.size} logits")
    assert diff < 1e-3
    assert (ours.argmax(-1) == reference.argmax(-1)).all()


def test_prefill_in_chunks_equals_prefill_in_one_call(session):
    whole = run_onnx(session, PROMPT_IDS)["logits"][0]
    pieces, past, done = [], None, 0
    for size in (5, 1, 7, 3):
        out = run_onnx(session, PROMPT_IDS[done:done + size], past, done)
        pieces.append(out["logits"][0])
        past, done = out, done + size
    chunked = np.concatenate(pieces)
    diff = np.abs(chunked - whole).max()
    print(f"max |chunked - whole| = {diff:.2e}")
    assert diff < 1e-4
