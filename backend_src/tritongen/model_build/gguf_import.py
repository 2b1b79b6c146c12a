"""Read a llama-architecture GGUF into `LlamaWeights` (dequantized, HF layout)."""

from __future__ import annotations

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tqdm import tqdm

from .llama_weights import LayerWeights, LlamaSpec, LlamaWeights


def field_value(reader: GGUFReader, key: str):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def read_spec(reader: GGUFReader) -> LlamaSpec:
    arch = field_value(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"unsupported GGUF architecture {arch!r}; only 'llama' is implemented")
    get = lambda key: field_value(reader, f"llama.{key}")  # noqa: E731
    vocab = get("vocab_size") or len(field_value(reader, "tokenizer.ggml.tokens"))
    return LlamaSpec(
        vocab_size=int(vocab),
        hidden_size=int(get("embedding_length")),
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=int(get("attention.head_count")),
        num_kv_heads=int(get("attention.head_count_kv")),
        rope_theta=float(get("rope.freq_base") or 10000.0),
        rms_eps=float(get("attention.layer_norm_rms_epsilon")),
        max_position=int(get("context_length")),
    )


def unpermute_rotary(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head interleave of Q/K rows so rotate-half rotary applies."""
    out_dim = w.shape[0]
    return w.reshape(n_heads, out_dim // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def read_weights(reader: GGUFReader, progress: bool = True) -> LlamaWeights:
    """The weights of an opened GGUF (opening one parses every metadata string: SmolLM2's ~98,000 tokens and
    merges take seconds, so a build opens it once)."""
    spec = read_spec(reader)
    tensors = {t.name: t for t in reader.tensors}

    def load(name: str) -> np.ndarray:
        t = tensors[name]
        return np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)

    embedding = load("token_embd.weight")
    if "output.weight" in tensors:
        raise ValueError("untied LM head in GGUF is not supported by this builder")
    layers = []
    for i in tqdm(range(spec.num_layers), desc="dequantize layers", disable=not progress):
        p = f"blk.{i}."
        layers.append(
            LayerWeights(
                attn_norm=load(p + "attn_norm.weight"),
                q=unpermute_rotary(load(p + "attn_q.weight"), spec.num_heads),
                k=unpermute_rotary(load(p + "attn_k.weight"), spec.num_kv_heads),
                v=load(p + "attn_v.weight"),
                o=load(p + "attn_output.weight"),
                ffn_norm=load(p + "ffn_norm.weight"),
                gate=load(p + "ffn_gate.weight"),
                up=load(p + "ffn_up.weight"),
                down=load(p + "ffn_down.weight"),
            )
        )
    return LlamaWeights(spec, embedding, layers, load("output_norm.weight"))
