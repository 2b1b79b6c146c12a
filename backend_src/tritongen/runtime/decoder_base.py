"""What both decoders keep from the graph they opened, set in one place so that they cannot drift apart."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from .array_module import ArrayModule
from .decoder_signature import DecoderSignature


class DecoderBase:
    def __init__(self, session: ort.InferenceSession, sig: DecoderSignature, max_slots: int, max_len: int,
                 arrays: ArrayModule):
        self.session = session
        self.shape, self.kv_dtype, self.logits_dtype = sig.shape, sig.kv_dtype, sig.logits_dtype
        self.max_slots, self.max_len = max_slots, max_len
        self.providers: list[str] = session.get_providers()
        self.arrays = arrays

    def bytes_per_token(self) -> int:
        s = self.shape
        return 2 * s.num_layers * s.num_kv_heads * s.head_dim * np.dtype(self.kv_dtype).itemsize
