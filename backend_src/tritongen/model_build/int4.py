"""An int4 copy of a decoder: every MatMul's weight as MatMulNBits blocks, with onnxruntime's own quantizer.

The tied LM head (a Gemm over the embedding) can be quantized too: it becomes
a MatMul over a transposed copy of the embedding, which the quantizer then
packs; the embedding itself stays fp32 for the token lookup. On SmolLM2 the
LM head is a fifth of the weights, so quantizing it is most of the int4 gain
at one stream (bench/int4_variants.py measures each choice).
"""

from __future__ import annotations

import logging

import onnx
from onnx import helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer


def untie_lm_head(model: onnx.ModelProto) -> None:
    """Gemm(x, embedding, transB=1) -> MatMul(x, embedding^T), over its own copy of the weight."""
    graph = model.graph
    gemm = next(n for n in graph.node if n.op_type == "Gemm")
    weight = next(i for i in graph.initializer if i.name == gemm.input[1])
    graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(weight).T.copy(), "lm_head.weight"))
    index = list(graph.node).index(gemm)
    graph.node.remove(gemm)
    graph.node.insert(index, helper.make_node("MatMul", [gemm.input[0], "lm_head.weight"], list(gemm.output),
                                              name="lm_head.MatMul"))


def quantize_int4(model: onnx.ModelProto, block_size: int = 32, accuracy_level: int = 4,
                  quantize_lm_head: bool = True, symmetric: bool = True) -> onnx.ModelProto:
    if quantize_lm_head:
        untie_lm_head(model)
    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=symmetric, accuracy_level=accuracy_level)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)  # a line per node
    quantizer = MatMulNBitsQuantizer(model, block_size=block_size, is_symmetric=symmetric,
                                     accuracy_level=accuracy_level, algo_config=config)
    quantizer.process()
    return quantizer.model.model
