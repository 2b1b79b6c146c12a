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

The GroupQueryAttention variant (target_gqa) takes `seqlens_k` and `total_sequence_length`, while
onnxruntime-genai's native decoder format feeds `attention_mask`. `gqa_wrapper` writes, once, a copy of
that model with both computed in front of the decoder, the way onnxruntime-genai's own model builder does
it for its GQA models: seqlens_k = Cast(ReduceSum(attention_mask, axis 1) - 1, int32) and
total_sequence_length = Cast(Shape(attention_mask)[1], int32). Its genai_config says
`past_present_share_buffer: true`: past and present are one [batch, kv_heads, max_length, head_dim] buffer
per layer, written in place (the same zero-copy layout tritongen's engine binds).
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


def genai_config(target: Path, threads: int, gqa: bool = False, max_context: int | None = None) -> dict:
    """gqa: the wrapped GroupQueryAttention decoder (attention_mask in, no position_ids, shared KV buffer).
    max_context caps the context (a shared buffer is allocated at that length per sequence)."""
    shapes = read_shapes(target)
    layers = sum(1 for name in shapes if name.startswith("past_key_values.") and name.endswith(".key"))
    _, kv_heads, _, head_size = shapes["past_key_values.0.key"]
    vocab = shapes["logits"][-1]
    hidden = shapes["last_hidden_state"][-1]
    gen = json.loads((target / "generation_config.json").read_text())
    context = int(gen.get("max_position_embeddings", 2048))
    if max_context:
        context = min(context, max_context)
    inputs = {
        "input_ids": "input_ids",
        "attention_mask": "attention_mask",
        "position_ids": "position_ids",
        "past_key_names": "past_key_values.%d.key",
        "past_value_names": "past_key_values.%d.value",
    }
    if gqa:  # rotary positions come from seqlens_k inside the GroupQueryAttention op
        del inputs["position_ids"]
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
                "inputs": inputs,
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
            # The concat model: past and present are different tensors that grow by one row per step;
            # the GQA model: one buffer per layer of max_length rows, bound as both.
            "past_present_share_buffer": gqa,
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
    key = _stamp(src)
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


def _stamp(src: Path) -> dict:
    st = src.stat()
    return {"source": str(src.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def gqa_wrapper(src: Path, dst: Path) -> None:
    """The GroupQueryAttention decoder behind an attention_mask input (onnxruntime-genai's native format).

    Graph inputs seqlens_k and total_sequence_length become tensors computed from attention_mask [B, T]:
    seqlens_k = ReduceSum(attention_mask, axis 1) - 1 (int32 [B]), total_sequence_length = [T] (int32
    [1]). num_logits_to_keep becomes the constant [0] (logits at every position, the shape the peers expect).
    Outputs: logits and present.* only (same nodes and weights). Cached by source size and mtime.
    """
    stamp = dst.with_suffix(".source.json")
    key = _stamp(src)
    if dst.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == key:
        return
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(src))
    graph = model.graph
    names = {i.name for i in graph.input}
    if not {"seqlens_k", "total_sequence_length"} <= names:
        raise ValueError(f"{src} has no seqlens_k / total_sequence_length inputs: not a GQA decoder")
    kept = [i for i in graph.input if i.name not in ("seqlens_k", "total_sequence_length", "num_logits_to_keep")]
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total_sequence_length"])
    del graph.input[:]
    graph.input.extend([kept[0], mask, *kept[1:]])  # input_ids, attention_mask, past_key_values.*
    prefix = "genai_wrapper_"
    consts = [helper.make_tensor(prefix + "axis1", TensorProto.INT64, [1], [1]),
              helper.make_tensor(prefix + "one", TensorProto.INT64, [], [1])]
    if "num_logits_to_keep" in names:
        consts.append(helper.make_tensor("num_logits_to_keep", TensorProto.INT64, [1], [0]))
    nodes = [
        helper.make_node(
            "ReduceSum", ["attention_mask", prefix + "axis1"], [prefix + "lengths"], keepdims=0, name=prefix + "lengths"
        ),
        helper.make_node("Sub", [prefix + "lengths", prefix + "one"], [prefix + "seqlens_i64"], name=prefix + "sub"),
        helper.make_node(
            "Cast", [prefix + "seqlens_i64"], ["seqlens_k"], to=TensorProto.INT32, name=prefix + "seqlens"
        ),
        helper.make_node("Shape", ["attention_mask"], [prefix + "mask_shape"], name=prefix + "shape"),
        helper.make_node(
            "Gather", [prefix + "mask_shape", prefix + "axis1"], [prefix + "total_i64"], axis=0, name=prefix + "gather"
        ),
        helper.make_node(
            "Cast", [prefix + "total_i64"], ["total_sequence_length"], to=TensorProto.INT32, name=prefix + "total"
        ),
    ]
    graph.initializer.extend(consts)
    old = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + old)
    keep = [o for o in graph.output if o.name == "logits" or o.name.startswith("present.")]
    del graph.output[:]
    graph.output.extend(keep)
    onnx.checker.check_model(model)
    tmp = dst.with_name(dst.name + ".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, dst)
    stamp.write_text(json.dumps(key))


def prepare(target: Path, onnx_file: Path, work: Path, threads: int, gqa_target: Path | None = None,
            gqa_file: Path | None = None, gqa_context: int | None = None) -> dict[str, Path]:
    """Write the peers' folders under `work`; returns {"ort-genai": folder, "onnx-genai": folder} and, with
    gqa_target / gqa_file (the GroupQueryAttention variant), "ort-genai-gqa" (also served by onnx-genai's
    server), its context capped at gqa_context (the generator's max_model_len: the same KV buffer per
    sequence as tritongen's slots)."""
    config = genai_config(target, threads)
    folders = {"ort-genai": work / "ort-genai-model", "onnx-genai": work / "onnx-genai-model"}
    if gqa_target is not None:
        folders["ort-genai-gqa"] = work / "ort-genai-gqa-model"
    for name, folder in folders.items():
        folder.mkdir(parents=True, exist_ok=True)
        cfg = genai_config(gqa_target, threads, gqa=True, max_context=gqa_context) if name.endswith("-gqa") else config
        (folder / "genai_config.json").write_text(json.dumps(cfg, indent=1) + "\n")
        for f in TOKENIZER_FILES:
            _link((gqa_target if name.endswith("-gqa") else target) / f, folder / f)
    _link(onnx_file, folders["ort-genai"] / "model.onnx")
    _pruned_copy(onnx_file, folders["onnx-genai"] / "model.onnx")
    if gqa_target is not None:
        gqa_wrapper(gqa_file, folders["ort-genai-gqa"] / "model.onnx")
    return folders
