"""Triton loads this file; the step itself lives in the tritongen package."""

from tritongen.triton.tensorrtllm_steps import TensorrtllmInputs as TritonPythonModel  # noqa: F401
