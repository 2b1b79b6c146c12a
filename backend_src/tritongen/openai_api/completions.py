"""POST /v1/completions: raw prompt(s) in, continuations out.

Several prompts and `n` > 1 all run as parallel generator requests; choice
index = prompt index * n + sample index, as in OpenAI's API.
"""

from __future__ import annotations

import time
import uuid
from typing import AsyncGenerator

from fastapi import Request
from fastapi.responses import JSONResponse

from .choice import Choice, usage
from .disconnect import unless_disconnected
from .errors import invalid
from .fan_in import fan_in
from .generator_client import GeneratorClient
from .generator_inputs import completion_inputs
from .logprobs import completion_logprobs
from .schemas import CompletionRequest
from .sse import event_stream


def _by_prompt(req: CompletionRequest, choices: list[Choice]) -> list[list[Choice]]:
    return [choices[i:i + req.n] for i in range(0, len(choices), req.n)]


async def _complete(req: CompletionRequest, streams, base: dict) -> dict:
    choices = [Choice() for _ in streams]
    async for index, piece in fan_in(streams):
        choices[index].add(piece)
    return {**base, "choices": [
        {"index": i, "text": c.text, "finish_reason": c.finish_reason,
         "logprobs": completion_logprobs(c.logprobs) if req.logprobs is not None else None}
        for i, c in enumerate(choices)], "usage": usage(choices, _by_prompt(req, choices))}


async def _chunks(req: CompletionRequest, streams, base: dict) -> AsyncGenerator[dict, None]:
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    extra = {"usage": None} if include_usage else {}
    choices = [Choice() for _ in streams]
    async for index, piece in fan_in(streams):
        offset = len(choices[index].text)
        choices[index].add(piece)
        yield {**base, **extra, "choices": [{
            "index": index, "text": piece.text, "finish_reason": choices[index].finish_reason,
            "logprobs": completion_logprobs(piece.logprobs, offset) if req.logprobs is not None else None}]}
    if include_usage:
        yield {**base, "choices": [], "usage": usage(choices, _by_prompt(req, choices))}


async def completions(req: CompletionRequest, client: GeneratorClient, request: Request, max_generations: int):
    total = len(req.prompt_list()) * req.n
    if total > max_generations:
        raise invalid(f"{len(req.prompt_list())} prompts x n={req.n} asks for {total} generations, over the limit "
                      f"of {max_generations}", "n")
    request_id = f"cmpl-{uuid.uuid4().hex}"
    base = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": req.model,
            "system_fingerprint": None}
    inputs = [choice for per_prompt in completion_inputs(req) for choice in per_prompt]
    streams = [client.stream(choice, f"{request_id}-{i}") for i, choice in enumerate(inputs)]
    if req.stream:
        return await event_stream(_chunks(req, streams, base))
    return JSONResponse(await unless_disconnected(request, _complete(req, streams, base)))
