"""tritongen: LLM text generation over ONNX decoders, served by Triton.

The engine is plain Python + numpy + onnxruntime and imports nothing from
Triton; `tritongen.triton.model` is the only module that does.
"""

__version__ = "0.1.0"
