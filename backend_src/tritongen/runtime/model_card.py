"""A model folder as tools that read the Hugging Face way expect it: `config.json` beside the tokenizer files.

Dynamo's frontend (and genai-perf, and transformers' AutoConfig) read `config.json`, `tokenizer.json` and
`tokenizer_config.json` from a model path. Folders built here carry a `config.json`; Optimum and hub
folders do too; onnxruntime-genai's builder writes `genai_config.json` instead, from which one is derived.
A served folder is never written: `write_model_card` puts the derived files in a folder of its own and
links the tokenizer files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .model_folder import read_json

# onnxruntime-genai's model.type -> the Hugging Face architecture it was built from.
_GENAI_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                        "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM", "gemma": "GemmaForCausalLM",
                        "gemma2": "Gemma2ForCausalLM", "granite": "GraniteForCausalLM", "olmo": "OlmoForCausalLM",
                        "phi": "PhiForCausalLM", "chatglm": "ChatGLMModel", "nemotron": "NemotronForCausalLM"}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
                    "chat_template.jinja")


def hf_config(folder: Path) -> dict:
    """The folder's `config.json`, or one derived from `genai_config.json`; ValueError naming what is missing."""
    folder = Path(folder)
    config = read_json(folder, "config.json")
    if config:
        return config
    genai = read_json(folder, "genai_config.json")
    if not genai:
        raise ValueError(f"{folder}: neither config.json nor genai_config.json: no model configuration to read")
    return _from_genai(folder / "genai_config.json", genai["model"] if isinstance(genai.get("model"), dict) else {})


def _from_genai(path: Path, model: dict) -> dict:
    decoder = model.get("decoder", {})
    missing = [k for k in ("type", "vocab_size", "context_length", "eos_token_id") if k not in model]
    missing += [f"decoder.{k}" for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                          "num_hidden_layers", "head_size") if k not in decoder]
    if missing:
        raise ValueError(f"{path}: cannot derive config.json, missing model.{', model.'.join(missing)}")
    kind = model["type"]
    return {
        "architectures": [_GENAI_ARCHITECTURES.get(kind, f"{kind.capitalize()}ForCausalLM")],
        "model_type": kind,
        "vocab_size": model["vocab_size"],
        "hidden_size": decoder["hidden_size"],
        "num_hidden_layers": decoder["num_hidden_layers"],
        "num_attention_heads": decoder["num_attention_heads"],
        "num_key_value_heads": decoder["num_key_value_heads"],
        "head_dim": decoder["head_size"],
        "max_position_embeddings": model["context_length"],
        "bos_token_id": model.get("bos_token_id"),
        "eos_token_id": model["eos_token_id"],
        "pad_token_id": model.get("pad_token_id"),
    }


def write_model_card(folder: Path, dest: Path) -> Path:
    """`dest` holding the folder's config.json (derived where it has none) and links to its tokenizer files.

    A chat template kept only in `chat_template.jinja` is also written into `tokenizer_config.json`, where
    readers of the older convention look for it.
    """
    folder, dest = Path(folder).resolve(), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(hf_config(folder), indent=1), encoding="utf-8")
    for name in _TOKENIZER_FILES:
        if (folder / name).is_file() and not (dest / name).exists():
            os.symlink(folder / name, dest / name)
    tokenizer_config = read_json(folder, "tokenizer_config.json")
    template = folder / "chat_template.jinja"
    if "chat_template" not in tokenizer_config and template.is_file():
        (dest / "tokenizer_config.json").unlink(missing_ok=True)
        tokenizer_config["chat_template"] = template.read_text(encoding="utf-8")
        (dest / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1), encoding="utf-8")
    return dest
