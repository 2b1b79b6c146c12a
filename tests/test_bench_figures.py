"""The benchmark's steady decode rate must not favour one delivery pattern over another.

The engine and Triton hand a step's tokens to the streams one after another; the
raw loops stamp all rows of a step with one time. Both patterns, at the same step
rate, must come out at the same tok/s.
"""

from __future__ import annotations

import pytest

from bench.concurrency import figures

STREAMS, NEW_TOKENS, STEP_S = 16, 96, 0.05


def streams(start_steps: list[int], spacing_s: float, per_response: int = 1) -> dict:
    """Stream i gets its first token at step start_steps[i]; within a step stream i's token lands i * spacing_s
    after the step ends; every `per_response` tokens arrive together (stream_interval)."""
    out = []
    for i, first in enumerate(start_steps):
        steps = range(first, first + NEW_TOKENS)
        times = [STEP_S * (s - s % per_response + per_response - 1) + i * spacing_s for s in steps]
        out.append({"tokens": [0] * NEW_TOKENS, "times": times, "issued": 0.0})
    return {"streams": out}


@pytest.mark.parametrize("spacing_s", [0.0, 0.0005, 0.002])
def test_staggered_streams_delivered_one_after_another_give_the_step_rate(spacing_s):
    rec = streams([2 * i for i in range(STREAMS)], spacing_s)
    tps = figures(rec, NEW_TOKENS, 448)["tps"]
    assert tps == pytest.approx(STREAMS / STEP_S, rel=1e-9)


def test_tokens_in_groups_of_four_give_the_step_rate():
    rec = streams([0] * STREAMS, 0.0005, per_response=4)
    assert figures(rec, NEW_TOKENS, 448)["tps"] == pytest.approx(STREAMS / STEP_S, rel=1e-9)


def test_a_static_batch_is_batch_times_intervals_over_its_span():
    rec = streams([0] * STREAMS, 0.0)
    rec["tiled"] = True
    assert figures(rec, NEW_TOKENS, 448)["tps"] == pytest.approx(
        STREAMS * (NEW_TOKENS - 1) / (STEP_S * (NEW_TOKENS - 1))
    )
