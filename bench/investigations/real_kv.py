"""A GroupQueryAttention decoder whose KV holds real prompts, for the single-step timings.

Random KV values are not neutral: the attention over random keys underflows to denormal numbers and the
same rows time differently (README.md here, ragged_rows). Prefilled prompts give the KV a real run has.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.prompts import long_prompts
from tritongen.runtime.cpu_threads import pin_calling_thread
from tritongen.runtime.gqa_decoder import GqaDecoder
from tritongen.runtime.repository import onnx_path
from tritongen.runtime.tokenizer import TextTokenizer

ROOT = Path(__file__).resolve().parents[2]


def prefilled_decoder(rows: int, length: int) -> GqaDecoder:
    """The served GQA model with threads pinned as the engine runs it (this thread too), `rows` distinct
    prompts of `length` tokens prefilled into its slots."""
    decoder = GqaDecoder(onnx_path(ROOT / "model_repository" / "target_gqa"), max_slots=rows, max_len=2048,
                          pin_threads=True)
    pin_calling_thread()
    tokenizer = TextTokenizer(ROOT / "model_repository" / "target")
    for slot, (_, ids) in enumerate(long_prompts(tokenizer, rows, length)):
        decoder.prefill(slot, np.asarray([ids], dtype=np.int64), 0)
    return decoder
