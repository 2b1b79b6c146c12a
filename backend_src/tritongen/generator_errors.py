"""What a generator error message means to a front end: overloaded, unavailable, failed, or the request's fault.

Why markers: gRPC streaming carries no status code with the generator's errors, only the message. Its per-request
validation errors are the client's fault and go back as they are (they name the field, never a server detail);
these markers pick out the ones that are not. Every front end (the OpenAI API, the Dynamo worker) answers alike.
"""

from __future__ import annotations

from typing import Literal

OVERLOADED = ("overloaded:",)  # the generator's queue is full: retry shortly
UNAVAILABLE = (  # the engine or a response thread died, the model is not loaded, the stub is gone
    "engine is not running", "thread stopped", "unknown model", "is not ready", "stub process",
    "has no available versions",
)
FAILED = ("generation failed", "failed to process the request", "internal error")

Kind = Literal["overloaded", "unavailable", "failed", "invalid"]


def error_kind(message: str) -> Kind:
    lowered = message.lower()
    if any(marker in lowered for marker in OVERLOADED):
        return "overloaded"
    if any(marker in lowered for marker in UNAVAILABLE):
        return "unavailable"
    if any(marker in lowered for marker in FAILED):
        return "failed"
    return "invalid"
