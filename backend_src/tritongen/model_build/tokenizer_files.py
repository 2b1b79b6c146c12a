"""Tokenizer and generation settings written beside each ONNX model.

`tokenizer.json` is what `tokenizers` (and llguidance) load;
`tokenizer_config.json` carries the chat template and special tokens so the
folder also works as a Hugging Face tokenizer folder (genai-perf reads one);
`generation_config.json` holds the EOS id and the context length.
"""

from __future__ import annotations

import json
from pathlib import Path

from gguf import GGUFReader

from .gguf_import import field_value

CONTROL_TOKEN_TYPES = (3, 4)  # gguf TokenType CONTROL, USER_DEFINED

# llama.cpp's "smollm" pre-tokenizer: single digits, then the GPT-2 regex.
_SMOLLM_PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    ],
}
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def tokenizer_json_from_gguf(reader: GGUFReader) -> dict:
    model = field_value(reader, "tokenizer.ggml.model")
    pre = field_value(reader, "tokenizer.ggml.pre")
    if model != "gpt2" or pre not in ("smollm", "gpt2"):
        raise ValueError(f"unsupported GGUF tokenizer {model!r}/{pre!r}")
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    types = field_value(reader, "tokenizer.ggml.token_type")
    merges = field_value(reader, "tokenizer.ggml.merges")
    added = [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, (tok, kind) in enumerate(zip(tokens, types)) if kind in CONTROL_TOKEN_TYPES
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": _SMOLLM_PRE_TOKENIZER if pre == "smollm" else _BYTE_LEVEL,
        "post_processor": None,
        "decoder": _BYTE_LEVEL,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": list(merges),
        },
    }


def settings_from_gguf(reader: GGUFReader) -> dict:
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    ids = {k: field_value(reader, f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "padding")}
    return {
        "chat_template": field_value(reader, "tokenizer.chat_template"),
        "bos_token": tokens[ids["bos"]] if ids["bos"] is not None else None,
        "eos_token": tokens[ids["eos"]],
        "eos_token_id": int(ids["eos"]),
        "bos_token_id": None if ids["bos"] is None else int(ids["bos"]),
        "pad_token_id": None if ids["padding"] is None else int(ids["padding"]),
        "add_bos_token": bool(field_value(reader, "tokenizer.ggml.add_bos_token")),
        "max_position_embeddings": int(field_value(reader, "llama.context_length")),
    }


def write_tokenizer_folder(folder: Path, tokenizer_json: dict, settings: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": settings["chat_template"],
        "bos_token": settings["bos_token"],
        "eos_token": settings["eos_token"],
        "pad_token": settings["eos_token"],
        "add_bos_token": settings["add_bos_token"],
        "model_max_length": settings["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }, indent=1, ensure_ascii=False), encoding="utf-8")
    (folder / "generation_config.json").write_text(json.dumps({
        "eos_token_id": settings["eos_token_id"],
        "bos_token_id": settings["bos_token_id"],
        "pad_token_id": settings["pad_token_id"],
        "max_position_embeddings": settings["max_position_embeddings"],
    }, indent=1), encoding="utf-8")
