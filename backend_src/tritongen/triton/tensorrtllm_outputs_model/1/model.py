"""Triton loads this file; the step itself lives in the tritongen package."""

from tritongen.triton.tensorrtllm_steps import TensorrtllmOutputs as TritonPythonModel  # noqa: F401
