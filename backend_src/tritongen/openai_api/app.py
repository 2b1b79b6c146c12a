"""The FastAPI application: routes, the shared Triton client, and error handlers.

Why the handlers: FastAPI's defaults answer 422 with its own body; OpenAI
clients expect 400 (404, 500) with {"error": {...}}, and map those statuses to
their exception classes (BadRequestError, NotFoundError, InternalServerError).
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from .body_depth import DepthBoundedRoute
from .chat import chat_completions
from .completions import completions
from .disconnect import ClientDisconnected
from .errors import OpenAIError
from .generator_client import GeneratorClient
from .guard import Guard
from .model_list import check_model, model_card, model_list
from .schemas import ChatCompletionRequest, CompletionRequest

log = logging.getLogger("tritongen.openai_api")
DEFAULT_MAX_BODY_BYTES = 4 << 20  # the generator takes prompts up to 1 MiB; JSON escaping and n prompts add to it
DEFAULT_MAX_GENERATIONS = 64  # prompts x n of one request, each a generator request


def _param(loc: tuple) -> str | None:
    """FastAPI's error location ("body", "messages", 0, "role") -> OpenAI's param ("messages[0].role")."""
    parts = [p for p in loc if p != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or None


def create_app(triton_url: str = "localhost:8001", model: str = "generator", api_key: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_generations: int = DEFAULT_MAX_GENERATIONS) -> FastAPI:
    """An app whose Triton client is opened in the serving event loop (grpc.aio binds to its loop).

    With `api_key`, every /v1 route needs `Authorization: Bearer <key>`. A body over `max_body_bytes` is
    refused as it arrives (413), one nested too deep before it is parsed (400); a completion asking for more
    than `max_generations` generator requests (prompts x n) is refused before any starts.
    """
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.client = GeneratorClient(triton_url, model)
        try:
            yield
        finally:
            await app.state.client.close()

    app = FastAPI(title="tritongen OpenAI-compatible API", lifespan=lifespan)
    app.router.route_class = DepthBoundedRoute  # the routes below: each body's nesting bounded before parsing
    app.add_middleware(Guard, api_key=api_key, max_body_bytes=max_body_bytes)

    @app.exception_handler(OpenAIError)
    async def _openai_error(request: Request, exc: OpenAIError):
        if exc.detail is not None:
            log.log(logging.ERROR if exc.status >= 500 else logging.WARNING, "%s %s: %s %s", request.method,
                    request.url.path, exc.status, exc.detail)
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        # pydantic's error details: values of several types, by key.
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        if first.get("type") == "json_invalid":
            reason = first.get("ctx", {}).get("error", "")
            return OpenAIError(400, f"the request body is not valid JSON: {reason}").response()
        param = _param(tuple(first.get("loc", ())))
        text = first["msg"].removeprefix("Value error, ")
        message = f"{param}: {text}" if param else text
        return OpenAIError(400, message, param).response()

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        return OpenAIError(exc.status_code, str(exc.detail)).response()

    @app.exception_handler(ClientDisconnected)
    async def _gone(request: Request, exc: ClientDisconnected):
        return JSONResponse({}, status_code=499)  # nobody reads it; the generation was cancelled

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return OpenAIError(500, "internal error; the server log has the details").response()

    @app.get("/health")
    async def health():
        ready = await app.state.client.is_ready()
        return JSONResponse({"triton_model_ready": ready}, status_code=200 if ready else 503)

    @app.get("/v1/models")
    async def list_models():
        return model_list(model, created)

    @app.get("/v1/models/{name}")
    async def get_model(name: str):
        check_model(name, model)
        return model_card(model, created)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatCompletionRequest, request: Request):
        check_model(req.model, model)
        return await chat_completions(req, app.state.client, request)

    @app.post("/v1/completions")
    async def complete(req: CompletionRequest, request: Request):
        check_model(req.model, model)
        return await completions(req, app.state.client, request, max_generations)

    return app
