"""The decoder over concat past/present graphs (models exported elsewhere): the fallback layout.

The running batch's KV is the batched past itself, left-padded to a common
length T: row r holds its tokens in columns [T - len_r, T) and the
attention mask marks them. A decode step feeds the batch's past and keeps
the present the model returns as the next past, so nothing is re-stacked
while the batch is stable; rows are re-stacked only when a sequence joins,
leaves, or writes a prompt chunk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .array_module import HOST
from .decoder_base import DecoderBase
from .decoder_runner import DecoderRunner, stack_kv


class ConcatDecoder(DecoderBase):
    # A decode call re-lays the batch as exactly its rows: it must cover every sequence's row.
    decodes_all_rows = True
    # A prompt chunk re-lays one row: chunks run one call each.
    prefills_rows = False

    def __init__(self, model_path: Path, max_slots: int, max_len: int, intra_op_threads: int = 0,
                 providers: list[str] | None = None, pin_threads: bool = False, head_dim: int | None = None,
                 vocab_size: int | None = None):
        self.runner = DecoderRunner(model_path, intra_op_threads, providers, pin_threads, head_dim, vocab_size)
        # The batched past is fed as numpy arrays: host memory whatever the provider (the fallback layout).
        super().__init__(self.runner.session, self.runner.signature, max_slots, max_len, HOST)
        s = self.shape
        empty: np.ndarray = np.zeros((0, s.num_kv_heads, 0, s.head_dim), self.kv_dtype)
        self.past: list[list[np.ndarray]] = [[empty, empty] for _ in range(s.num_layers)]
        self.lengths: list[int] = []  # valid tokens per row

    @property
    def width(self) -> int:
        return self.past[0][0].shape[2]

    def _restack(self, rows: int, lengths: list[int]) -> None:
        """Re-lay the batch as `rows` rows, row r keeping its first lengths[r] valid tokens."""
        s = self.shape
        width = max(lengths, default=0)
        old_width = self.width
        for pair in self.past:
            for j, old in enumerate(pair):
                new: np.ndarray = np.zeros((rows, s.num_kv_heads, width, s.head_dim), self.kv_dtype)
                for r in range(min(rows, old.shape[0])):
                    n = lengths[r]
                    if n:
                        new[r, :, width - n:] = old[r, :, old_width - self.lengths[r]:old_width - self.lengths[r] + n]
                pair[j] = new
        self.lengths = list(lengths)

    def _fit(self, rows: int, lengths: list[int]) -> None:
        """Make the batch exactly `rows` rows with these valid lengths, re-stacking only if it must."""
        current = self.lengths[:rows] + [0] * max(0, rows - len(self.lengths))
        if rows == len(self.lengths) and current == lengths:
            return
        if rows <= len(self.lengths) and current == lengths and max(lengths, default=0) == self.width:
            for pair in self.past:  # rows left from the end: a view, no copy
                pair[0], pair[1] = pair[0][:rows], pair[1][:rows]
            self.lengths = self.lengths[:rows]
            return
        self._restack(rows, [min(a, b) for a, b in zip(current, lengths)])
        if self.lengths != lengths:
            raise RuntimeError("concat slots lost track of a row's length")

    def decode(self, input_ids: np.ndarray, seqlens_k: np.ndarray,
               extra_outputs: tuple[str, ...] = ()) -> tuple[np.ndarray, dict]:
        """One token for each of slots [0, rows); seqlens_k[r] is the row's length before it."""
        rows = input_ids.shape[0]
        past_lengths = [int(k) for k in seqlens_k]
        self._fit(rows, past_lengths)
        width = self.width
        mask = np.zeros((rows, width + 1), np.int64)
        for r, n in enumerate(past_lengths):
            mask[r, width - n:] = 1
        positions = np.array(past_lengths, np.int64)[:, None]
        logits, present, extras = self.runner.forward(input_ids, mask, positions, [(k, v) for k, v in self.past])
        self.past = [list(p) for p in present]
        self.lengths = [n + 1 for n in past_lengths]
        return logits, {k: extras[k] for k in extra_outputs}

    def prefill(self, slot: int, input_ids: np.ndarray, past_len: int | np.ndarray,
                extra_outputs: tuple[str, ...] = (), all_logits: bool = False) -> tuple[np.ndarray, dict]:
        """A prompt chunk on one slot whose first `past_len` tokens are already computed; logits of every
        position whatever `all_logits` says (the concat layout has no way to leave some out)."""
        past_len = int(np.asarray(past_len).item())  # one row: its past length, as an int or a one-row array
        rows = max(len(self.lengths), slot + 1)
        lengths = self.lengths + [0] * (rows - len(self.lengths))
        lengths[slot] = min(lengths[slot], past_len)
        self._fit(rows, lengths)
        width, seq = self.width, input_ids.shape[1]
        row_past = [(k[slot:slot + 1, :, width - past_len:], v[slot:slot + 1, :, width - past_len:])
                    for k, v in self.past]
        logits, present, extras = self.runner.forward(
            input_ids, np.ones((1, past_len + seq), np.int64), np.arange(past_len, past_len + seq)[None], row_past)
        self._place(slot, present)
        return logits, {k: extras[k] for k in extra_outputs}

    def _place(self, slot: int, present) -> None:
        """Put one row's full KV (as the model returned it) into the batch."""
        n = present[0][0].shape[2]
        if n > self.width:
            pad = n - self.width
            for pair in self.past:
                for j in range(2):
                    pair[j] = np.pad(pair[j], ((0, 0), (0, 0), (pad, 0), (0, 0)))
        width = self.width
        for pair, (k, v) in zip(self.past, present):
            pair[0][slot, :, width - n:] = k[0]
            pair[1][slot, :, width - n:] = v[0]
        self.lengths[slot] = n

    def move(self, src: int, dst: int, length: int) -> None:
        width = self.width
        for pair in self.past:
            for b in pair:
                b[dst, :, width - length:] = b[src, :, width - self.lengths[src]:width - self.lengths[src] + length]
        self.lengths[dst] = length

    def read(self, slot: int, start: int, end: int) -> np.ndarray:
        base = self.width - self.lengths[slot]
        return stack_kv(self.past, np.s_[slot, :, base + start:base + end])

    def write(self, slot: int, start: int, kv: np.ndarray) -> None:
        """Used at admission: the row holds exactly positions [0, start) before this write."""
        rows = max(len(self.lengths), slot + 1)
        lengths = self.lengths + [0] * (rows - len(self.lengths))
        lengths[slot] = min(lengths[slot], start)
        self._fit(rows, lengths)
        head = [(k[slot:slot + 1, :, self.width - start:], v[slot:slot + 1, :, self.width - start:])
                for k, v in self.past]
        present = [(np.concatenate([hk, kv[i, 0][None]], axis=2), np.concatenate([hv, kv[i, 1][None]], axis=2))
                   for i, (hk, hv) in enumerate(head)]
        self._place(slot, present)
