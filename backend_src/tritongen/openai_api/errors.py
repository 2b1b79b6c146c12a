"""OpenAI's error body and the HTTP status each failure gets.

Why here: every failure — our own validation, a generator error, Triton being
unreachable — must reach the client as {"error": {message, type, param, code}}
with a status the official clients turn into the right exception class.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from ..errors import EngineOverloaded, EngineStopped, InvalidOption, SessionBusy, TritongenError

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          409: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
          503: "server_error"}

RETRY_AFTER_SECONDS = 1


class OpenAIError(Exception):
    """An error to send in OpenAI's shape; raised anywhere in a request's handling.

    `detail` is for the server's log only: 5xx bodies never carry exception texts or addresses.
    """

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None, detail: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers
        self.detail = detail

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param)


def unavailable(detail: str) -> OpenAIError:
    return OpenAIError(503, "the generator is unavailable; retry later", code="unavailable",
                       headers={"Retry-After": str(RETRY_AFTER_SECONDS)}, detail=detail)


def from_generator(kind: type[TritongenError], text: str, detail: str) -> OpenAIError:
    """A generator error of `kind` (errors.from_wire) -> its status: the request's own faults with the generator's
    text, the others with ours (`detail`, the whole message, is for the log)."""
    if kind is InvalidOption:
        return OpenAIError(400, text)
    if kind is SessionBusy:
        return OpenAIError(409, text, code="session_busy")
    if kind is EngineOverloaded:
        return OpenAIError(429, "the generator is overloaded; retry later", code="overloaded",
                           headers={"Retry-After": str(RETRY_AFTER_SECONDS)}, detail=detail)
    if kind is EngineStopped:
        return unavailable(detail)
    return OpenAIError(500, "the generator failed to complete the request", detail=detail)
