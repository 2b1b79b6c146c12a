"""The decoder over GroupQueryAttention graphs; the running batch's KV in one buffer per layer, a row (slot)
per sequence.

The GroupQueryAttention decoder reads and writes KV in place when the same
buffer is bound as its past and its present, so a decode step over slots
[0, B) copies no KV at all: it binds views of the first B rows. A prompt
chunk runs as a batch-1 call on a view of its own row. Active sequences
occupy rows [0, B) contiguously; when one leaves, the last row moves into
its place. The rows' lengths go in as our builder's `seqlens_k` and
`total_sequence_length`, or as onnxruntime-genai's right-padded
`attention_mask` (row sums are the lengths, its width the longest); the KV
buffers take the graph's dtype (float16 graphs keep float16 KV). They live on
the device onnxruntime runs on (array_module.py) and are bound by pointer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from .array_module import array_module
from .decoder_base import DecoderBase
from .decoder_runner import open_graph, stack_kv


class GqaDecoder(DecoderBase):
    # A decode call may cover any first rows: the rows after them are not touched.
    decodes_all_rows = False
    # Prompt chunks of one length in adjacent slots may run as one call, each row at its own past length.
    prefills_rows = True

    def __init__(self, model_path: Path, max_slots: int, max_len: int, intra_op_threads: int = 0,
                 providers: list[str] | None = None, pin_threads: bool = False, head_dim: int | None = None,
                 vocab_size: int | None = None, allow_host_kv: bool = False):
        session, sig = open_graph(model_path, intra_op_threads, providers, pin_threads, head_dim, vocab_size)
        if sig.layout != "slots":
            raise ValueError(f"{model_path} is not a GroupQueryAttention decoder")
        super().__init__(session, sig, max_slots, max_len, array_module(session.get_providers(), allow_host_kv))
        # Models built here take num_logits_to_keep (0: every position); others always return every one.
        self.keeps_logits = "num_logits_to_keep" in sig.inputs
        self.mask_fed = "seqlens_k" not in sig.inputs  # onnxruntime-genai's graphs
        self.takes_positions = "position_ids" in sig.inputs
        dims = (max_slots, self.shape.num_kv_heads, max_len, self.shape.head_dim)
        self.keys = [self.arrays.zeros(dims, self.kv_dtype) for _ in range(self.shape.num_layers)]
        self.values = [self.arrays.zeros(dims, self.kv_dtype) for _ in range(self.shape.num_layers)]
        self._pointers: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._logits: np.ndarray = np.empty(0, self.logits_dtype)
        self._columns = np.arange(max_len, dtype=np.int64)

    def _kv_pointers(self, start: int, count: int) -> list[tuple[int, int]]:
        """Addresses of rows [start, start + count) of each layer's key and value buffers."""
        key = (start, count)
        if key not in self._pointers:
            rows = slice(start, start + count)
            self._pointers[key] = [(self.arrays.pointer(k[rows]), self.arrays.pointer(v[rows]))
                                   for k, v in zip(self.keys, self.values)]
        return self._pointers[key]

    def _logits_view(self, rows: int, seq: int) -> np.ndarray:
        size = rows * seq * self.shape.vocab_size
        if self._logits.size < size:
            self._logits = np.empty(size, self.logits_dtype)
        return self._logits[:size].reshape(rows, seq, self.shape.vocab_size)

    def run(self, first_slot: int, input_ids: np.ndarray, seqlens_k: np.ndarray,
            extra_outputs: tuple[str, ...] = (), last_logits_only: bool = False) -> tuple[np.ndarray, dict]:
        """One call on slots [first_slot, first_slot + rows); returns (logits view, extra outputs).

        seqlens_k[r] is the row's total length after this call minus one. The
        logits array is reused by the next call: copy what must outlive it.
        With `last_logits_only` (and a model that can), logits are [rows, 1, vocab].
        """
        rows, seq = input_ids.shape
        binding = self.session.io_binding()
        binding.bind_cpu_input("input_ids", np.ascontiguousarray(input_ids, dtype=np.int64))
        total = int(seqlens_k.max()) + 1
        if self.mask_fed:  # right-padded: row r attends to its first seqlens_k[r] + 1 positions
            binding.bind_cpu_input("attention_mask", (self._columns[:total] <= seqlens_k[:, None]).astype(np.int64))
        else:
            binding.bind_cpu_input("seqlens_k", np.ascontiguousarray(seqlens_k, dtype=np.int32))
            binding.bind_cpu_input("total_sequence_length", np.array([total], dtype=np.int32))
        if self.takes_positions:
            positions = seqlens_k.astype(np.int64)[:, None] - (seq - 1) + self._columns[:seq]
            binding.bind_cpu_input("position_ids", np.ascontiguousarray(positions))
        if self.keeps_logits:
            keep = 1 if last_logits_only else 0
            binding.bind_cpu_input("num_logits_to_keep", np.array([keep], dtype=np.int64))
            seq = keep or seq
        device, dtype = (self.arrays.device, self.arrays.device_id), self.kv_dtype
        shape = (rows, self.shape.num_kv_heads, self.max_len, self.shape.head_dim)
        for i, (k, v) in enumerate(self._kv_pointers(first_slot, rows)):
            binding.bind_input(f"past_key_values.{i}.key", *device, dtype, shape, k)
            binding.bind_input(f"past_key_values.{i}.value", *device, dtype, shape, v)
            binding.bind_output(f"present.{i}.key", *device, dtype, shape, k)
            binding.bind_output(f"present.{i}.value", *device, dtype, shape, v)
        logits = self._logits_view(rows, seq)
        binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
        for name in extra_outputs:
            binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        if not extra_outputs:
            return logits, {}
        values = binding.get_outputs()[-len(extra_outputs):]  # the extras only: never copy the KV
        return logits, {name: v.numpy() for name, v in zip(extra_outputs, values)}

    def decode(self, input_ids: np.ndarray, seqlens_k: np.ndarray,
               extra_outputs: tuple[str, ...] = ()) -> tuple[np.ndarray, dict]:
        """One token for each of slots [0, rows); seqlens_k[r] is the row's length before it."""
        return self.run(0, input_ids, seqlens_k, extra_outputs)

    def prefill(self, slot: int, input_ids: np.ndarray, past_len: int | np.ndarray,
                extra_outputs: tuple[str, ...] = (), all_logits: bool = False) -> tuple[np.ndarray, dict]:
        """A prompt chunk on slots [slot, slot + rows) whose first `past_len` tokens (one per row, or one for
        all) are already computed. Logits of the last position only, unless `all_logits` (verification) or
        the model cannot leave the others out."""
        rows, seq = input_ids.shape
        seqlens = np.broadcast_to(np.asarray(past_len, np.int32) + (seq - 1), (rows,))
        return self.run(slot, input_ids, seqlens, extra_outputs, last_logits_only=not all_logits)

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy a row's first `length` positions into another slot (a sequence changes rows)."""
        for buffers in (self.keys, self.values):
            for b in buffers:
                b[dst, :, :length] = b[src, :, :length]

    def read(self, slot: int, start: int, end: int) -> np.ndarray:
        """KV of positions [start, end) as [layers, 2, kv_heads, end - start, head_dim], on the host."""
        return self.arrays.to_host(stack_kv(list(zip(self.keys, self.values)), np.s_[slot, :, start:end],
                                            self.arrays.xp))

    def write(self, slot: int, start: int, kv: np.ndarray) -> None:
        """Host KV (as `read` gives it) into positions [start, ...) of a slot."""
        end = start + kv.shape[3]
        kv = self.arrays.from_host(kv)
        for layer, (k, v) in enumerate(zip(self.keys, self.values)):
            k[slot, :, start:end] = kv[layer, 0]
            v[slot, :, start:end] = kv[layer, 1]
