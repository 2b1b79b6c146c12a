"""An OpenAI-compatible HTTP front end for the Triton `generator` model.

Why a separate service: Triton's own OpenAI frontend needs a server build we
cannot run here, and clients expect `/v1/chat/completions`. This package only
translates: OpenAI JSON in, generator tensors over Triton gRPC streaming out,
and the generator's responses back into OpenAI's shapes. It holds no model.

Run it as ``python -m tritongen.openai_api --triton-url localhost:8001``.
"""

from .app import create_app

__all__ = ["create_app"]
