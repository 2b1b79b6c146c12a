"""An OpenAI request -> the generator's input tensors, one dict per choice.

Why one dict per choice: `n` > 1 runs as n independent generator requests
(batched together by the generator), each with its own seed so the samples
differ; with a `seed`, choice i uses seed + i, so the whole response is
reproducible and choice 0 equals the same request with n = 1.

Defaults follow OpenAI where the generator's differ: temperature 1.0 and
top_p 1.0 when absent (the generator alone would decode greedily). An absent
max_tokens leaves the generator's configured default_max_tokens in force.
"""

from __future__ import annotations

import json
from typing import Any

from ..json_depth import MAX_JSON_DEPTH, deeper_than, too_deep
from . import tool_calls
from .errors import invalid
from .schemas import (
    VLLM_EXTRAS,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    NamedToolChoice,
    ResponseFormat,
    SamplingRequest,
)


def _guided_decoding(fmt: ResponseFormat | None) -> dict | None:
    """response_format -> the generator's sampling_parameters.guided_decoding."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"json_object": True}
    if fmt.json_schema is None:
        raise invalid("response_format json_schema needs a json_schema object", "response_format")
    if fmt.json_schema.schema_ is None:
        return {"json_object": True}
    return {"json": fmt.json_schema.schema_}


def _sampling(req: SamplingRequest, max_tokens: int | None, top_logprobs: int | None) -> dict[str, Any]:
    inputs: dict[str, Any] = {
        "stream": req.stream,
        "exclude_input_in_output": True,
        "max_tokens": max_tokens,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "top_p": req.top_p,
        "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty,
        **{row.name: getattr(req, row.vllm) for row in VLLM_EXTRAS},
    }
    if req.stop:
        inputs["stop_words"] = [req.stop] if isinstance(req.stop, str) else list(req.stop)
    if top_logprobs is not None:
        inputs["return_log_probs"] = True
        inputs["top_logprobs"] = top_logprobs
    extra: dict[str, object] = {}
    guided = _guided_decoding(req.response_format)
    if guided is not None:
        extra["guided_decoding"] = guided
    if req.stop_token_ids:
        extra["stop_token_ids"] = req.stop_token_ids
    if req.logit_bias:
        extra["logit_bias"] = req.logit_bias
    if extra:
        inputs["sampling_parameters"] = json.dumps(extra)
    return inputs


def _per_choice(inputs: dict[str, Any], req: SamplingRequest) -> list[dict[str, Any]]:
    seeds = [None] * req.n if req.seed is None else [(req.seed + i) % 2**64 for i in range(req.n)]
    return [{**inputs, "seed": seed} for seed in seeds]


def _message_text(message: ChatMessage, index: int) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    texts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise invalid(f"messages[{index}] has a {part.type!r} content part; only text is supported",
                          f"messages[{index}].content")
        texts.append(part.text)
    return "".join(texts)


def _message(message: ChatMessage, index: int) -> dict[str, Any]:
    """A chat message as chat templates read it (transformers' shape): tool calls with arguments as objects."""
    out: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role,
                           "content": _message_text(message, index)}
    if message.tool_calls:
        calls = []
        for call in message.tool_calls:
            field = f"messages[{index}].tool_calls"
            if deeper_than(call.function.arguments, MAX_JSON_DEPTH) is not None:
                raise invalid(str(too_deep(field, MAX_JSON_DEPTH)), field)
            try:
                arguments = json.loads(call.function.arguments)
            except ValueError:
                raise invalid(f"{field}: arguments are not JSON", field) from None
            calls.append({"id": call.id, "type": "function",
                          "function": {"name": call.function.name, "arguments": arguments}})
        out["tool_calls"] = calls
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


def chat_inputs(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The chat goes to the generator's `messages` input, so its chat template renders it; tools go to its
    `tools` input, and a tool choice becomes the grammar the answer is decoded under."""
    messages = [_message(m, i) for i, m in enumerate(req.messages)]
    top_logprobs = (req.top_logprobs or 0) if req.logprobs else None
    inputs = _sampling(req, req.max_completion_tokens or req.max_tokens, top_logprobs)
    inputs["messages"] = json.dumps(messages)
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
    if tools and req.tool_choice != "none":
        inputs["tools"] = json.dumps(tools)
    choice: dict[str, Any] | str  # a named function, or "none", "auto" or "required"
    if isinstance(req.tool_choice, NamedToolChoice):
        choice = req.tool_choice.model_dump()
    else:
        choice = req.tool_choice or "auto"
    call_grammar = tool_calls.grammar(tools, choice, req.parallel_tool_calls)
    if call_grammar is not None:
        if req.response_format is not None and req.response_format.type != "text":
            raise invalid("response_format cannot be combined with tools", "response_format")
        extra = json.loads(inputs.get("sampling_parameters", "{}"))
        extra["guided_decoding"] = {"grammar": call_grammar}
        inputs["sampling_parameters"] = json.dumps(extra)
    return _per_choice(inputs, req)


def completion_inputs(req: CompletionRequest) -> list[list[dict[str, Any]]]:
    """Per prompt, per choice: text prompts go to `text_input`, token lists to `input_ids`."""
    base = _sampling(req, req.max_tokens, req.logprobs)
    out = []
    for prompt in req.prompt_list():
        key = "text_input" if isinstance(prompt, str) else "input_ids"
        out.append(_per_choice({**base, key: prompt}, req))
    return out
