"""A Dynamo request (token ids, sampling options, stop conditions, output options) -> the generator's inputs.

Why this mapping: Dynamo's frontend has already rendered the chat and tokenized it, and it matches stop strings
itself while it detokenizes; the generator gets the token ids and what only the engine can do: sampling, the
stop token ids, the token limits, guided decoding, logprobs. Defaults follow OpenAI where the generator's
differ, as tritongen's own OpenAI API does: temperature 1.0 when absent; an absent max_tokens leaves the
generator's default_max_tokens in force. A value the generator cannot take is a ValueError naming the field.
"""

from __future__ import annotations

import json
from typing import Any

from ..json_depth import MAX_JSON_DEPTH, too_deep, value_deeper_than
from ..request_fields import FIELDS, INT32_MAX

# Dynamo's sampling options are vLLM's: one named as a request field's vLLM name goes to that field's input.
_BY_VLLM_NAME = {row.vllm: row.name for row in FIELDS if row.vllm and row.tensor}
# Guided decoding keys the generator's sampling_parameters.guided_decoding reads (vLLM's names).
_GUIDES = ("json", "regex", "choice", "grammar")
_GUIDE_DEPTH = MAX_JSON_DEPTH - 1  # it becomes sampling_parameters.guided_decoding, one level down


def generator_inputs(request: dict[str, Any]) -> dict[str, Any]:
    """The generator's inputs for one Dynamo request, streamed (one response per new token or group)."""
    sampling = request.get("sampling_options") or {}
    stop = request.get("stop_conditions") or {}
    output = request.get("output_options") or {}
    _refuse_unsupported(sampling, stop, output)
    temperature = sampling.get("temperature")
    inputs: dict[str, Any] = {
        "input_ids": [int(t) for t in request["token_ids"]],
        "stream": True,
        "temperature": 1.0 if temperature is None else float(temperature),
        "max_tokens": _int32("max_tokens", stop.get("max_tokens")),
        "min_length": _int32("min_tokens", stop.get("min_tokens")),
        "ignore_eos": stop.get("ignore_eos"),
        "seed": _seed(sampling.get("seed")),
    }
    for key, value in sampling.items():
        if key in _BY_VLLM_NAME and _BY_VLLM_NAME[key] not in inputs:  # temperature and seed are mapped above
            inputs[_BY_VLLM_NAME[key]] = value
    inputs["top_k"] = _int32("top_k", inputs.get("top_k"), low=-1)
    if output.get("logprobs") is not None:
        inputs["return_log_probs"] = True
        inputs["top_logprobs"] = _int32("logprobs", output["logprobs"], low=0)
    extra = _sampling_parameters(sampling, stop)
    if extra:
        inputs["sampling_parameters"] = json.dumps(extra)
    return {name: value for name, value in inputs.items() if value is not None}


def _sampling_parameters(sampling: dict[str, Any], stop: dict[str, Any]) -> dict[str, Any]:
    """stop token ids (EOS that Dynamo hides, visible stops, the client's) and guided decoding, as vLLM names them."""
    extra: dict[str, Any] = {}
    stop_ids: list[int] = []
    for key in ("stop_token_ids_hidden", "stop_token_ids_visible", "stop_token_ids"):
        stop_ids += [int(t) for t in stop.get(key) or [] if int(t) not in stop_ids]
    if stop_ids:
        extra["stop_token_ids"] = stop_ids
    guided = sampling.get("guided_decoding") or {}
    unsupported = sorted(k for k, v in guided.items() if v is not None and k not in (*_GUIDES, "backend"))
    if unsupported:
        raise ValueError(f"guided_decoding.{unsupported[0]} is not supported")
    guide = {key: guided[key] for key in _GUIDES if guided.get(key) is not None}
    if value_deeper_than(guide, _GUIDE_DEPTH):  # before json.dumps, which recurses per level
        raise too_deep("guided_decoding", _GUIDE_DEPTH)
    if guide:
        extra["guided_decoding"] = guide
    return extra


def _refuse_unsupported(sampling: dict[str, Any], stop: dict[str, Any], output: dict[str, Any]) -> None:
    """What the generator does not do is refused by name rather than silently ignored."""
    if (sampling.get("n") or 1) > 1 or (sampling.get("best_of") or 1) > 1:
        raise ValueError("n and best_of above 1 are not supported: send one request per choice")
    if sampling.get("use_beam_search"):
        raise ValueError("use_beam_search is not supported")
    if sampling.get("length_penalty") not in (None, 1, 1.0):
        raise ValueError("length_penalty is not supported (it applies to beam search)")
    if output.get("prompt_logprobs") is not None:
        raise ValueError("prompt_logprobs is not supported")
    if stop.get("max_thinking_tokens") is not None:
        raise ValueError("max_thinking_tokens is not supported")


def _int32(name: str, value: Any, low: int = 0) -> int | None:
    if value is None:
        return None
    number = int(value)
    if not low <= number <= INT32_MAX:
        raise ValueError(f"{name} must be between {low} and {INT32_MAX}, got {number}")
    return number


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    seed = int(value)
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be between 0 and {2**64 - 1}, got {seed}")
    return seed
