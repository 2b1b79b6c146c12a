"""The slot decoder a model folder needs, chosen by its graph's attention."""

from __future__ import annotations

from .concat_decoder import ConcatDecoder
from .decoder import Decoder
from .decoder_signature import uses_group_query_attention
from .gqa_decoder import GqaDecoder
from .model_folder import ModelFiles


def open_slot_decoder(files: ModelFiles, max_slots: int, max_len: int, threads: int, providers, pin_threads: bool,
                      vocab_size: int | None = None, allow_host_kv: bool = False) -> Decoder:
    """The GroupQueryAttention decoder when the graph's attention is GroupQueryAttention; the concat past/present
    one otherwise (its KV is host memory on every provider, so `allow_host_kv` concerns the first only)."""
    if not uses_group_query_attention(files.onnx_file):
        return ConcatDecoder(files.onnx_file, max_slots, max_len, threads, providers, pin_threads, files.head_dim,
                             vocab_size)
    return GqaDecoder(files.onnx_file, max_slots, max_len, threads, providers, pin_threads, files.head_dim,
                      vocab_size, allow_host_kv)
