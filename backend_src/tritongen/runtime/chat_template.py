"""A model's chat template, rendered as transformers renders it, so a prompt is the one the model was tuned on.

The same Jinja environment (trim and lstrip blocks, loop controls, a `tojson`
that does not escape HTML and takes json.dumps' keyword arguments,
`raise_exception`, `strftime_now`, `dict`, a `namespace` without underscore
attributes) and the same variables: messages, tools, documents,
add_generation_prompt, the tokenizer's special tokens, and any
chat_template_kwargs. Sandboxed: templates come from model folders.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .model_folder import read_json


def template_source(folder: Path, tokenizer_config: dict) -> str | None:
    """chat_template.jinja, else chat_template.json, else tokenizer_config.json's chat_template (the one named
    "default" when it is a list of named templates); None when the folder has none."""
    folder = Path(folder)
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    template = read_json(folder, "chat_template.json").get("chat_template") or tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise ValueError(f"{folder}: chat_template must be a string or a list of named templates")
    return template


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _Dict:
    """`dict(...)` and `dict.fromkeys(...)` for templates, without the class itself."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """Jinja's namespace, refusing underscore attributes (a way out of the sandbox)."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates may not set underscore attributes ({name!r})")


TOOLS_PREAMBLE = ("You can call these tools. To call one, answer with <tool_call>{\"name\": <the tool's name>, "
                  "\"arguments\": <its arguments as a JSON object>}</tool_call>, one per line; otherwise answer in "
                  "text.\nTools:\n")


def with_tools_in_text(messages: list[dict], tools: list | None) -> list[dict]:
    """For a template that renders no tools: describe them in the system turn, and write earlier calls out in the
    syntax the model is asked to use (the syntax tool calls are decoded in)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls:
            written = "\n".join("<tool_call>" + json.dumps({"name": c["function"]["name"],
                                                             "arguments": c["function"]["arguments"]}) + "</tool_call>"
                                 for c in calls)
            m = {**m, "content": (m.get("content") or "") + written}
        out.append(m)
    if tools:
        described = TOOLS_PREAMBLE + "\n".join(json.dumps(t.get("function", t), separators=(",", ":")) for t in tools)
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + described}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out


class ChatTemplate:
    def __init__(self, source: str, special_tokens: dict[str, str]):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_Dict(),
                           namespace=_Namespace)
        self._template = env.from_string(source)
        self.special_tokens = special_tokens
        self.renders_tools = "tool" in source  # else tools and calls are written into the messages

    def render(self, messages: list[dict], add_generation_prompt: bool = True, tools: list | None = None,
               documents: list | None = None, **kwargs) -> str:
        """The prompt text; ValueError with the template's own message when it refuses the conversation."""
        try:
            return self._template.render(messages=messages, tools=tools, documents=documents,
                                         add_generation_prompt=add_generation_prompt,
                                         **{**self.special_tokens, **kwargs})
        except jinja2.exceptions.TemplateError as exc:
            raise ValueError(f"chat template: {exc}") from None
