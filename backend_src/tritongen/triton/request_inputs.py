"""Triton request inputs -> a GenerateRequest, with the contract's precedence.

Precedence: an input tensor, then a `sampling_parameters` key, then a
request parameter, then the generator's configured default. Every error
names the field, and every size is checked against the request limits
before the value is decoded, parsed or tokenized. No Triton import: tensors
arrive here as numpy arrays.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from llguidance.gbnf_to_lark import GbnfToLarkError, any_to_lark

from ..engine.options import (
    CONSTRAINT_KINDS,
    GenerateConstraint,
    GenerateOptions,
    GenerateRequest,
    InvalidOption,
    Priority,
)
from ..engine.sampling import MIN_TEMPERATURE
from ..json_depth import check_json_depth
from ..request_fields import BY_NAME, FIELDS, MAX_DRAFT_TOKENS
from ..speculative.modes import SpeculativeMode
from .request_limits import RequestError, RequestLimits, check_bytes, check_count, check_text, load_json

PROMPT_INPUTS = ("text_input", "input_ids", "messages")

# How a scalar field's Triton dtype reads, as a tensor, a sampling_parameters key or a request parameter alike.
_INT, _FLOAT, _BOOL = "int", "float", "bool"
_KINDS = {"INT32": _INT, "INT64": _INT, "UINT64": _INT, "FP32": _FLOAT, "BOOL": _BOOL}
# The vLLM backend's optional BOOL inputs, each asking for one output beside text_output.
VLLM_FLAGS = {"return_finish_reason": "finish_reason", "return_cumulative_logprob": "cumulative_logprob",
              "return_logprobs": "logprobs", "return_num_input_tokens": "num_input_tokens",
              "return_num_output_tokens": "num_output_tokens"}
# What the chat template itself is given; chat_template_kwargs may not replace these.
_TEMPLATE_OWN = {"messages", "tools", "documents", "add_generation_prompt"}
# vLLM's guided_decoding keys -> our constraint kinds.
_GUIDED_KEYS = {"json": "json_schema", "json_object": "json", "regex": "regex", "grammar": "lark", "choice": "choice"}
# vLLM SamplingParams fields we do not implement, accepted at vLLM's default (what clients send unasked).
_VLLM_DEFAULTS_ONLY = {"n": (1,), "best_of": (None, 1), "use_beam_search": (False,), "prompt_logprobs": (None,),
                       "lora_name": (None,), "detokenize": (True,), "truncate_prompt_tokens": (None,),
                       "logits_processors": (None,), "length_penalty": (1.0,), "early_stopping": (False,),
                       "allowed_token_ids": (None,), "extra_args": (None,), "spaces_between_special_tokens": (True,)}
# The rows' vLLM names, and the keys parsed on their own.
_SAMPLING_KEYS = {row.vllm for row in FIELDS if row.vllm} | {
    "stop", "stop_token_ids", "guided_decoding", "structured_outputs", "logit_bias", "bad_words", *_VLLM_DEFAULTS_ONLY}
# guided_decoding / structured_outputs keys that choose nothing we need (the grammar engine, whitespace
# policy): accepted and ignored; llguidance enforces the constraint.
_GUIDED_INERT = {"backend", "_backend", "_backend_was_auto", "whitespace_pattern", "disable_any_whitespace",
                 "disable_additional_properties", "disable_fallback", "structural_tag"}
_KNOWN_PARAMETERS = {name for row in FIELDS if row.parameter for name in row.names} | _SAMPLING_KEYS
LOGIT_BIAS_RANGE = 100.0  # OpenAI's


def _set_temperature(options: GenerateOptions, value: float) -> None:
    """Below MIN_TEMPERATURE is greedy; a negative or non-finite value is left for the engine to refuse."""
    options.greedy = 0.0 <= value < MIN_TEMPERATURE
    options.temperature = 1.0 if options.greedy else value


# The options a wire value does not set as it is; every other row's value is the option's.
_APPLY: dict[str, Callable[[GenerateOptions, Any], None]] = {
    "temperature": _set_temperature,
    "top_k": lambda o, v: setattr(o, "top_k", 0 if v == -1 else v),  # vLLM's -1 means off, as our 0 does
    "stop_on_eos": lambda o, v: setattr(o, "stop_on_eos", not v),  # ignore_eos
}
# The scalar rows that set an option; the engine validates the value (GenerateOptions.validate, Engine.prepare).
_OPTION_ROWS = tuple(row for row in FIELDS if row.option and row.dtype != "STRING")
# Engine fields with no row, as clients name them.
_OTHER_WIRE_NAMES = {"logit_bias": "sampling_parameters.logit_bias", "bad_words_ids": "sampling_parameters.bad_words",
                     "stop_sequences": "stop_token_ids"}
WIRE_NAMES = {**{row.option: row.name for row in FIELDS if row.option}, **_OTHER_WIRE_NAMES}


def named_error(exc: InvalidOption, parsed: "ParsedRequest") -> RequestError:
    """The engine's refusal, led by the field as the client spelled it when the message does not name it."""
    field = {"prompt": parsed.prompt_field, "constraint": parsed.constraint_field}.get(exc.field)
    field = field or WIRE_NAMES.get(exc.field, exc.field)
    message = str(exc)
    return RequestError(message if field in message else f"{field}: {message}")


