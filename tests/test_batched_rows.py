"""Padded batches at the model level: each row equals the same prompt run alone.

Rows have different past lengths and different numbers of new tokens; the
past and the new tokens are padded on the left or on the right, and the
attention mask marks the padding. The continuous batching engine relies on this.
"""

from __future__ import annotations

import numpy as np
import pytest

from tritongen.runtime.decoder_runner import DecoderRunner
from tritongen.runtime.repository import onnx_path

ROWS = [(0, 5), (7, 1), (3, 4), (11, 2)]  # (past length, new tokens) per row


def run_alone(runner: DecoderRunner, ids: list[int], past_len: int):
    """Prefill the first past_len ids, then return the logits of the rest and that past."""
    past = runner.empty_past()
    if past_len:
        _, past, _ = runner.forward(np.array([ids[:past_len]]), np.ones((1, past_len), np.int64),
                                    np.arange(past_len)[None], past)
    new = ids[past_len:]
    logits, _, _ = runner.forward(np.array([new]), np.ones((1, len(ids)), np.int64),
                                  np.arange(past_len, len(ids))[None], past)
    return logits[0], past


def batched(runner: DecoderRunner, rows, pasts, side: str):
    s = runner.shape
    P = max(p for p, _ in rows)
    S = max(n for _, n in rows)
    B = len(rows)
    ids = np.zeros((B, S), np.int64)
    pos = np.zeros((B, S), np.int64)
    mask = np.zeros((B, P + S), np.int64)
    kv = [[np.zeros((B, s.num_kv_heads, P, s.head_dim), np.float32) for _ in range(2)] for _ in range(s.num_layers)]
    cols = []
    for r, ((p, n), (tokens, past)) in enumerate(zip(rows, pasts)):
        past_cols = slice(P - p, P) if side == "left" else slice(0, p)
        new_cols = slice(S - n, S) if side == "left" else slice(0, n)
        for layer in range(s.num_layers):
            for j in range(2):
                kv[layer][j][r, :, past_cols] = past[layer][j][0]
        mask[r, past_cols] = 1
        mask[r, P + new_cols.start:P + new_cols.stop] = 1
        ids[r, new_cols] = tokens[p:]
        pos[r, new_cols] = np.arange(p, p + n)
        cols.append(new_cols)
    logits, _, _ = runner.forward(ids, mask, pos, [tuple(pair) for pair in kv])
    return [logits[r, c] for r, c in enumerate(cols)]


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("model", ["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_padded_batch_rows_match_single_runs(model, side, tiny_concat_folder, request):
    folder = tiny_concat_folder if model == "tiny" else request.getfixturevalue("target_folder")
    runner = DecoderRunner(onnx_path(folder))
    rng = np.random.default_rng(7)
    prompts = [list(rng.integers(3, runner.shape.vocab_size, p + n)) for p, n in ROWS]
    alone = [run_alone(runner, ids, p) for ids, (p, _) in zip(prompts, ROWS)]
    rows_out = batched(runner, ROWS, [(ids, past) for ids, (_, past) in zip(prompts, alone)], side)
    worst = max(float(np.abs(b - a[0]).max()) for b, a in zip(rows_out, alone))
    print(f"{model} {side}-padded: max |batched - alone| = {worst:.2e}")
    assert worst < 1e-4
