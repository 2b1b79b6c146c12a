"""The fp16 build (make models FP16=1, for GPUs) keeps the decoder's contract: fp16 KV and logits, the same greedy
tokens as the fp32 model on a tiny seeded decoder, and the paged store and prefix reuse still work on it."""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.model_build.decoder_graph import build_decoder
from tritongen.model_build.fp16 import convert_fp16
from tritongen.model_build.hf_config import llama_config
from tritongen.model_build.onnx_folder import write_model_folder
from tritongen.model_build.tiny import tiny_settings, tiny_spec, tiny_tokenizer_json, tiny_weights
from tritongen.runtime.repository import read_config

PROMPT = "The capital of France is Paris. The quick brown fox jumps over the lazy dog. " * 3


def test_fp16_build_generates_the_fp32_tokens_with_fp16_kv(tiny_folder, tmp_path):
    spec = tiny_spec()
    folder = tmp_path / "tiny_gqa_fp16"
    settings = tiny_settings(spec)
    write_model_folder(folder, convert_fp16(build_decoder(tiny_weights(spec, seed=0), attention="gqa")),
                       tiny_tokenizer_json(spec.vocab_size), settings, llama_config(spec, settings, "float16"))
    options = GenerateOptions(max_new_tokens=24, stop_on_eos=False)
    outputs = {}
    for name, path in (("fp32", tiny_folder), ("fp16", folder)):
        engine = Engine(path, EngineConfig(intra_op_threads=1))
        try:
            first = engine.generate(GenerateRequest(PROMPT, options))
            again = engine.generate(GenerateRequest(PROMPT, options))  # from the page store: the prefix is reused
            outputs[name] = (first.token_ids, again.token_ids, again.prefix_cache_hit_len, engine.decoder.kv_dtype)
        finally:
            engine.close()
    tokens, again, hit, kv_dtype = outputs["fp16"]
    assert kv_dtype == np.float16 and outputs["fp32"][3] == np.float32
    assert tokens == outputs["fp32"][0]
    assert again == tokens and hit > 0
    # Built for GPUs, its folder asks Triton's onnxruntime backend for one; the fp32 folder for a CPU.
    kinds = {name: read_config(path).instance_group[0].kind for name, path in (("fp32", tiny_folder), ("fp16", folder))}
    assert kinds == {"fp32": mc.ModelInstanceGroup.KIND_CPU, "fp16": mc.ModelInstanceGroup.KIND_GPU}
