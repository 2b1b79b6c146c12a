"""Triton loads this file; the generator itself lives in the tritongen package."""

from tritongen.triton_model import TritonPythonModel  # noqa: F401
