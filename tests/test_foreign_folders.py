"""The engine on model folders other tools made: onnxruntime-genai's builder (fp32, int4), Optimum (fp32 concat,
and an fp16 copy), the onnx-community hub layout. Tiny 2-layer twins, made by `make foreign-models`.

Each folder runs the engine suites' core checks: concurrent requests equal their solo runs, prefix reuse,
preemption under a small pool, a session's second turn, the KV connector, prompt lookup, a constraint.
"""

from __future__ import annotations

import json
import queue
import shutil

import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import (
    EngineConfig,
    FinishReason,
    GenerateConstraint,
    GenerateOptions,
    GenerateRequest,
    SchedulerConfig,
)
from tritongen.kv.connector_config import KvConnectorConfig, LocalTieredConfig
from tritongen.speculative.modes import SpeculativeMode

from conftest import foreign_folder
from triton_helpers import tree_digest

TINY = ["tiny-genai-fp32", "tiny-genai-int4", "tiny-optimum-fp32", "tiny-optimum-fp16"]
WORDS = "the quick brown fox jumps over a lazy dog while seven wise owls watch from old oak trees".split()


def text(i: int, n: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(n))


def greedy(n: int, **kw) -> GenerateOptions:
    return GenerateOptions(max_new_tokens=n, stop_on_eos=False, **kw)


def run_all(engine: Engine, requests: list[GenerateRequest]) -> list:
    done: queue.Queue = queue.Queue()
    for i, r in enumerate(requests):
        engine.submit(r, on_done=lambda res, err, i=i: done.put((i, res, err)))
    out = [None] * len(requests)
    for _ in requests:
        i, res, err = done.get(timeout=120)
        assert err is None, err
        out[i] = res
    return out


@pytest.fixture(scope="module", params=TINY)
def foreign(request):
    """An engine on one tiny foreign folder; the folder must be byte-identical afterwards."""
    path = foreign_folder(request.param)
    before = tree_digest(path)
    engine = Engine(path, EngineConfig(max_model_len=512))
    yield engine
    engine.close()
    assert tree_digest(path) == before, f"{path} changed while served"


def test_layout_and_kv_follow_the_folder(foreign):
    name = foreign.files.folder.name
    assert foreign.files.layout == ("genai" if "genai" in name else "optimum")
    assert type(foreign.decoder).__name__ == ("GqaDecoder" if "genai" in name else "ConcatDecoder")
    assert foreign.decoder.kv_dtype.__name__ == ("float16" if "fp16" in name else "float32")


def test_concurrent_requests_equal_their_solo_runs(foreign):
    requests = [GenerateRequest(text(i, 2 + 3 * i), greedy(8 + i)) for i in range(8)]
    solo = [foreign.generate(r).token_ids for r in requests]
    together = run_all(foreign, requests)
    assert [r.token_ids for r in together] == solo


def test_prefix_reuse_keeps_the_output(foreign):
    shared = text(3, 60)
    foreign.generate(GenerateRequest(shared + " one", greedy(4)))
    request = GenerateRequest(shared + " two", greedy(6))
    reused = foreign.generate(request)
    assert reused.prefix_cache_hit_len >= 16
    fresh = Engine(foreign.files.folder, EngineConfig(max_model_len=512))
    try:
        assert fresh.generate(request).token_ids == reused.token_ids
    finally:
        fresh.close()


def test_session_second_turn_prefills_only_new_tokens(foreign):
    turn1 = foreign.generate(GenerateRequest("hello world tell me", greedy(5)), session_id="s")
    context = foreign.prepare(GenerateRequest("hello world tell me")).prompt_ids + turn1.token_ids
    follow = context + foreign.tokenizer.encode(" more please", add_bos=False)
    turn2 = foreign.generate(GenerateRequest(follow, greedy(5)), session_id="s", end_session=True)
    assert turn2.prefix_cache_hit_len == len(context) - 1
    assert turn2.token_ids == foreign.generate(GenerateRequest(follow, greedy(5))).token_ids


def test_prompt_lookup_and_a_constraint(foreign):
    prompt = text(1, 30) + " " + text(1, 30)
    plain = foreign.generate(GenerateRequest(prompt, greedy(12)))
    looked = foreign.generate(GenerateRequest(prompt, greedy(12, speculative_mode=SpeculativeMode(
        "prompt_lookup", ngram=2, max_tokens=4))))
    assert looked.token_ids == plain.token_ids
    digits = foreign.generate(GenerateRequest("a number:", GenerateOptions(
        max_new_tokens=8, constraint=GenerateConstraint("regex", "[0-9]{3}"))))
    assert len(digits.text) == 3 and digits.text.isdigit() and digits.finish_reason == FinishReason.EOS_TOKEN


