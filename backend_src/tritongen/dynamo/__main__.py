"""`python -m tritongen.dynamo`: one Dynamo worker in front of one Triton server (run it in .venv-dynamo)."""

from dynamo.common.backend.run import run

from .engine import TritongenEngine

if __name__ == "__main__":
    run(TritongenEngine)
