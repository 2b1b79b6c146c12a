"""The speculative heads the image serves beside the fp16 target: MTP and EAGLE-3 take the target's hidden state
cast to float32, so they keep the fp16 target's greedy tokens; the shared-KV assistant reads the target's KV as it
is, and one built for float32 KV is refused when the engine loads (not at the first request)."""

from __future__ import annotations

import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest
from tritongen.model_build.decoder_graph import build_decoder
from tritongen.model_build.fp16 import convert_fp16
from tritongen.model_build.head_folders import write_heads, write_target_matrices
from tritongen.model_build.hf_config import llama_config
from tritongen.model_build.onnx_folder import write_model_folder
from tritongen.model_build.tiny import tiny_settings, tiny_spec, tiny_tokenizer_json, tiny_weights
from tritongen.speculative.head_config import load_head
from tritongen.speculative.modes import SpeculativeMode

PROMPT = "Repeat: alpha beta gamma delta alpha beta gamma delta. Again:"


@pytest.fixture(scope="module")
def fp16_repository(tmp_path_factory):
    """A tiny fp16 target with seeded heads beside it, as `make models --fp16` lays SmolLM2's out."""
    repository = tmp_path_factory.mktemp("fp16_heads")
    spec, weights = tiny_spec(), tiny_weights(tiny_spec(), seed=0)
    settings = tiny_settings(spec)
    target = repository / "tiny_fp16"
    write_model_folder(target, convert_fp16(build_decoder(weights, attention="gqa")),
                       tiny_tokenizer_json(spec.vocab_size), settings, llama_config(spec, settings, "float16"))
    write_target_matrices(target, weights)
    write_heads(repository, target.name, weights)
    return repository


@pytest.mark.parametrize("kind", ["mtp", "eagle3"])
def test_hidden_state_heads_keep_the_fp16_targets_greedy_tokens(fp16_repository, kind):
    head = load_head(fp16_repository / f"{kind}_head", 4)
    engine = Engine(fp16_repository / "tiny_fp16", EngineConfig(intra_op_threads=1, **{kind: head}))
    try:
        def run(mode: str):
            options = GenerateOptions(max_new_tokens=12, stop_on_eos=False, speculative_mode=SpeculativeMode(mode))
            return engine.generate(GenerateRequest(PROMPT, options))
        speculated = run(kind)
        assert speculated.token_ids == run("none").token_ids and speculated.total_draft_tokens > 0
    finally:
        engine.close()


def test_a_float32_shared_kv_assistant_is_refused_beside_an_fp16_target(fp16_repository):
    head = load_head(fp16_repository / "shared_kv_head", 4)
    with pytest.raises(ValueError, match="keeps float16 KV"):
        Engine(fp16_repository / "tiny_fp16", EngineConfig(intra_op_threads=1, shared_kv=head))
