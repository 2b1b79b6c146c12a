"""head_config.json of a repository head folder -> onnx-genai-engine's head configuration."""

from __future__ import annotations

import json
from pathlib import Path

from .modes import Eagle3Config, MtpConfig, SharedKvBinding, SharedKvProposerConfig


def load_head(folder: Path, num_speculative_tokens: int, **overrides):
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
