"""Builders for the ONNX decoders the generator serves (GGUF import, tiny test models)."""
