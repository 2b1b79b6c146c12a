"""Tool calls that always parse and validate: the call's syntax and its arguments are a grammar the model
decodes under, not a format it is asked to follow.

The model opens a call with `<tool_call>` and writes one JSON object, {"name": ..., "arguments": {...}}, then
`</tool_call>`; parallel calls follow each other on new lines. The grammar (llguidance's Lark, which embeds
JSON schemas with `%json`) allows, for each tool, exactly its name and arguments valid against its parameters
schema:
- tool_choice "required": one call or more (one with parallel_tool_calls false);
- a named function: exactly one call of it;
- "auto": either calls, or a text answer, which then may not begin with "<" (so a call cannot be mistaken for
  text, and text never escapes the grammar of a call);
- "none", or no tools: no grammar; the tools still reach the chat template.
"""

from __future__ import annotations

import json
import re
import uuid

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"\s*(\{.*?\})\s*" + re.escape(CLOSE), re.DOTALL)


def _call_schema(tool: dict) -> dict:
    function = tool["function"]
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "object", "properties": {"name": {"const": function["name"]}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def grammar(tools: list[dict], choice, parallel: bool) -> str | None:
    """The Lark grammar the answer must match; None when the answer is free (no tools, or choice "none")."""
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        tools = [t for t in tools if t["function"]["name"] == choice["function"]["name"]]
        parallel = False
    schemas = [_call_schema(t) for t in tools]
    call_schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    calls = 'call ("\\n" call)*' if parallel else "call"
    rules = [f"calls: {calls}", f'call: "{OPEN}" %json {json.dumps(call_schema)} "{CLOSE}"']
    if choice == "auto":
        return "\n".join(["start: calls | TEXT", *rules, r"TEXT: /[^<](.|\n)*/"])
    return "\n".join(["start: calls", *rules])


def parse(text: str) -> list[dict] | None:
    """The calls in a generated answer, in OpenAI's tool_calls shape; None when it is a text answer."""
    if not text.lstrip().startswith(OPEN):
        return None
    calls = []
    for match in _CALL.finditer(text):
        call = json.loads(match.group(1))
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}})
    return calls or None