@pytest.mark.parametrize("name", TINY)
def test_preemption_under_a_small_pool_keeps_every_output(name):
    path = foreign_folder(name)
    roomy = Engine(path, EngineConfig(max_model_len=128))
    tight = Engine(path, EngineConfig(num_gpu_pages=10, page_size=16, max_model_len=160,
                                      scheduler=SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=24)))
    try:
        requests = [GenerateRequest(text(i, 10 + 2 * i), greedy(20)) for i in range(8)]
        want = [roomy.generate(r).token_ids for r in requests]
        got = run_all(tight, requests)
        assert [r.token_ids for r in got] == want and tight.stats.preemptions >= 1
        assert int(tight.pool.refcount.sum()) == 0
    finally:
        roomy.close()
        tight.close()


@pytest.mark.parametrize("name", ["tiny-genai-fp32", "tiny-optimum-fp16"])
def test_the_kv_connector_fetches_what_recompute_would_give(name, tmp_path):
    path = foreign_folder(name)
    connector = KvConnectorConfig("local_tiered", chunk_size=32, recompute_ms_per_token=1.0,
                                  local_tiered=LocalTieredConfig(disk_path=tmp_path))
    request = GenerateRequest(text(2, 70), greedy(8))
    first = Engine(path, EngineConfig(page_size=16, max_model_len=512, kv_connector=connector))
    try:
        want = first.generate(request).token_ids
        first.connector.flush()
    finally:
        first.close()
    again = Engine(path, EngineConfig(page_size=16, max_model_len=512, kv_connector=connector))
    try:
        out = again.generate(request)
        assert again.kv.connector_stats["hit_disk"] >= 1 and out.token_ids == want
    finally:
        again.close()


def test_the_hub_layout_serves_the_variant_it_is_told(tmp_path):
    """onnx-community's layout: tokenizer files at the top, graphs in onnx/ (model.onnx, model_fp16.onnx)."""
    hub = tmp_path / "hub"
    (hub / "onnx").mkdir(parents=True)
    fp32, fp16 = foreign_folder("tiny-optimum-fp32"), foreign_folder("tiny-optimum-fp16")
    for f in fp32.iterdir():
        if not f.name.startswith("model.onnx"):
            shutil.copy(f, hub / f.name)
    shutil.copy(fp32 / "model.onnx", hub / "onnx" / "model.onnx")
    shutil.copy(fp16 / "model.onnx", hub / "onnx" / "model_fp16.onnx")
    shutil.copy(fp16 / "model.onnx_data", hub / "onnx" / "model.onnx_data")  # the fp16 graph's weights file
    outputs = {}
    for variant, dtype in (("", "float32"), ("fp16", "float16")):
        engine = Engine(hub, EngineConfig(max_model_len=256, model_variant=variant))
        try:
            assert engine.files.layout == "hub" and engine.decoder.kv_dtype.__name__ == dtype
            outputs[variant] = engine.generate(GenerateRequest(text(0, 8), greedy(6))).token_ids
        finally:
            engine.close()
    reference = Engine(fp32, EngineConfig(max_model_len=256))
    try:
        assert outputs[""] == reference.generate(GenerateRequest(text(0, 8), greedy(6))).token_ids
    finally:
        reference.close()
    with pytest.raises(ValueError, match="model_q4.onnx: no such variant"):
        Engine(hub, EngineConfig(model_variant="q4"))


def test_a_list_of_eos_ids_each_stops(tmp_path):
    """generation_config.json's eos_token_id as a list: every id in it ends a request."""
    copy = tmp_path / "eos"
    shutil.copytree(foreign_folder("tiny-optimum-fp32"), copy)
    engine = Engine(copy, EngineConfig(max_model_len=256))
    try:
        first = engine.generate(GenerateRequest(text(0, 8), greedy(6))).token_ids
    finally:
        engine.close()
    settings = json.loads((copy / "generation_config.json").read_text())
    settings["eos_token_id"] = [settings["eos_token_id"], first[2]]
    (copy / "generation_config.json").write_text(json.dumps(settings))
    engine = Engine(copy, EngineConfig(max_model_len=256))
    try:
        assert engine.tokenizer.eos_token_ids[1] == first[2]
        out = engine.generate(GenerateRequest(text(0, 8), GenerateOptions(max_new_tokens=6)))
        assert out.token_ids == first[:3] and out.finish_reason == FinishReason.EOS_TOKEN
    finally:
        engine.close()
