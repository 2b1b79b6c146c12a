"""One-off probes of the 16-stream gap through Triton: run as `python -m bench.investigations.<name>`."""
