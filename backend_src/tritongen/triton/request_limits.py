"""What one request may cost, checked before the work it bounds: bytes before tokenizing, counts before decoding
strings, JSON shape before parsing it, sizes before compiling a grammar.

Each bound is a generator setting of the same name; the defaults let every
ordinary client through (a prompt of a full context, OpenAI's four stops,
real JSON schemas) while keeping one request from holding the engine thread
or the server's memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

from ..json_depth import MAX_JSON_DEPTH, check_json_depth


class RequestError(ValueError):
    """A client error in one request; the message names the field."""


@dataclass(frozen=True)
class RequestLimits:
    max_prompt_bytes: int = 1 << 20  # text_input, messages, and a rendered chat, before tokenizing
    max_chat_messages: int = 1024
    max_stop_words: int = 32  # text stop strings: each token is matched against every one
    max_stop_word_bytes: int = 256
    max_stop_token_ids: int = 64
    max_session_id_bytes: int = 256
    max_guide_bytes: int = 1 << 17  # a schema, regex or grammar, before llguidance compiles it
    max_json_bytes: int = 1 << 20  # sampling_parameters, speculative, request parameters
    max_json_depth: int = MAX_JSON_DEPTH  # every JSON input, and a JSON schema guide, before parsing
    max_integer_digits: int = 20  # every unsigned 64-bit value fits
    max_lookup_ngram: int = 16  # prompt lookup scans the context for this many trailing tokens per step
    max_logit_bias: int = 300  # logit_bias entries (OpenAI's limit)
    max_bad_words: int = 64  # each step checks every one against the output's end
    max_tools: int = 128  # tool schemas in one chat, rendered into its prompt and compiled into its grammar
    context: int = 1 << 31  # the engine's context, set at load: input_ids longer than this are refused unread

    @classmethod
    def settings(cls) -> tuple[str, ...]:
        """The names an operator may set (all but the model's context)."""
        return tuple(f.name for f in fields(cls) if f.name != "context")


def check_bytes(name: str, size: int, limit: int, setting: str = "") -> None:
    if size > limit:
        where = f" (generator setting {setting})" if setting else ""
        raise RequestError(f"{name} is {size} bytes, over the limit of {limit}{where}")


def check_count(name: str, count: int, limit: int, setting: str, what: str = "entries") -> None:
    if count > limit:
        raise RequestError(f"{name} has {count} {what}, over the limit of {limit} (generator setting {setting})")


def load_json(name: str, text: str, limits: RequestLimits):
    """Parse client JSON within the limits; every failure names `name` (a RequestError, or InvalidOption for the
    nesting, which json_depth bounds at every door)."""
    check_bytes(name, len(text), limits.max_json_bytes, "max_json_bytes")
    check_json_depth(name, text, limits.max_json_depth, "max_json_depth")

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > limits.max_integer_digits:
            raise RequestError(f"{name} holds an integer of {len(digits)} digits, over the limit of "
                               f"{limits.max_integer_digits} (generator setting max_integer_digits)")
        return int(digits)

    try:  # NaN and Infinity parse as floats: the field they land in refuses them by name
        value = json.loads(text, parse_int=integer)
    except json.JSONDecodeError as exc:
        raise RequestError(f"{name} is not valid JSON: {exc.msg} at position {exc.pos}") from None
    check_text(name, value)
    return value


def check_text(name: str, value) -> None:
    """Strings must be encodable as UTF-8: JSON's \\ud800 escapes give lone surrogates, which are not."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise RequestError(f"{name} holds a lone surrogate ({item[exc.start]!a}), not text") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