@dataclass
class ResponseMode:
    stream: bool
    exclude_input_in_output: bool
    stream_interval: int | None = None  # new tokens per streamed response; None: the generator's setting
    # The vLLM backend's return_* flags: the outputs they ask for, beside text_output (None: no flag sent).
    vllm_outputs: frozenset[str] | None = None


@dataclass
class ParsedRequest:
    request: GenerateRequest
    mode: ResponseMode
    prompt_text: str | None  # the prompt as text; None when it came as input_ids
    priority: Priority = Priority.NORMAL
    session_id: str | None = None
    end_session: bool = False
    prompt_field: str = "text_input"  # the input that held the prompt, for errors found later
    constraint_field: str | None = None  # where the constraint came from, for compile errors
    bad_words: list[str] = field(default_factory=list)  # tokenized by the caller, which has the tokenizer


def _coerce(name: str, kind: str, value):
    """Accept numbers as strings ("16") and numpy scalars; reject the rest by name."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    try:
        if kind == _BOOL:
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                return value.lower() in ("true", "1")
            if isinstance(value, (bool, int)) and not isinstance(value, float):
                return bool(value)
            raise ValueError
        if isinstance(value, bool):
            raise ValueError
        if kind == _INT:
            number = value
            if isinstance(value, str):  # exact for 64-bit integers; "16.0" and "1e3" via float
                if len(value) > 64:
                    raise ValueError
                try:
                    number = int(value.strip())
                except ValueError:
                    number = float(value)
            if isinstance(number, float):
                if not math.isfinite(number) or number != int(number):
                    raise ValueError
                number = int(number)
            if not isinstance(number, int) or not -2**63 <= number < 2**64:
                raise ValueError
            return number
        number = float(value)
        return number
    except (ValueError, TypeError, OverflowError):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        what = "an integer that fits in 64 bits" if kind == _INT else "a number" if kind == _FLOAT else "a boolean"
        raise RequestError(f"{name} must be {what}, got {shown}") from None


def _scalar_tensor(name: str, array: np.ndarray):
    if array.size != 1:
        raise RequestError(f"{name} must hold exactly one value, got shape {list(array.shape)}")
    return array.reshape(-1)[0]


def _text(name: str, value, limit: int | None = None, setting: str = "") -> str:
    """A tensor's or parameter's string, its size checked against `limit` before it is decoded."""
    if limit is not None and isinstance(value, (bytes, str)):
        size = len(value) if isinstance(value, bytes) else len(value.encode("utf-8", "surrogatepass"))
        check_bytes(name, size, limit, setting)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"{name} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if isinstance(value, str):
        check_text(name, value)
        return value
    raise RequestError(f"{name} must be a string")


def _sampling_parameters(tensors: dict, limits: RequestLimits) -> dict:
    if "sampling_parameters" not in tensors:
        return {}
    raw = _text("sampling_parameters", _scalar_tensor("sampling_parameters", tensors["sampling_parameters"]),
                limits.max_json_bytes, "max_json_bytes")
    if not raw.strip():
        return {}
    params = load_json("sampling_parameters", raw, limits)
    if not isinstance(params, dict):
        raise RequestError("sampling_parameters must be a JSON object")
    unknown = sorted(set(params) - _SAMPLING_KEYS)
    if unknown:
        raise RequestError(f"sampling_parameters has unsupported key(s): {', '.join(unknown)}")
    for key, allowed in _VLLM_DEFAULTS_ONLY.items():
        if key in params and params[key] not in allowed:
            raise RequestError(f"sampling_parameters.{key} is not supported beyond vLLM's default "
                               f"{allowed[0]!r}, got {params[key]!r}")
    return params


def _messages(raw: str, limits: RequestLimits) -> list[dict]:
    messages = load_json("messages", raw, limits)
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty JSON list of {role, content} objects")
    check_count("messages", len(messages), limits.max_chat_messages, "max_chat_messages", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content", ""), str):
            raise RequestError(f"messages[{i}] must be an object with string 'role' and 'content'")
        if m.get("content") is None:  # an assistant turn that only called tools
            m["content"] = ""
    return messages


def _string_list(name: str, value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise RequestError(f"{name} must be a string or a list of strings")


def _stops(tensors: dict, sampling: dict, parameters: dict, limits: RequestLimits) -> list:
    """Text stops (stop_words, then sampling_parameters.stop or parameter stop) and token-id stops, bounded."""
    stops: list = []
    if "stop_words" in tensors:
        words = tensors["stop_words"].reshape(-1)
        check_count("stop_words", words.size, limits.max_stop_words, "max_stop_words", "stop words")
        stops += [_text("stop_words", w, limits.max_stop_word_bytes, "max_stop_word_bytes") for w in words]
    if "stop" in sampling:
        stops += _string_list("sampling_parameters.stop", sampling["stop"])
    elif "stop" in parameters:
        stops += _string_list("parameter stop", parameters["stop"])
    check_count("stop words", len(stops), limits.max_stop_words, "max_stop_words", "stop strings")
    for i, s in enumerate(stops):
        if s == "":
            raise RequestError(f"stop word {i} is empty")
        check_bytes(f"stop word {i}", len(s.encode("utf-8")), limits.max_stop_word_bytes, "max_stop_word_bytes")
    token_stops = sampling.get("stop_token_ids", parameters.get("stop_token_ids", []))
    if not isinstance(token_stops, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                    for t in token_stops):
        raise RequestError("stop_token_ids must be a list of integers")
    check_count("stop_token_ids", len(token_stops), limits.max_stop_token_ids, "max_stop_token_ids", "ids")
    return stops + [(t,) for t in token_stops]


def _logit_bias(sampling: dict, limits: RequestLimits) -> dict[int, float]:
    """{token id: bias}: ids as JSON keys (strings) or integers, biases in [-100, 100] (OpenAI's range)."""
    raw = sampling.get("logit_bias")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RequestError("sampling_parameters.logit_bias must be an object of token id -> bias")
    check_count("sampling_parameters.logit_bias", len(raw), limits.max_logit_bias, "max_logit_bias")
    bias = {}
    for key, value in raw.items():
        token = _coerce("sampling_parameters.logit_bias key", _INT, key)
        value = _coerce(f"sampling_parameters.logit_bias[{key}]", _FLOAT, value)
        if not -LOGIT_BIAS_RANGE <= value <= LOGIT_BIAS_RANGE:
            raise RequestError(f"sampling_parameters.logit_bias[{key}] must be between -100 and 100, got {value}")
        bias[token] = value
    return bias


def _bad_words(sampling: dict, limits: RequestLimits) -> list[str]:
    words = sampling.get("bad_words")
    if words is None:
        return []
    words = _string_list("sampling_parameters.bad_words", words)
    check_count("sampling_parameters.bad_words", len(words), limits.max_bad_words, "max_bad_words", "words")
    for i, word in enumerate(words):
        if not word.strip():
            raise RequestError(f"sampling_parameters.bad_words[{i}] is empty")
        check_bytes(f"sampling_parameters.bad_words[{i}]", len(word.encode("utf-8")), limits.max_stop_word_bytes,
                    "max_stop_word_bytes")
    return words


def _template_inputs(tensors: dict, parameters: dict, limits: RequestLimits) -> dict:
    """`tools` (a JSON list of tool schemas) and `chat_template_kwargs` (a JSON object), for the chat template."""
    out = {}
    tools = _string_option("tools", tensors, parameters, limits.max_json_bytes, "max_json_bytes")
    if tools is not None:
        out["tools"] = load_json("tools", tools, limits)
        if not isinstance(out["tools"], list) or not all(isinstance(t, dict) for t in out["tools"]):
            raise RequestError("tools must be a JSON list of tool schemas (objects)")
        check_count("tools", len(out["tools"]), limits.max_tools, "max_tools", "tools")
    kwargs = _string_option("chat_template_kwargs", tensors, parameters, limits.max_json_bytes, "max_json_bytes")
    if kwargs is not None:
        kwargs = load_json("chat_template_kwargs", kwargs, limits)
        if not isinstance(kwargs, dict):
            raise RequestError("chat_template_kwargs must be a JSON object")
        reserved = sorted(set(kwargs) & _TEMPLATE_OWN)
        if reserved:
            raise RequestError(f"chat_template_kwargs may not set {', '.join(reserved)}")
        out.update(kwargs)
    return out


def _prompt(tensors: dict, parameters: dict, render_chat, limits: RequestLimits) -> tuple:
    """(prompt as text or ids, its text or None, the input that held it); sizes checked before any work."""
    given = [name for name in PROMPT_INPUTS if name in tensors]
    if not given:
        raise RequestError("request needs a prompt: one of text_input, input_ids or messages")
    if len(given) > 1:
        raise RequestError(f"give only one prompt input, got {', '.join(given)}")
    if "input_ids" in tensors:
        ids = tensors["input_ids"].reshape(-1)
        if ids.size == 0:
            raise RequestError("input_ids must not be empty")
        if ids.size >= limits.context:
            raise RequestError(f"input_ids has {ids.size} tokens but the context holds {limits.context}: "
                               "no room for a new token")
        return [int(i) for i in ids], None, "input_ids"
    if "messages" in tensors:
        raw = _text("messages", _scalar_tensor("messages", tensors["messages"]), limits.max_prompt_bytes,
                    "max_prompt_bytes")
        prompt = render_chat(_messages(raw, limits), **_template_inputs(tensors, parameters, limits))
        check_bytes("messages (rendered with the chat template)", len(prompt.encode("utf-8")),
                    limits.max_prompt_bytes, "max_prompt_bytes")
        return prompt, prompt, "messages"
    prompt = _text("text_input", _scalar_tensor("text_input", tensors["text_input"]), limits.max_prompt_bytes,
                   "max_prompt_bytes")
    if not prompt:
        raise RequestError("text_input must not be empty")
    return prompt, prompt, "text_input"


def parse_request(tensors: dict[str, np.ndarray], parameters: dict, defaults: dict, render_chat,
                  limits: RequestLimits = RequestLimits()) -> ParsedRequest:
    """Build the engine request; `render_chat(messages)` comes from the model's tokenizer."""
    sampling = _sampling_parameters(tensors, limits)
    unknown = sorted(k for k in parameters if k not in _KNOWN_PARAMETERS and not k.startswith("triton_"))
    if unknown:
        raise RequestError(f"unsupported request parameter(s): {', '.join(unknown)}")

    def get(name: str):
        row = BY_NAME[name]
        kind = _KINDS[row.dtype]
        for key in row.names:
            if key in tensors:
                return _coerce(key, kind, _scalar_tensor(key, tensors[key]))
        for key in row.names:
            if key in sampling:
                return _coerce(f"sampling_parameters.{key}", kind, sampling[key])
        for key in row.names:
            if key in parameters:
                return _coerce(f"parameter {key}", kind, parameters[key])
        return defaults.get(name)

    prompt, prompt_text, prompt_field = _prompt(tensors, parameters, render_chat, limits)

    options = GenerateOptions()
    seeds = {k: _coerce(k, _INT, _scalar_tensor(k, tensors[k])) for k in ("seed", "random_seed") if k in tensors}
    if len(set(seeds.values())) > 1:
        raise RequestError(f"seed and random_seed differ ({seeds['seed']} vs {seeds['random_seed']})")
    for row in _OPTION_ROWS:
        value = get(row.name)
        if value is None:
            continue
        if row.wire_range is not None and not row.wire_range[0] <= value <= row.wire_range[1]:
            low, high = row.wire_range
            raise RequestError(f"{row.name} must be between {low:g} and {high:g}, got {value}")
        apply = _APPLY.get(row.option)
        if apply is None:
            setattr(options, row.option, value)
        else:
            apply(options, value)
    if get("return_log_probs") and options.top_logprobs is None:
        options.top_logprobs = 0
    options.stop_sequences = _stops(tensors, sampling, parameters, limits)
    options.logit_bias = _logit_bias(sampling, limits)
    bad_words = _bad_words(sampling, limits)
    options.constraint, constraint_field = _constraint(tensors, sampling, parameters, limits)
    options.speculative_mode = _speculative(_string_option("speculative", tensors, parameters, limits.max_json_bytes,
                                                           "max_json_bytes"),
                                            limits)
    stream_interval = get("stream_interval")
    if stream_interval is not None and stream_interval < 1:
        raise RequestError(f"stream_interval must be at least 1, got {stream_interval}")
    flags = {name: get(name) for name in VLLM_FLAGS}
    mode = ResponseMode(
        stream=bool(get("stream")),
        exclude_input_in_output=bool(get("exclude_input_in_output")),
        stream_interval=stream_interval,
        vllm_outputs=frozenset(VLLM_FLAGS[n] for n, v in flags.items() if v) if any(
            v is not None for v in flags.values()) else None,
    )
    priority_name = _string_option("priority", tensors, parameters, 64)
    priority = Priority.NORMAL
    if priority_name is not None:
        try:
            priority = Priority[priority_name.upper()]
        except KeyError:
            raise RequestError(f"priority must be low, normal or high, got {priority_name!r}") from None
    session_id = _string_option("session_id", tensors, parameters, limits.max_session_id_bytes, "max_session_id_bytes")
    if session_id is not None and not session_id:
        raise RequestError("session_id must not be empty")
    end_session = bool(get("end_session"))
    if end_session and session_id is None:
        raise RequestError("end_session needs a session_id")
    return ParsedRequest(GenerateRequest(prompt, options), mode, prompt_text, priority, session_id, end_session,
                         prompt_field, constraint_field, bad_words)


def _constraint(tensors: dict, sampling: dict, parameters: dict,
                limits: RequestLimits) -> tuple[GenerateConstraint | None, str | None]:
    """guided_decoding_guide_type + guided_decoding_guide, or sampling_parameters.guided_decoding; and its field."""
    kind = _string_option("guided_decoding_guide_type", tensors, parameters, 64)
    guide = _string_option("guided_decoding_guide", tensors, parameters, limits.max_guide_bytes, "max_guide_bytes")
    if "guided_decoding" in sampling and "structured_outputs" in sampling:
        raise RequestError("give sampling_parameters.structured_outputs or guided_decoding, not both")
    source = "structured_outputs" if "structured_outputs" in sampling else "guided_decoding"
    guided = sampling.get(source)
    if isinstance(guided, str):  # Triton's OpenAI frontend sends structured_outputs as a JSON string
        guided = load_json(f"sampling_parameters.{source}", guided, limits)
    if kind is not None and guided is not None:
        raise RequestError(f"give guided_decoding_guide_type or sampling_parameters.{source}, not both")
    if kind is not None:
        kind = kind.strip().lower()
        if kind not in (*CONSTRAINT_KINDS, "ebnf_grammar"):
            raise RequestError(f"guided_decoding_guide_type must be one of {', '.join(CONSTRAINT_KINDS)} or "
                               f"ebnf_grammar, got {kind!r}")
        if kind != "json" and not guide:
            raise RequestError(f"guided_decoding_guide is required for guided_decoding_guide_type {kind}")
        if kind == "json_schema" and guide:  # a JSON schema: parsed (by the engine, then llguidance) as JSON
            check_json_depth("guided_decoding_guide", guide, limits.max_json_depth, "max_json_depth")
        if kind in ("lark", "ebnf_grammar"):  # TensorRT-LLM's ebnf_grammar is GBNF; Lark passes unchanged
            assert guide is not None  # required just above for every kind but json
            return GenerateConstraint("lark", _lark("guided_decoding_guide", guide)), "guided_decoding_guide"
        return GenerateConstraint(kind, guide or ""), "guided_decoding_guide"
    if guide is not None:
        raise RequestError("guided_decoding_guide needs guided_decoding_guide_type")
    if guided is None:
        return None, None
    if not isinstance(guided, dict):
        raise RequestError(f"sampling_parameters.{source} must be an object")
    given = [k for k in guided if guided[k] is not None and guided[k] is not False and k not in _GUIDED_INERT]
    unknown = sorted(set(given) - set(_GUIDED_KEYS))
    if unknown:
        raise RequestError(f"sampling_parameters.{source} has unsupported key(s): {', '.join(unknown)}")
    if len(given) != 1:
        raise RequestError(f"sampling_parameters.{source} needs exactly one of: " + ", ".join(_GUIDED_KEYS))
    key = given[0]
    value = guided[key]
    field = f"sampling_parameters.{source}.{key}"
    if key == "json":
        value = value if isinstance(value, str) else json.dumps(value)
        check_json_depth(field, value, limits.max_json_depth, "max_json_depth")
    size = len(value.encode("utf-8")) if isinstance(value, str) else len(json.dumps(value))
    check_bytes(field, size, limits.max_guide_bytes, "max_guide_bytes")
    try:
        if key == "choice":
            return GenerateConstraint.choice(value), field
        if key == "json_object":  # vLLM's and OpenAI's json_object: a JSON object, not any JSON value
            return GenerateConstraint("json_schema", '{"type": "object"}'), field
        if key == "json":
            return GenerateConstraint("json_schema", value), field
        if not isinstance(value, str):
            raise ValueError(f"{key} must be a string")
        if key == "grammar":  # vLLM's users write GBNF or Lark
            return GenerateConstraint("lark", _lark(field, value)), field
        return GenerateConstraint(_GUIDED_KEYS[key], value), field
    except ValueError as exc:
        raise RequestError(str(exc) if str(exc).startswith(field) else f"{field}: {exc}") from None


def _lark(field: str, grammar: str) -> str:
    """A grammar as llguidance's Lark: GBNF (`root ::= ...`) converted by llguidance, Lark unchanged."""
    try:
        return any_to_lark(grammar)
    except GbnfToLarkError as exc:
        raise RequestError(f"{field}: not a GBNF or Lark grammar ({exc})") from None


def _speculative(raw: str | None, limits: RequestLimits) -> SpeculativeMode | None:
    """{"mode": name, numeric knobs...}: a mode configured in the repository, never a file path."""
    if raw is None or not raw.strip():
        return None
    spec = load_json("speculative", raw, limits)
    if not isinstance(spec, dict) or not isinstance(spec.get("mode"), str):
        raise RequestError('speculative must be a JSON object with a string "mode"')
    knobs = {k: v for k, v in spec.items() if k != "mode"}
    unknown = sorted(set(knobs) - {"ngram", "max_tokens"})
    if unknown:
        raise RequestError(f"speculative has unsupported key(s): {', '.join(unknown)}")
    bounds = {"ngram": limits.max_lookup_ngram, "max_tokens": MAX_DRAFT_TOKENS}
    for key, value in knobs.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise RequestError(f"speculative.{key} must be an integer")
        if value > bounds[key]:
            raise RequestError(f"speculative.{key} must be at most {bounds[key]}, got {value}")
    mode = SpeculativeMode(spec["mode"], **knobs)
    try:
        mode.validate()
    except ValueError as exc:
        raise RequestError(f"speculative: {exc}") from None
    return mode


def _string_option(name: str, tensors: dict, parameters: dict, limit: int, setting: str = "") -> str | None:
    if name in tensors:
        return _text(name, _scalar_tensor(name, tensors[name]), limit, setting)
    if name in parameters:
        value = parameters[name]
        return _text(f"parameter {name}", value, limit, setting)
    return None
