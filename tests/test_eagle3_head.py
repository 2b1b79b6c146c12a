"""The EAGLE-3 head built from given (trained) weights: draft-vocabulary scatter and a numpy reference forward."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tritongen.model_build.head_folders import TRAINED_EAGLE3, trained_eagle3
from tritongen.model_build.heads import build_eagle3_head
from tritongen.model_build.tiny import tiny_spec

SPEC = tiny_spec()
VD = 40
F32_MIN = np.finfo(np.float32).min


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = SPEC
    h, ff, kv = s.hidden_size, s.intermediate_size, s.num_kv_heads * s.head_dim
    mat = lambda i, o: (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32)  # noqa: E731
    norm = lambda: (1 + 0.1 * rng.standard_normal(h)).astype(np.float32)  # noqa: E731
    d2t = np.sort(rng.choice(np.arange(3, s.vocab_size), VD - 3, replace=False))
    return {"fc3_t": mat(3 * h, h), "fc_t": mat(2 * h, h), "embed_norm": norm(), "hidden_norm": norm(),
            "attn_norm": norm(), "layers.0.q_t": mat(h, h), "layers.0.k_t": mat(h, kv), "layers.0.v_t": mat(h, kv),
            "attn.o_t": mat(h, h), "mlp.norm": norm(), "mlp.gate_t": mat(h, ff), "mlp.up_t": mat(h, ff),
            "mlp.down_t": mat(ff, h), "final_norm": norm(), "lm_head": rng.standard_normal((VD, h)).astype(np.float32),
            "d2t": np.concatenate([[0, 1, 2], d2t]).astype(np.int64)}


def _rms(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + SPEC.rms_eps) * w


def _rope(x: np.ndarray, pos: int) -> np.ndarray:
    hd = SPEC.head_dim
    freqs = pos * (1.0 / SPEC.rope_theta ** (np.arange(0, hd, 2) / hd))
    cos, sin = np.cos(np.concatenate([freqs, freqs])), np.sin(np.concatenate([freqs, freqs]))
    return x * cos + np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin


def _reference(w: dict, target: np.ndarray, embeds: list[np.ndarray], position: int) -> list[tuple]:
    """Numpy forward of one proposal: step 0 from the target taps, later steps from hidden_out; own cache."""
    nh, kvh, hd = SPEC.num_heads, SPEC.num_kv_heads, SPEC.head_dim
    fused, keys, values, out = target @ w["fc3_t"], [], [], []
    for j, e in enumerate(embeds):
        x = np.concatenate([_rms(e, w["embed_norm"]), _rms(fused, w["hidden_norm"])]) @ w["fc_t"]
        xn = _rms(x, w["attn_norm"])
        q = _rope((xn @ w["layers.0.q_t"]).reshape(nh, hd), position + j)
        keys.append(_rope((xn @ w["layers.0.k_t"]).reshape(kvh, hd), position + j))
        values.append((xn @ w["layers.0.v_t"]).reshape(kvh, hd))
        k, v = np.stack(keys, 1), np.stack(values, 1)  # [kvh, j+1, hd]
        ctx = []
        for head in range(nh):
            g = head // (nh // kvh)
            scores = k[g] @ q[head] / np.sqrt(hd)
            p = np.exp(scores - scores.max())
            ctx.append((p / p.sum()) @ v[g])
        x = x + np.concatenate(ctx) @ w["attn.o_t"]
        xm = _rms(x, w["mlp.norm"])
        gate = xm @ w["mlp.gate_t"]
        x = x + (gate / (1 + np.exp(-gate)) * (xm @ w["mlp.up_t"])) @ w["mlp.down_t"]
        out.append((_rms(x, w["final_norm"]) @ w["lm_head"].T, x))
        fused = x
    return out


def _run_onnx(w: dict, target: np.ndarray, embeds: list[np.ndarray], position: int) -> list[tuple]:
    """As the runtime proposer feeds it: empty cache, grow-cache, hidden_out recycled."""
    lm_head = np.zeros((SPEC.vocab_size, SPEC.hidden_size), np.float32)  # unused: the weights hold theirs
    session = ort.InferenceSession(build_eagle3_head(SPEC, lm_head, weights=w).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    h = SPEC.hidden_size
    key = value = np.zeros((1, SPEC.num_kv_heads, 0, SPEC.head_dim), np.float32)
    draft_hidden, out = np.zeros((1, 1, h), np.float32), []
    for j, e in enumerate(embeds):
        logits, hidden, key, value = session.run(None, {
            "target_hidden": target.reshape(1, 1, -1), "draft_hidden": draft_hidden,
            "use_target": np.array([1.0 if j == 0 else 0.0], np.float32), "inputs_embeds": e.reshape(1, 1, -1),
            "attention_mask": np.ones((1, key.shape[2] + 1), np.int64),
            "position_ids": np.array([[position + j]], np.int64),
            "past_key_values.0.key": key, "past_key_values.0.value": value})
        draft_hidden = hidden
        out.append((logits[0, 0], hidden[0, 0]))
    return out


def _inputs(seed: int, steps: int = 2) -> tuple[np.ndarray, list[np.ndarray], int]:
    rng = np.random.default_rng(seed)
    h = SPEC.hidden_size
    return (rng.standard_normal(3 * h).astype(np.float32),
            [(0.5 * rng.standard_normal(h)).astype(np.float32) for _ in range(steps)], int(rng.integers(0, 100)))


def test_full_vocab_logits_come_from_the_draft_vocabulary() -> None:
    w = _weights()
    d2t = w["d2t"]
    for seed in range(5):
        target, embeds, position = _inputs(seed, steps=3)
        for (full, _), (reduced, _) in zip(_run_onnx(w, target, embeds, position),
                                           _reference(w, target, embeds, position)):
            assert full.shape == (SPEC.vocab_size,)
            assert full.argmax() in set(d2t.tolist())
            assert full.argmax() == d2t[reduced.argmax()]
            assert (np.delete(full, d2t) == F32_MIN).all()


def test_onnx_head_matches_the_reference_forward() -> None:
    w = _weights(1)
    target, embeds, position = _inputs(7, steps=2)
    for (logits, hidden), (ref_logits, ref_hidden) in zip(_run_onnx(w, target, embeds, position),
                                                           _reference(w, target, embeds, position)):
        np.testing.assert_allclose(logits[w["d2t"]], ref_logits, atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(hidden, ref_hidden, atol=1e-4, rtol=1e-4)


def test_given_weights_must_fit_the_graph() -> None:
    w = _weights()
    w["fc_t"] = w["fc_t"][:, :-1]
    with pytest.raises(ValueError, match="fc_t"):
        build_eagle3_head(SPEC, np.zeros((SPEC.vocab_size, SPEC.hidden_size), np.float32), weights=w)


def test_trained_weights_are_only_used_for_their_target() -> None:
    assert trained_eagle3(SPEC) is None  # tiny models keep the seeded head
    if not TRAINED_EAGLE3.exists():
        pytest.skip("no trained EAGLE-3 weights in this checkout")
    assert TRAINED_EAGLE3.stat().st_size < 20 * 2**20
    with np.load(TRAINED_EAGLE3) as npz:
        d2t = npz["d2t"]
        assert npz["fc_t"].dtype == np.float16 and "lm_head" not in npz.files  # the LM head: the target's rows
        assert {0, 1, 2} <= set(d2t.tolist()) and (np.diff(d2t) > 0).all()


def test_draft_lm_head_defaults_to_the_target_rows() -> None:
    """Without an `lm_head` entry the draft LM head is rows d2t of the given (target's tied) matrix."""
    w = _weights(2)
    embedding = np.random.default_rng(3).standard_normal((SPEC.vocab_size, SPEC.hidden_size)).astype(np.float32)
    w.pop("lm_head")
    inits = {i.name: i for i in build_eagle3_head(SPEC, embedding, weights=w).graph.initializer}
    np.testing.assert_array_equal(numpy_helper.to_array(inits["lm_head"]), embedding[w["d2t"]])
