"""An fp16 copy of a decoder for GPUs, inputs and outputs included (KV and logits in fp16), with onnxruntime's own
float16 converter: the CUDA provider runs GroupQueryAttention in fp16 (in fp32 it falls back to the CPU)."""

from __future__ import annotations

import onnx
from onnxruntime.transformers.onnx_model import OnnxModel


def convert_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    converted = OnnxModel(model)
    converted.convert_float_to_float16(keep_io_types=False, use_symbolic_shape_infer=True)
    return converted.model
