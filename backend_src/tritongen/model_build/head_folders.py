"""Write the speculative heads as repository folders, each with config.pbtxt and head_config.json.

head_config.json holds onnx-genai-engine's config fields (MtpConfig, Eagle3Config,
SharedKvProposerConfig) with paths relative to the repository, so the
generator needs only the folder's name. The target's embedding and LM
head are written once, as raw little-endian f32, beside the target.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from .heads import build_eagle3_head, build_mtp_head, build_shared_kv_head
from .llama_weights import LlamaSpec, LlamaWeights, hidden_state_layers
from .onnx_folder import triton_config

# SmolLM2-135M's trained EAGLE-3 head (scripts/eagle3/: self-distilled, float16, reduced draft vocabulary).
TRAINED_EAGLE3 = Path(__file__).with_name("eagle3_smollm2.npz")
_SPEC_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads")


def trained_eagle3(spec: LlamaSpec, path: Path = TRAINED_EAGLE3) -> dict[str, np.ndarray] | None:
    """The trained head's weights when they were trained for a target of this spec, else None (seeded head)."""
    if not path.exists():
        return None
    with np.load(path) as npz:
        if npz["target_spec"].tolist() != [getattr(spec, f) for f in _SPEC_FIELDS]:
            return None
        return {k: npz[k] if k == "d2t" else npz[k].astype(np.float32) for k in npz.files if k != "target_spec"}


def write_target_matrices(target_folder: Path, weights: LlamaWeights) -> None:
    weights.embedding.astype("<f4").tofile(target_folder / "embedding.f32")  # [vocab, hidden]
    np.ascontiguousarray(weights.embedding.T).astype("<f4").tofile(target_folder / "lm_head.f32")  # [hidden, vocab]


def _write(folder: Path, model: onnx.ModelProto, config: dict) -> None:
    (folder / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    (folder / "config.pbtxt").write_text(triton_config(folder.name, model), encoding="utf-8")
    (folder / "head_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")


def write_heads(repo: Path, target: str, weights: LlamaWeights, prefix: str = "", seed: int = 0) -> None:
    spec = weights.spec
    sizes = {"vocab_size": spec.vocab_size, "hidden_size": spec.hidden_size}
    embedding, lm_head = f"{target}/embedding.f32", f"{target}/lm_head.f32"
    low, mid, high = hidden_state_layers(spec.num_layers)
    _write(repo / f"{prefix}mtp_head", build_mtp_head(spec, seed), {
        "kind": "mtp", "head_model": f"{prefix}mtp_head/1/model.onnx", "target_hidden_output": "last_hidden_state",
        "embedding_weights": embedding, "lm_head_weights": lm_head, "kv_mode": "grow_cache", **sizes})
    _write(repo / f"{prefix}eagle3_head", build_eagle3_head(spec, weights.embedding, seed, trained_eagle3(spec)), {
        "kind": "eagle3", "head_model": f"{prefix}eagle3_head/1/model.onnx",
        "target_hidden_outputs": [f"hidden_states.{low}", f"hidden_states.{mid}", f"hidden_states.{high}"],
        "embedding_weights": embedding, "kv_mode": "grow_cache", **sizes})
    _write(repo / f"{prefix}shared_kv_head", build_shared_kv_head(spec, weights.embedding, seed=seed), {
        "kind": "shared_kv", "assistant_model": f"{prefix}shared_kv_head/1/model.onnx",
        "target_hidden_output": "last_hidden_state", "input_embedding_weights": embedding,
        "backbone_hidden_size": spec.hidden_size, "vocab_size": spec.vocab_size,
        "shared_kv": [{"name": "full_attention", "target_layers": [spec.num_layers - 1]}]})
