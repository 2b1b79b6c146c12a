"""head_config.json of a repository head folder -> onnx-genai-engine's head configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar, Union

from .modes import Eagle3Config, MtpConfig, SharedKvBinding, SharedKvProposerConfig

HeadConfig = Union[MtpConfig, Eagle3Config, SharedKvProposerConfig]
_Head = TypeVar("_Head", MtpConfig, Eagle3Config, SharedKvProposerConfig)


def load_head(folder: Path, num_speculative_tokens: int, **overrides: object) -> HeadConfig:
    """The head's configuration; its own num_speculative_tokens when head_config.json has one, else the given."""
    folder = Path(folder)
    path = folder / "head_config.json"
    if not path.is_file():
        raise FileNotFoundError(f"speculative head folder {folder} has no head_config.json (run `make models`)")
    raw = {**json.loads(path.read_text(encoding="utf-8")), **overrides}
    repo = folder.parent
    kind = raw.pop("kind")
    for key in ("head_model", "assistant_model", "embedding_weights", "lm_head_weights", "input_embedding_weights"):
        if key in raw:
            raw[key] = repo / raw[key]
    raw.setdefault("num_speculative_tokens", num_speculative_tokens)
    config: HeadConfig
    if kind == "mtp":
        config = MtpConfig(**raw)
    elif kind == "eagle3":
        config = Eagle3Config(**raw)
    elif kind == "shared_kv":
        raw["shared_kv"] = [SharedKvBinding(**b) for b in raw["shared_kv"]]
        config = SharedKvProposerConfig(**raw)
    else:
        raise ValueError(f"{path}: unknown head kind {kind!r}")
    config.validate()
    return config


def load_head_of(expected: type[_Head], folder: Path, num_speculative_tokens: int, **overrides: object) -> _Head:
    """`load_head` for a folder configured as one kind of head; ValueError when its head_config.json names another."""
    config = load_head(folder, num_speculative_tokens, **overrides)
    if not isinstance(config, expected):
        raise ValueError(f"{Path(folder) / 'head_config.json'}: expected a {expected.__name__} head, "
                         f"found {type(config).__name__}")
    return config
