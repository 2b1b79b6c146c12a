"""POST /v1/chat/completions: a chat in, the generator's answer(s) out.

The messages go to the generator as its `messages` input, so the model's own
chat template renders them exactly as they are rendered for Triton clients.
"""

from __future__ import annotations

import time
import uuid
from typing import AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse

from .choice import Choice, usage
from .disconnect import unless_disconnected
from .fan_in import fan_in
from .generator_client import GeneratorClient
from .generator_inputs import chat_inputs
from .logprobs import chat_logprobs
from .schemas import ChatCompletionRequest
from .sse import event_stream


async def _complete(req: ChatCompletionRequest, streams, base: dict) -> dict:
    choices = [Choice() for _ in range(req.n)]
    async for index, piece in fan_in(streams):
        choices[index].add(piece)
    return {**base, "object": "chat.completion", "choices": [
        {"index": i, "message": {"role": "assistant", "content": c.text},
         "logprobs": chat_logprobs(c.logprobs) if req.logprobs else None, "finish_reason": c.finish_reason}
        for i, c in enumerate(choices)], "usage": usage(choices)}


async def _chunks(req: ChatCompletionRequest, streams, base: dict) -> AsyncIterator[dict]:
    base = {**base, "object": "chat.completion.chunk"}
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    extra = {"usage": None} if include_usage else {}
    choices = [Choice() for _ in range(req.n)]
    started = [False] * req.n
    async for index, piece in fan_in(streams):
        choices[index].add(piece)
        delta = {"content": piece.text}
        if not started[index]:
            delta = {"role": "assistant", **delta}
            started[index] = True
        yield {**base, **extra, "choices": [{
            "index": index, "delta": delta,
            "logprobs": chat_logprobs(piece.logprobs) if req.logprobs else None,
            "finish_reason": choices[index].finish_reason}]}
    if include_usage:
        yield {**base, "choices": [], "usage": usage(choices)}


async def chat_completions(req: ChatCompletionRequest, client: GeneratorClient, request: Request):
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    base = {"id": request_id, "created": int(time.time()), "model": req.model, "system_fingerprint": None}
    streams = [client.stream(inputs, f"{request_id}-{i}") for i, inputs in enumerate(chat_inputs(req))]
    if req.stream:
        return await event_stream(_chunks(req, streams, base))
    return JSONResponse(await unless_disconnected(request, _complete(req, streams, base)))
