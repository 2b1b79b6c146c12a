"""The GroupQueryAttention layout, driven through slots, gives the concat model's logits.

Covers prefill (whole and chunked on top of a past, and with the logits of
its last position only), a ragged batched decode over several slots, and a
sequence moved to another slot.
"""

from __future__ import annotations

import queue

import numpy as np
import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest, SchedulerConfig
from tritongen.runtime.decoder_runner import DecoderRunner
from tritongen.runtime.gqa_decoder import GqaDecoder
from tritongen.runtime.repository import onnx_path
from tritongen.runtime.tokenizer import TextTokenizer

TEXTS = ["The capital of France is Paris, and the capital of Italy is",
         "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
         "Once upon a time, in a small village by the sea, there lived"]


def concat_reference(runner: DecoderRunner, ids: list[int], extra: list[int]):
    """Logits of the prompt and then of each extra token fed one at a time."""
    logits, past, _ = runner.forward(np.array([ids]), np.ones((1, len(ids)), np.int64), np.arange(len(ids))[None],
                                     runner.empty_past())
    steps = []
    for k, token in enumerate(extra):
        pos = len(ids) + k
        out, past, _ = runner.forward(np.array([[token]]), np.ones((1, pos + 1), np.int64), np.array([[pos]]), past)
        steps.append(out[0, 0])
    return logits[0], steps


@pytest.mark.parametrize("model", ["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_gqa_slots_match_concat_model(model, request, tiny_folder, tiny_concat_folder):
    if model == "tiny":
        gqa_folder, concat_folder = tiny_folder, tiny_concat_folder
    else:
        gqa_folder, concat_folder = (
            request.getfixturevalue("target_gqa_folder"),
            request.getfixturevalue("target_folder"),
        )
    tok = TextTokenizer(concat_folder)
    prompts = [tok.encode(t) for t in TEXTS]
    extra = [tok.encode(" and then")[:2] for _ in prompts]
    concat = DecoderRunner(onnx_path(concat_folder))
    slots = GqaDecoder(onnx_path(gqa_folder), max_slots=4, max_len=128)
    worst = {}

    def check(kind, a, b):
        worst[kind] = max(worst.get(kind, 0.0), float(np.abs(a - b).max()))

    refs = [concat_reference(concat, ids, ext) for ids, ext in zip(prompts, extra)]
    for slot, ids in enumerate(prompts):
        half = len(ids) // 2  # chunked prefill: a first chunk, then a chunk on top of that past
        first, _ = slots.run(slot, np.array([ids[:half]]), np.array([half - 1]))
        check("prefill", first[0], refs[slot][0][:half])
        second, _ = slots.run(slot, np.array([ids[half:]]), np.array([len(ids) - 1]))
        check("prefill", second[0], refs[slot][0][half:])
    last, _ = slots.prefill(3, np.array([prompts[0]]), 0)  # what the engine asks of a prompt chunk
    assert slots.keeps_logits and last.shape == (1, 1, refs[0][0].shape[-1])
    check("prefill, last position only", last[0, 0], refs[0][0][-1])
    every, _ = slots.prefill(3, np.array([prompts[0]]), 0, all_logits=True)  # what verification asks
    check("prefill, every position", every[0], refs[0][0])
    lengths = np.array([len(ids) for ids in prompts])
    for k in range(2):  # ragged batched decode over slots 0..2
        out, _ = slots.run(0, np.array([[ext[k]] for ext in extra]), lengths + k)
        for slot in range(3):
            check("decode", out[slot, 0], refs[slot][1][k])
    # Slot 2 moves to slot 0 (as when slot 0's sequence leaves) and keeps decoding there.
    slots.move(2, 0, int(lengths[2]) + 2)
    token = tok.encode(" more")[0]
    out, _ = slots.run(0, np.array([[token]]), np.array([lengths[2] + 2]))
    ids2 = prompts[2] + extra[2]
    _, after = concat_reference(concat, ids2, [token])
    check("moved slot", out[0, 0], after[0])
    print(f"{model}: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    assert max(worst.values()) < 1e-4


def test_engine_asks_a_prompt_chunk_for_its_last_logits_only(tiny_folder):
    """The LM head over every position of a prompt is a fifth of its work (bench/prefill_logits.py): the engine
    asks for the last position only, and its tokens stay those of a full-logits prefill."""
    engine = Engine(tiny_folder, EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=16)))
    shapes = []  # (tokens in, logits positions out) of every model call
    run = engine.decoder.run

    def recording_run(slot, ids, *args, **kwargs):
        out = run(slot, ids, *args, **kwargs)
        shapes.append((ids.shape[1], out[0].shape[1]))
        return out

    engine.decoder.run = recording_run
    try:
        request = GenerateRequest(list(range(3, 43)), GenerateOptions(max_new_tokens=4, greedy=True, stop_on_eos=False))
        got = engine.generate(request).token_ids
    finally:
        engine.close()
    prefills = [s for s in shapes if s[0] > 1]
    assert prefills == [(16, 1), (16, 1), (8, 1)], shapes  # three chunks of the 40-token prompt
    slots = GqaDecoder(onnx_path(tiny_folder), max_slots=1, max_len=64)
    logits, _ = slots.prefill(0, np.array([list(range(3, 43))]), 0, all_logits=True)
    assert got[0] == int(logits[0, -1].argmax())


def test_a_decode_step_leaves_out_the_rows_of_prompts_still_prefilling(tiny_folder):
    """A prompt being prefilled in chunks sits in a row after the decoding ones: the decode calls stop at the
    last decoding row instead of running the model on a dummy token for it, and both outputs stay as alone."""
    short = GenerateRequest([3, 4, 5, 6], GenerateOptions(max_new_tokens=12, greedy=True, stop_on_eos=False))
    long = GenerateRequest(list(range(7, 87)), GenerateOptions(max_new_tokens=4, greedy=True, stop_on_eos=False))
    config = EngineConfig(scheduler=SchedulerConfig(max_num_batched_tokens=16))
    engine = Engine(tiny_folder, config)
    try:
        alone = [engine.generate(short).token_ids, engine.generate(long).token_ids]
    finally:
        engine.close()
    engine = Engine(tiny_folder, config)
    widths = []  # rows of every decode call
    decode = engine.decoder.decode

    def recording_decode(ids, *args, **kwargs):
        widths.append(ids.shape[0])
        return decode(ids, *args, **kwargs)

    engine.decoder.decode = recording_decode
    got, done = [[], []], queue.Queue()
    try:
        for k, request in enumerate((short, long)):
            engine.submit(request, on_token=lambda token, k=k: got[k].append(token.token_id),
                          on_done=lambda *_: done.put(None))
        for _ in range(2):
            done.get(timeout=60)
    finally:
        engine.close()
    assert got == alone
    # The 80-token prompt runs in chunks (12, then 15 at a time) beside the short one's first 5 decode steps:
    # 1 row each.
    assert widths[:5] == [1] * 5 and 2 in widths, widths
