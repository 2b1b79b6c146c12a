"""Triton loads this file; the generator itself lives in the tritongen package."""

from tritongen.triton.model import TritonPythonModel  # noqa: F401
