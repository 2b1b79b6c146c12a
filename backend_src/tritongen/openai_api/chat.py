"""POST /v1/chat/completions: a chat in, the generator's answer(s) out.

The messages go to the generator as its `messages` input, so the model's own
chat template renders them exactly as they are rendered for Triton clients.
"""

from __future__ import annotations

import time
import uuid
from typing import AsyncGenerator

from fastapi import Request
from fastapi.responses import JSONResponse

from . import tool_calls
from .choice import Choice, usage
from .disconnect import unless_disconnected
from .fan_in import fan_in
from .generator_client import GeneratorClient
from .generator_inputs import chat_inputs
from .logprobs import chat_logprobs
from .schemas import ChatCompletionRequest
from .sse import event_stream


def _calls_possible(req: ChatCompletionRequest) -> bool:
    return bool(req.tools) and req.tool_choice != "none"


def _message(req: ChatCompletionRequest, choice: Choice) -> tuple[dict, str | None]:
    """The assistant message and finish reason of a finished choice: tool calls when the answer made them (the
    complete ones; cut short by max_tokens, it still ends with `length`)."""
    calls = tool_calls.parse(choice.text) if _calls_possible(req) else None
    if calls is None:
        return {"role": "assistant", "content": choice.text}, choice.finish_reason
    return {"role": "assistant", "content": None, "tool_calls": calls}, (
        "length" if choice.finish_reason == "length" else "tool_calls")


async def _complete(req: ChatCompletionRequest, streams, base: dict) -> dict:
    choices = [Choice() for _ in range(req.n)]
    async for index, piece in fan_in(streams):
        choices[index].add(piece)
    out = []
    for i, c in enumerate(choices):
        message, finish = _message(req, c)
        out.append({"index": i, "message": message, "logprobs": chat_logprobs(c.logprobs) if req.logprobs else None,
                    "finish_reason": finish})
    return {**base, "object": "chat.completion", "choices": out, "usage": usage(choices)}


async def _chunks(req: ChatCompletionRequest, streams, base: dict) -> AsyncGenerator[dict, None]:
    """Text streams as it comes. An answer that opens a tool call is held until it is complete, then sent as one
    delta with its tool_calls (each call whole, its arguments valid JSON)."""
    base = {**base, "object": "chat.completion.chunk"}
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    extra = {"usage": None} if include_usage else {}
    choices = [Choice() for _ in range(req.n)]
    started = [False] * req.n
    async for index, piece in fan_in(streams):
        choice = choices[index]
        choice.add(piece)
        holding = _calls_possible(req) and choice.text.lstrip().startswith(tool_calls.OPEN[: len(choice.text.lstrip())])
        if holding and choice.finish_reason is None:
            continue
        delta: dict[str, object] = {"content": piece.text}
        finish = choice.finish_reason
        if holding:
            message, finish = _message(req, choice)
            delta = ({"content": message["content"]} if message.get("content") is not None else
                     {"tool_calls": [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]})
        if not started[index]:
            delta = {"role": "assistant", **delta}
            started[index] = True
        yield {**base, **extra, "choices": [{
            "index": index, "delta": delta,
            "logprobs": chat_logprobs(piece.logprobs) if req.logprobs else None, "finish_reason": finish}]}
    if include_usage:
        yield {**base, "choices": [], "usage": usage(choices)}


async def chat_completions(req: ChatCompletionRequest, client: GeneratorClient, request: Request):
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    base = {"id": request_id, "created": int(time.time()), "model": req.model, "system_fingerprint": None}
    streams = [client.stream(inputs, f"{request_id}-{i}") for i, inputs in enumerate(chat_inputs(req))]
    if req.stream:
        return await event_stream(_chunks(req, streams, base))
    return JSONResponse(await unless_disconnected(request, _complete(req, streams, base)))
