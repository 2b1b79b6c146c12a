"""Where a model folder keeps its ONNX graph and what its own metadata says, whatever tool made it.

Layouts, recognised by their marker file:
- ours (and any onnxruntime-backend model folder): `config.pbtxt` and a numeric version folder;
- onnxruntime-genai's model builder: `genai_config.json`, whose decoder names the graph;
- the onnx-community hub layout: `onnx/model.onnx`, `onnx/model_q4.onnx`, ... beside the tokenizer
  files, one picked by `variant` ("" for model.onnx, "q4" for model_q4.onnx);
- Optimum (`text-generation-with-past`): `model.onnx` beside `config.json`.
The folder is only read, never written. Every fault names the file and the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .repository import onnx_path


@dataclass(frozen=True)
class ModelFiles:
    folder: Path  # the folder served: tokenizer and metadata files live here
    onnx_file: Path
    layout: str  # "tritongen", "genai", "hub" or "optimum"
    context_length: int | None  # None: the model declares none (max_model_len applies)
    head_dim: int | None  # from metadata, for graphs whose KV head dimension is symbolic


def read_json(folder: Path, name: str) -> dict:
    """A metadata file as a dict; {} when absent; ValueError naming it when it is not a JSON object."""
    path = Path(folder) / name
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return value


def _int(path: Path, key: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{path}: {key} must be a positive integer, got {value!r}")
    return value


def locate(folder: Path, variant: str = "") -> ModelFiles:
    """The folder's graph and the numbers its metadata declares; ValueError naming what is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"model folder {folder} does not exist")
    genai = read_json(folder, "genai_config.json")
    config = read_json(folder, "config.json")
    if (folder / "config.pbtxt").is_file():
        layout, onnx_file = "tritongen", onnx_path(folder)
    elif genai:
        decoder = genai.get("model", {}).get("decoder", {})
        filename = decoder.get("filename")
        if not isinstance(filename, str) or not filename:
            raise ValueError(f"{folder / 'genai_config.json'}: model.decoder.filename is missing")
        layout, onnx_file = "genai", folder / filename
    elif (folder / "onnx").is_dir():
        layout, onnx_file = "hub", folder / "onnx" / (f"model_{variant}.onnx" if variant else "model.onnx")
        if not onnx_file.is_file():
            found = sorted(p.name for p in (folder / "onnx").glob("model*.onnx"))
            raise ValueError(f"{onnx_file}: no such variant (model_variant {variant!r}); the folder has {found}")
    elif (folder / "model.onnx").is_file():
        layout, onnx_file = "optimum", folder / "model.onnx"
    else:
        raise ValueError(f"{folder}: no model found (expected config.pbtxt, genai_config.json, onnx/model*.onnx "
                         "or model.onnx)")
    if not onnx_file.is_file():
        raise ValueError(f"{onnx_file}: the graph named by the folder's metadata does not exist")
    return ModelFiles(folder, onnx_file, layout, _context_length(folder, genai, config),
                      _head_dim(folder, genai, config))


def _context_length(folder: Path, genai: dict, config: dict) -> int | None:
    """genai_config's model.context_length, else config.json's max_position_embeddings (our builder writes
    that key to generation_config.json)."""
    if "context_length" in genai.get("model", {}):
        return _int(folder / "genai_config.json", "model.context_length", genai["model"]["context_length"])
    if "max_position_embeddings" in config:
        return _int(folder / "config.json", "max_position_embeddings", config["max_position_embeddings"])
    ours = read_json(folder, "generation_config.json").get("max_position_embeddings")
    return _int(folder / "generation_config.json", "max_position_embeddings", ours)


def _head_dim(folder: Path, genai: dict, config: dict) -> int | None:
    decoder = genai.get("model", {}).get("decoder", {})
    if "head_size" in decoder:
        return _int(folder / "genai_config.json", "model.decoder.head_size", decoder["head_size"])
    if config.get("head_dim") is not None:
        return _int(folder / "config.json", "head_dim", config["head_dim"])
    if config.get("hidden_size") and config.get("num_attention_heads"):
        hidden = _int(folder / "config.json", "hidden_size", config["hidden_size"])
        heads = _int(folder / "config.json", "num_attention_heads", config["num_attention_heads"])
        assert hidden is not None and heads is not None  # both values are set (checked just above)
        return hidden // heads
    return None
