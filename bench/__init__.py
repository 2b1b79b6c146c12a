"""Benchmarks of tritongen beside the raw onnxruntime loop and its peers: run as `python -m bench.<name>`."""
