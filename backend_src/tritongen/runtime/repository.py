"""Find the ONNX file of a repository model folder through its config.pbtxt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import text_format

from .config_proto import model_config_pb2


def read_config(folder: Path) -> Any:
    """The folder's ModelConfig message."""
    path = Path(folder) / "config.pbtxt"
    if not path.is_file():
        raise FileNotFoundError(f"model folder {folder} has no config.pbtxt (run `make models`)")
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def onnx_path(folder: Path) -> Path:
    """The newest numeric version's model file, as Triton's default version policy picks it."""
    folder = Path(folder)
    config = read_config(folder)
    if config.platform != "onnxruntime_onnx" and config.backend != "onnxruntime":
        raise ValueError(f"{folder.name}: config.pbtxt platform is {config.platform!r}, expected onnxruntime_onnx")
    versions = sorted((int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
    filename = config.default_model_filename or "model.onnx"
    for version in versions:
        candidate = folder / str(version) / filename
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{folder.name}: no version folder holds {filename} (run `make models`)")
