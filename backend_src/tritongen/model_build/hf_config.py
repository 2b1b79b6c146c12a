"""The Hugging Face `config.json` of a built decoder, so tools that read a model folder the Hugging Face way
(Dynamo's frontend, genai-perf, transformers' AutoConfig) find its architecture, sizes and special tokens."""

from __future__ import annotations

from .llama_weights import LlamaSpec


def llama_config(spec: LlamaSpec, settings: dict, torch_dtype: str = "float32") -> dict:
    """LlamaForCausalLM's config for these weights; `settings` are the tokenizer settings (special token ids)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": settings["max_position_embeddings"],
        "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_theta,
        "tie_word_embeddings": True,
        "bos_token_id": settings["bos_token_id"],
        "eos_token_id": settings["eos_token_id"],
        "pad_token_id": settings["pad_token_id"],
        "torch_dtype": torch_dtype,
    }
