"""Rules of onnx-genai-engine 0.1.0-dev.2's public API (its `config.rs`), each quoted beside the test that holds
the engine to it."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, FinishReason, GenerateOptions, GenerateRequest
from tritongen.engine.sampling import RequestSampler
from tritongen.kv.connector_config import DEFAULT_CHUNK_SIZE, KvConnectorConfig
from tritongen.runtime.repository import read_config
from tritongen.speculative.head_config import load_head
from tritongen.speculative.modes import Eagle3Config, SpeculativeMode
from tritongen.triton.generator_settings import parse_settings

from conftest import REPOSITORY


def greedy(n: int, **kw) -> GenerateOptions:
    return GenerateOptions(max_new_tokens=n, stop_on_eos=False, **kw)


def test_a_configured_draft_model_is_the_default_mode(tiny_folder):
    """config.rs, `EngineConfig::speculative_mode`: "For compatibility, a configured `draft_model` selects
    `DraftModel` when this remains `None`.\""""
    engine = Engine(tiny_folder, EngineConfig(draft_model=tiny_folder))
    try:
        assert engine.speculation.default_mode().kind == "draft_model"
        drafted = engine.generate(GenerateRequest("Hello world", greedy(12)))
        plain = engine.generate(GenerateRequest("Hello world", greedy(12, speculative_mode=SpeculativeMode("none"))))
        assert drafted.total_draft_tokens > 0 and plain.total_draft_tokens == 0
        assert drafted.token_ids == plain.token_ids
    finally:
        engine.close()
    # The shipped generator names no draft model, so its default stays plain decoding.
    shipped = {k: v.string_value for k, v in read_config(REPOSITORY / "generator").parameters.items()}
    settings = parse_settings(shipped, REPOSITORY)
    assert settings.engine.draft_model is None and settings.engine.speculative_mode.kind == "none"


def test_a_repetition_penalty_of_one_or_less_does_nothing():
    """config.rs, `GenerateOptions::repetition_penalty`: "Repetition penalty applied to prompt and generated tokens.
    Values <= 1 disable it.\""""
    logits = np.array([2.0, -1.0, 0.5, 3.0], np.float32)

    def processed(penalty: float) -> np.ndarray:
        sampler = RequestSampler(GenerateOptions(repetition_penalty=penalty, greedy=False, temperature=1.0),
                                 [0, 1], 4)
        return sampler.process(logits)

    assert np.array_equal(processed(0.5), processed(1.0)) and np.array_equal(processed(1.0), logits)
    assert processed(2.0)[0] == pytest.approx(1.0) and processed(2.0)[1] == pytest.approx(-2.0)


def test_top_logprobs_come_from_the_final_distribution_greedy_rows_too(tiny):
    """config.rs, `GenerateOptions::top_logprobs`: "Values are computed from the final post-processor distribution
    used for sampling. The chosen token is always included in `TokenLogprob::top`.\""""
    out = tiny.generate(GenerateRequest("Hello world", greedy(6, top_k=2, top_logprobs=5)))
    for lp in out.logprobs:
        assert len(lp.top) <= 2 and lp.token_id in [t for t, _ in lp.top]  # filtered tokens are not listed
        assert math.isclose(sum(math.exp(p) for _, p in lp.top), 1.0, rel_tol=1e-5)  # renormalized over the 2
        assert all(math.isfinite(p) for _, p in lp.top) and math.isfinite(lp.logprob)
    unfiltered = tiny.generate(GenerateRequest("Hello world", greedy(6, top_logprobs=5)))
    assert unfiltered.token_ids == out.token_ids  # greedy: the filters never move the argmax
    assert all(len(lp.top) == 5 for lp in unfiltered.logprobs)


def test_top_logprobs_are_capped_at_the_boundaries_only(tiny):
    """Not a rule of config.rs: it caps nothing. The cap of 20 (OpenAI's) applies to Triton and OpenAI requests."""
    out = tiny.generate(GenerateRequest("Hello", greedy(2, top_logprobs=50)))
    assert all(len(lp.top) == 50 for lp in out.logprobs)


def test_a_head_config_carries_its_own_k(tiny_folder, tmp_path):
    """config.rs, `Eagle3Config::num_speculative_tokens`: "Number of speculative tokens produced after the
    guaranteed target token" — the head's own, read from its configuration (a request's K still wins)."""
    from tritongen.model_build.head_folders import write_heads, write_target_matrices
    from tritongen.model_build.tiny import tiny_spec, tiny_weights

    target = tmp_path / tiny_folder.name
    shutil.copytree(tiny_folder, target)
    weights = tiny_weights(tiny_spec(), seed=0)
    write_target_matrices(target, weights)
    write_heads(tmp_path, target.name, weights)
    config_file = tmp_path / "eagle3_head" / "head_config.json"
    raw = json.loads(config_file.read_text())
    raw["num_speculative_tokens"] = 2
    config_file.write_text(json.dumps(raw))
    head = load_head(tmp_path / "eagle3_head", 4)
    assert head.num_speculative_tokens == 2
    engine = Engine(target, EngineConfig(eagle3=head, num_speculative_tokens=4))
    try:
        mode = SpeculativeMode("eagle3")
        assert engine.speculation.for_request(GenerateOptions(speculative_mode=mode))[2] == 2
        assert engine.speculation.for_request(GenerateOptions(speculative_mode=mode, num_speculative_tokens=3))[2] == 3
        assert (
            engine.speculation.for_request(GenerateOptions(speculative_mode=SpeculativeMode("prompt_lookup")))[2] == 4
        )
    finally:
        engine.close()


def test_eagle3_kv_mode_is_validated_and_hidden_threaded_starts_each_step_empty(tiny_folder, tmp_path):
    """config.rs, `Eagle3Config::kv_mode`: "EAGLE-3 head cache strategy" (`Eagle3DraftKvMode`): GrowCache or
    HiddenThreaded, the latter threading only the hidden state from step to step."""
    from tritongen.model_build.head_folders import write_heads, write_target_matrices
    from tritongen.model_build.tiny import tiny_spec, tiny_weights

    bogus = Eagle3Config("h.onnx", ["a", "b", "c"], "e.bin", 10, 4, kv_mode="bogus")
    with pytest.raises(ValueError, match="EAGLE-3 kv_mode must be grow_cache or hidden_threaded"):
        bogus.validate()
    target = tmp_path / tiny_folder.name
    shutil.copytree(tiny_folder, target)
    weights = tiny_weights(tiny_spec(), seed=0)
    write_target_matrices(target, weights)
    write_heads(tmp_path, target.name, weights)
    head = load_head(tmp_path / "eagle3_head", 3, kv_mode="hidden_threaded")
    engine = Engine(target, EngineConfig(eagle3=head))
    try:
        proposer = engine.speculation.proposers["eagle3"]
        pasts = []
        run = proposer.session.run

        def recording(names, feeds):
            pasts.append(feeds["past_key_values.0.key"].shape[2])
            return run(names, feeds)

        proposer.session.run = recording
        mode = SpeculativeMode("eagle3")
        out = engine.generate(GenerateRequest("Hello world", greedy(10, speculative_mode=mode)))
        plain = engine.generate(GenerateRequest("Hello world", greedy(10)))
        assert out.token_ids == plain.token_ids and out.total_draft_tokens > 0
        assert pasts and set(pasts) == {0}  # every draft step saw an empty head cache
    finally:
        engine.close()


def test_a_chunk_size_of_zero_means_the_default():
    """config.rs, `KvConnectorConfig::chunk_size`: "Tokens per cached chunk for keying. `0` =>
    [`DEFAULT_CHUNK_SIZE`].\""""
    config = KvConnectorConfig("local_tiered", chunk_size=0)
    config.validate(page_size=16)
    assert config.chunk_size == DEFAULT_CHUNK_SIZE
    with pytest.raises(ValueError, match="positive multiple of page_size"):
        KvConnectorConfig("local_tiered", chunk_size=24).validate(page_size=16)


def test_length_is_the_context_window_only(tiny_folder):
    """config.rs, `FinishReason::Length`: "The model context window was reached before another decode step could
    run." A pool that could never hold a full context is refused at load instead (tests/test_page_accounting.py)."""
    engine = Engine(tiny_folder, EngineConfig(max_model_len=40))
    try:
        prompt = engine.prepare(GenerateRequest("Hello world, this is a prompt")).prompt_ids
        out = engine.generate(GenerateRequest(prompt, greedy(100)))
        assert out.finish_reason == FinishReason.LENGTH and len(prompt) + len(out.token_ids) == 40
    finally:
        engine.close()
