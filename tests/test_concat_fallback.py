"""The engine on a concat past/present model (the fallback layout) gives the GQA engine's tokens."""

from __future__ import annotations

import queue

import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateOptions, GenerateRequest, SchedulerConfig
from tritongen.runtime.concat_decoder import ConcatDecoder

PROMPTS = ["Hello world", "def add(a, b):", "The capital of France", "0123456789 abc", "Once upon a time there"]


def run_all(engine: Engine, requests) -> list[list[int]]:
    done: queue.Queue = queue.Queue()
    for i, r in enumerate(requests):
        engine.submit(r, on_done=lambda res, err, i=i: done.put((i, res, err)))
    out = [None] * len(requests)
    for _ in requests:
        i, res, err = done.get(timeout=120)
        assert err is None, err
        out[i] = res.token_ids
    return out


@pytest.mark.parametrize("pages", [1024, 10])
def test_concat_fallback_matches_gqa_engine(tiny_folder, tiny_concat_folder, pages):
    # Different lengths, prompts joining and leaving mid-batch; 10 pages of 4 tokens force preemption too.
    config = lambda: EngineConfig(num_gpu_pages=pages, page_size=4, max_model_len=min(512, 4 * pages),  # noqa: E731
                                  scheduler=SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=7))
    requests = [GenerateRequest(p, GenerateOptions(max_new_tokens=6 + 3 * i, stop_on_eos=False))
                for i, p in enumerate(PROMPTS)]
    fallback = Engine(tiny_concat_folder, config())
    gqa = Engine(tiny_folder, config())
    try:
        assert isinstance(fallback.decoder, ConcatDecoder)
        assert run_all(fallback, requests) == run_all(gqa, requests)
        if pages == 10:
            assert fallback.stats.preemptions >= 1
    finally:
        fallback.close()
        gqa.close()
