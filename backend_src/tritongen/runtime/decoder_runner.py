"""onnxruntime sessions over decoder graphs: opening one with its signature checked, and calls in the
past/present convention (the concat decoder's, and the tests' reference)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from .cpu_threads import session_options
from .decoder_signature import DecoderSignature, open_session, signature


def stack_kv(pairs, index, xp=np):
    """[layers, 2, ...] from per-layer (key, value) buffers indexed alike, in one copy (np.stack of the
    views costs 20x more for a page); `xp` is the buffers' array module (numpy, or cupy)."""
    first = pairs[0][0][index]
    out = xp.empty((len(pairs), 2, *first.shape), first.dtype)
    for layer, (k, v) in enumerate(pairs):
        out[layer, 0] = k[index]
        out[layer, 1] = v[index]
    return out


def default_providers() -> list[str]:
    """CUDA when this onnxruntime build has it (the NGC image with onnxruntime-gpu), else CPU."""
    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def open_graph(model_path: Path, intra_op_threads: int = 0, providers: list[str] | None = None,
               pin_threads: bool = False, head_dim: int | None = None,
               vocab_size: int | None = None) -> tuple[ort.InferenceSession, DecoderSignature]:
    """A decoder graph's session and what it takes and gives; ValueError naming the file if it cannot be served."""
    options = session_options(intra_op_threads, pin_threads)
    session = open_session(model_path, options, providers or default_providers())
    return session, signature(session, Path(model_path), head_dim, vocab_size)


class DecoderRunner:
    def __init__(self, model_path: Path, intra_op_threads: int = 0, providers: list[str] | None = None,
                 pin_threads: bool = False, head_dim: int | None = None, vocab_size: int | None = None):
        self.session, sig = open_graph(model_path, intra_op_threads, providers, pin_threads, head_dim, vocab_size)
        self.signature = sig
        self.shape, self.kv_dtype, self.inputs = sig.shape, sig.kv_dtype, sig.inputs
        self.num_layers = sig.shape.num_layers
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._present = [(f"present.{i}.key", f"present.{i}.value") for i in range(self.num_layers)]

    def empty_past(self, batch: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        s = self.shape
        z: np.ndarray = np.zeros((batch, s.num_kv_heads, 0, s.head_dim), dtype=self.kv_dtype)
        return [(z, z) for _ in range(s.num_layers)]

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray, position_ids: np.ndarray,
                past: list[tuple[np.ndarray, np.ndarray]],
                ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]], dict]:
        """Returns (logits [b,s,V], present KV per layer, the other outputs by name)."""
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        feeds = {k: v for k, v in feeds.items() if k in self.inputs}
        for i, (k, v) in enumerate(past):
            feeds[f"past_key_values.{i}.key"] = k
            feeds[f"past_key_values.{i}.value"] = v
        out = dict(zip(self.output_names, self.session.run(None, feeds)))
        present = [(out.pop(k), out.pop(v)) for k, v in self._present]
        return out.pop("logits"), present, out
