"""Model folders for the peers, built from our target folder without touching it.

onnxruntime-genai reads `genai_config.json` beside the ONNX file and tokenizer files; we write one that
describes our decoder (names, layers, heads, sizes, EOS, context) and symlink model.onnx and the
tokenizer files. Every number comes from the target's config.pbtxt (tensor shapes) and
generation_config.json, so a rebuilt or different model gets a matching config.

onnx-genai 0.1.0.dev6 reads the same genai_config.json but refuses a decoder with rank-3 outputs it
cannot account for ("cannot resolve decoder state from tensor shapes ... outputs:
[last_hidden_state, hidden_states.2, hidden_states.15, hidden_states.27]"): a genai_config can declare no
hidden-state output, and its own metadata format at most one. Its folder therefore holds a copy of
model.onnx whose graph lists only logits and present.* as outputs: the same nodes and weights (the
hidden states are intermediate tensors on the way to the logits either way), cached by source size and
mtime.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def read_shapes(target: Path) -> dict[str, list[int]]:
    config = text_format.Parse((target / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    return {t.name: list(t.dims) for t in [*config.input, *config.output]}


def genai_config(target: Path, threads: int) -> dict:
    shapes = read_shapes(target)
    layers = sum(1 for name in shapes if name.startswith("past_key_values.") and name.endswith(".key"))
    _, kv_heads, _, head_size = shapes["past_key_values.0.key"]
    vocab = shapes["logits"][-1]
    hidden = shapes["last_hidden_state"][-1]
    gen = json.loads((target / "generation_config.json").read_text())
    context = int(gen.get("max_position_embeddings", 2048))
    return {
        "model": {
            "bos_token_id": gen.get("bos_token_id", 1),
            "context_length": context,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": [],
                                    "intra_op_num_threads": threads},
                "filename": "model.onnx",
                "head_size": head_size,
                "hidden_size": hidden,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "position_ids": "position_ids",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": hidden // head_size,  # llama: head_dim = hidden / heads
                "num_hidden_layers": layers,
                "num_key_value_heads": kv_heads,
            },
            "eos_token_id": gen["eos_token_id"],
            "pad_token_id": gen.get("pad_token_id", gen["eos_token_id"]),
            "type": "llama",
            "vocab_size": vocab,
        },
        "search": {
            "diversity_penalty": 0.0, "do_sample": False, "early_stopping": True, "length_penalty": 1.0,
            "max_length": context, "min_length": 0, "no_repeat_ngram_size": 0, "num_beams": 1,
            "num_return_sequences": 1,
            # The concat model: past and present are different tensors that grow by one row per step.
            "past_present_share_buffer": False,
            "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 1, "top_p": 1.0,
        },
    }


def _link(src: Path, dst: Path) -> None:
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    dst.symlink_to(src.resolve())


def _pruned_copy(src: Path, dst: Path) -> None:
    """model.onnx with graph outputs reduced to logits and present.* (same nodes, same weights)."""
    stamp = dst.with_suffix(".source.json")
    st = src.stat()
    key = {"source": str(src.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if dst.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == key:
        return
    import onnx

    model = onnx.load(str(src))
    keep = [o for o in model.graph.output if o.name == "logits" or o.name.startswith("present.")]
    del model.graph.output[:]
    model.graph.output.extend(keep)
    tmp = dst.with_name(dst.name + ".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, dst)
    stamp.write_text(json.dumps(key))


def prepare(target: Path, onnx_file: Path, work: Path, threads: int) -> dict[str, Path]:
    """Write the peers' folders under `work`; returns {"ort-genai": folder, "onnx-genai": folder}."""
    config = genai_config(target, threads)
    folders = {"ort-genai": work / "ort-genai-model", "onnx-genai": work / "onnx-genai-model"}
    for name, folder in folders.items():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "genai_config.json").write_text(json.dumps(config, indent=1) + "\n")
        for f in TOKENIZER_FILES:
            _link(target / f, folder / f)
    _link(onnx_file, folders["ort-genai"] / "model.onnx")
    _pruned_copy(onnx_file, folders["onnx-genai"] / "model.onnx")
    return folders
