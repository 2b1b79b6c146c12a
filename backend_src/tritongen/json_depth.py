"""How deep a client's JSON nests, measured without recursing, and the one bound every door holds it to.

Why before parsing: Python's json, pydantic and the chat template recurse once per level, so a value nested
thousands deep raises RecursionError inside them, which reads as the server's failure, not the client's. Each door
(the generator's inputs, the OpenAI API's body, the Dynamo worker's request) measures the text, or a value already
parsed, here first and refuses deeper nesting by the field's name. The default keeps well under llguidance's own
bound (it refuses a JSON schema nested past 128 levels) while a real tool's schema nests a dozen levels at most.
The standard library only: the Triton adapter, the OpenAI API and the Dynamo worker each import it.
"""

from __future__ import annotations

import json
import re

from .errors import InvalidOption

MAX_JSON_DEPTH = 64  # the generator's max_json_depth default, and the bound of the OpenAI API and the Dynamo worker

# A JSON string (a key when a colon follows), or a bracket: strings are skipped whole, brackets in them not counted.
# One left open runs to the end of the text, so that no match is tried again further on (linear in the text).
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"(\s*:)?|\\?\Z)|[\[\]{}]', re.DOTALL)


def deeper_than(text: str | bytes, limit: int) -> str | None:
    """None when arrays and objects in `text` nest at most `limit` deep; else the top-level key under which they
    nest deeper ("" when that is not under a key). Bytes are decoded as json.loads would decode them."""
    if isinstance(text, bytes):
        text = text.decode(json.detect_encoding(text), "replace")
    depth, key = 0, ""
    for token in _TOKEN.finditer(text):
        bracket = token[0]
        if bracket[0] == '"':
            if depth == 1 and token[1]:
                key = bracket[1:bracket.rindex('"')]
        elif bracket in "[{":
            depth += 1
            if depth > limit:
                return key
        else:
            depth -= 1
    return None


def value_deeper_than(value, limit: int) -> bool:
    """Whether lists and dicts in an already parsed `value` nest deeper than `limit`; counted without recursing."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def too_deep(field: str, limit: int, setting: str = "") -> InvalidOption:
    """The refusal, naming the field, the limit and the generator setting that raises it, if any."""
    where = f" (generator setting {setting})" if setting else ""
    return InvalidOption(field, f"{field} nests deeper than the limit of {limit} levels{where}")


def check_json_depth(field: str, text: str | bytes, limit: int = MAX_JSON_DEPTH, setting: str = "") -> None:
    """Refuse `text` (InvalidOption naming `field`) when it nests deeper than `limit`, before anything parses it."""
    if deeper_than(text, limit) is not None:
        raise too_deep(field, limit, setting)
