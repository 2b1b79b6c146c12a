"""OpenAI's error body and the HTTP status each failure gets.

Why here: every failure — our own validation, a generator error, Triton being
unreachable — must reach the client as {"error": {message, type, param, code}}
with a status the official clients turn into the right exception class.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 500: "server_error", 503: "server_error"}

# The generator reports every error as a plain message (gRPC streaming carries
# no status code). Its per-request validation errors are the client's fault;
# these markers are the ones that are not: the engine died, a step failed,
# the python backend or Triton itself failed, or the model is not loaded.
_SERVER_FAULT_MARKERS = (
    "generation failed",
    "engine is not running",
    "failed to process the request",
    "stub process",
    "unknown model",
    "is not ready",
)


class OpenAIError(Exception):
    """An error to send in OpenAI's shape; raised anywhere in a request's handling."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def invalid(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param)


def from_generator(message: str) -> OpenAIError:
    """A generator error message -> 400 when the request was at fault, else 500."""
    lowered = message.lower()
    if any(marker in lowered for marker in _SERVER_FAULT_MARKERS):
        return OpenAIError(500, f"generator error: {message}")
    return OpenAIError(400, message)
