"""The generator's errors, one type per kind of failure, each with the codes its clients see.

Why a code token: over gRPC streaming a model's error reaches the client as its message alone, without a status,
so every error the generator sends starts with `[tritongen:<code>] ` (`wire`), and the front ends (the OpenAI API,
the Dynamo worker) read the type back from that token (`from_wire`), never from the words of the message.
"""

from __future__ import annotations

import re
from typing import ClassVar


class TritongenError(Exception):
    """A request the generator did not serve. `http_status` is what the front ends answer it with; `triton_code`
    the `pb_utils.TritonError` code the generator sends it with."""

    code: ClassVar[str]
    http_status: ClassVar[int]
    triton_code: ClassVar[str]

    def wire(self) -> str:
        """The message as the generator sends it: the code token, then the text."""
        return f"[tritongen:{self.code}] {self}"


class InvalidOption(TritongenError, ValueError):
    """The request's fault, naming the field (GenerateOptions' name, or "prompt" or "constraint"), so that a
    front end can name it as its clients spell it. Its message goes to the client as it is."""

    code = "invalid"
    http_status = 400
    triton_code = "INVALID_ARG"

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class EngineOverloaded(TritongenError):
    """More requests wait for admission than max_queue_len allows; the client should retry shortly."""

    code = "overloaded"
    http_status = 429
    triton_code = "UNAVAILABLE"


class EngineStopped(TritongenError):
    """The engine, or the model around it, is not serving: its thread died, or it is closing or unloading."""

    code = "stopped"
    http_status = 503
    triton_code = "UNAVAILABLE"


class SessionBusy(TritongenError):
    """The request's session already has a request in flight: the client's doing, and fine once that one ends
    (409: the request conflicts with the session's state, it is not malformed)."""

    code = "session_busy"
    http_status = 409
    triton_code = "ALREADY_EXISTS"


class RequestFailed(TritongenError):
    """Generation failed on the server's side: a model call, a proposer or a constraint that raised. The message
    says what failed, for the server log; the client is told no more than that it failed (`wire`)."""

    code = "failed"
    http_status = 500
    triton_code = "INTERNAL"
    CLIENT_MESSAGE: ClassVar[str] = "generation failed; the server log has the details"

    def wire(self) -> str:
        return f"[tritongen:{self.code}] {self.CLIENT_MESSAGE}"


KINDS: dict[str, type[TritongenError]] = {
    kind.code: kind for kind in (InvalidOption, EngineOverloaded, EngineStopped, SessionBusy, RequestFailed)}
_TOKEN = re.compile(r"\[tritongen:([a-z_]+)\] ")


def from_wire(message: str) -> tuple[type[TritongenError], str] | None:
    """The kind of error a generator message carries, and its text; None for a message without the token (Triton's
    own, such as the generator not being loaded). Read at the start only: the text may quote the client."""
    match = _TOKEN.match(message)
    if match is None or match[1] not in KINDS:
        return None
    return KINDS[match[1]], message[match.end():]
