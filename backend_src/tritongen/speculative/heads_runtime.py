"""What the head proposers share: an onnxruntime session and the target's raw f32 weight files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from ..runtime.cpu_threads import session_options
from ..runtime.decoder_runner import default_providers


def open_head(path: Path, threads: int, providers, pin_threads: bool = False) -> ort.InferenceSession:
    """A head's thread pool does not spin when idle: spinning, it competes with the target's verification call
    for the same CPUs right after each proposal (measured on 2 cores: a verification then cost 2.1 plain decode
    steps instead of 1.2)."""
    options = session_options(threads, pin_threads)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=providers or default_providers())


def raw_matrix(path: Path, rows: int, cols: int) -> np.ndarray:
    """A little-endian f32 matrix file, memory-mapped (the embedding is ~100 MB for SmolLM2)."""
    data = np.memmap(path, dtype="<f4", mode="r")
    if data.size != rows * cols:
        raise ValueError(f"{path}: {data.size} floats, expected {rows} x {cols}")
    return data.reshape(rows, cols)


def empty_past(session: ort.InferenceSession) -> tuple[np.ndarray, np.ndarray]:
    shape = next(i for i in session.get_inputs() if i.name == "past_key_values.0.key").shape
    z = np.zeros((1, int(shape[1]), 0, int(shape[3])), np.float32)
    return z, z
