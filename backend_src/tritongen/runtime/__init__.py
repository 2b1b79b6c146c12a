"""The decoders over ONNX graphs and their KV layouts, and what a model folder holds (graph, tokenizer,
chat template)."""
