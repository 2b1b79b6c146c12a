"""What the engine, the KV manager and the proposers use of a decoder, whichever graph it runs.

Two decoders implement it (gqa_decoder.py, concat_decoder.py); callers type their decoder as `Decoder` so
that mypy holds both to one contract, and read the row capabilities instead of asking which one they have.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .array_module import ArrayModule
from .decoder_signature import DecoderShape


class Decoder(Protocol):
    """A decoder over slot rows: row r of every call is slot r's sequence, its KV kept between calls."""

    # Whether a decode call must cover every occupied row (else any first rows, the later ones untouched).
    decodes_all_rows: bool
    # Whether prompt chunks of one length in adjacent slots may run as one call, each row at its own past.
    prefills_rows: bool
    shape: DecoderShape
    max_slots: int
    providers: list[str]  # onnxruntime's, in the order the session uses them
    arrays: ArrayModule  # where the running batch's KV lives

    def bytes_per_token(self) -> int:
        """KV bytes one token takes in the running batch (every layer, key and value)."""
        ...

    def decode(self, input_ids: np.ndarray, seqlens_k: np.ndarray,
               extra_outputs: tuple[str, ...] = ()) -> tuple[np.ndarray, dict]:
        """One token for each of slots [0, rows); seqlens_k[r] is the row's length before it. Returns the
        logits [rows, 1, vocab] (reused by the next call) and the extra outputs by name."""
        ...

    def prefill(self, slot: int, input_ids: np.ndarray, past_len: int | np.ndarray,
                extra_outputs: tuple[str, ...] = (), all_logits: bool = False) -> tuple[np.ndarray, dict]:
        """A chunk on slots [slot, slot + rows) whose first `past_len` tokens (one per row, or one for all) are
        computed; several rows only where `prefills_rows`. Logits of the last position, or of every one with
        `all_logits` (a decoder that cannot leave them out gives every one: read the last)."""
        ...

    def read(self, slot: int, start: int, end: int) -> np.ndarray:
        """KV of positions [start, end) as [layers, 2, kv_heads, end - start, head_dim], on the host."""
        ...

    def write(self, slot: int, start: int, kv: np.ndarray) -> None:
        """Host KV (as `read` gives it) into positions [start, ...) of a slot."""
        ...

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy a row's first `length` positions into another slot (a sequence changes rows)."""
        ...


@runtime_checkable
class KvBuffers(Protocol):
    """Per-layer KV buffers with a row per slot, readable in place: the shared-KV proposer's view of its target
    (the GroupQueryAttention decoder has them; the concat decoder's batched past moves as rows join and leave)."""

    keys: list
    values: list
    kv_dtype: type
    arrays: ArrayModule
