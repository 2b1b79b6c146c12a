"""Seeded tiny llama decoders and a byte-level tokenizer for fast unit tests."""

from __future__ import annotations

import json

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from .llama_weights import LayerWeights, LlamaSpec, LlamaWeights

TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? The capital of France is Paris.",
    "def add(a, b):\n    return a + b\n",
    "Numbers 0123456789 and symbols {}[]():;,.!?\"' héllo wörld 日本語",
] * 4


def tiny_spec(vocab_size: int = 320, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2) -> LlamaSpec:
    return LlamaSpec(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 2, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, rope_theta=10000.0, rms_eps=1e-5, max_position=512,
    )


def tiny_weights(spec: LlamaSpec, seed: int = 0) -> LlamaWeights:
    rng = np.random.default_rng(seed)
    h, ff, kv = spec.hidden_size, spec.intermediate_size, spec.num_kv_heads * spec.head_dim

    def mat(out_dim: int, in_dim: int) -> np.ndarray:
        return (rng.standard_normal((out_dim, in_dim)) / np.sqrt(in_dim)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(h)).astype(np.float32)

    layers = [
        LayerWeights(norm(), mat(h, h), mat(kv, h), mat(kv, h), mat(h, h), norm(), mat(ff, h), mat(ff, h), mat(h, ff))
        for _ in range(spec.num_layers)
    ]
    # Small embeddings, as in trained models: the tied LM head then does not just echo the input token.
    embedding = (0.02 * rng.standard_normal((spec.vocab_size, h))).astype(np.float32)
    return LlamaWeights(spec, embedding, layers, norm())


def tiny_tokenizer_json(vocab_size: int) -> dict:
    """A byte-level BPE trained on a fixed corpus: deterministic, multi-byte merges."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=TINY_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    return json.loads(tok.to_str())


def tiny_settings(spec: LlamaSpec) -> dict:
    return {
        "chat_template": TINY_CHAT_TEMPLATE, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "eos_token_id": 2, "bos_token_id": 1, "pad_token_id": 2, "add_bos_token": False,
        "max_position_embeddings": spec.max_position,
    }
