"""The OpenAI request bodies we accept, validated before anything reaches Triton.

Why pydantic models: FastAPI turns a field that fails here into a 400 naming
the field (see app.py), so bad requests never cost a generator round trip.
Fields OpenAI defines that we cannot honour are rejected by name rather than
silently ignored; vendor extras that vLLM's server accepts through the
client's `extra_body` (stop_token_ids, and the request fields whose row gives
OpenAI bounds) are passed through to the generator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Union, cast

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from ..request_fields import FIELDS, INT32_MAX
from .errors import invalid

MAX_TOOLS = 128  # the generator's max_tools: each is rendered into the prompt and compiled into the grammar
MAX_LOGIT_BIAS = 300  # OpenAI's
INT64_MAX = 2**63 - 1
# The vLLM-style extras: request field rows with OpenAI bounds, each a field under its vLLM name.
VLLM_EXTRAS = tuple(row for row in FIELDS if row.openai is not None)
_TYPES = {"INT32": int, "FP32": float, "BOOL": bool}


class StreamOptions(BaseModel):
    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    name: str = "response"
    schema_: Optional[dict[str, Any]] = Field(None, alias="schema")
    strict: Optional[bool] = None
    description: Optional[str] = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaFormat] = None


class _OpenAIFields(BaseModel):
    """OpenAI's own fields that the chat and completions endpoints share."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    model: str
    max_tokens: Optional[int] = Field(None, ge=1, le=INT32_MAX)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, ge=0.0, le=1.0)
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    stop: Union[str, list[str], None] = None
    seed: Optional[int] = Field(None, ge=0, lt=2**64)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    response_format: Optional[ResponseFormat] = None
    logit_bias: Optional[dict[str, float]] = None  # token id -> bias in [-100, 100], at most 300 entries
    user: Optional[str] = None


if TYPE_CHECKING:  # the checker sees OpenAI's fields; the extras are read by their rows' names
    _WithExtras = _OpenAIFields
else:  # an INT32 input's extra is bounded by INT32 too
    _WithExtras = create_model("_WithExtras", __base__=_OpenAIFields, **{
        row.vllm: (Optional[_TYPES[row.dtype]], Field(None, **({"le": INT32_MAX} if row.dtype == "INT32" else {}),
                                                      **row.openai))
        for row in VLLM_EXTRAS})


class SamplingRequest(_WithExtras):
    """Fields the chat and completions endpoints share."""

    stop_token_ids: Optional[list[Annotated[int, Field(ge=0, le=INT32_MAX)]]] = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_shape(cls, value):
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise ValueError("must be a string or a list of strings")

    @model_validator(mode="after")
    def _supported(self):
        if self.logit_bias is not None and len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise invalid(f"logit_bias has {len(self.logit_bias)} entries, over the limit of {MAX_LOGIT_BIAS}",
                          "logit_bias")
        if self.logit_bias and any(not -100 <= v <= 100 for v in self.logit_bias.values()):
            raise invalid("logit_bias values must be between -100 and 100", "logit_bias")
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        if any(not s for s in stops):
            raise invalid("stop strings must not be empty", "stop")
        if self.stream_options is not None and not self.stream:
            raise invalid("stream_options is only allowed when stream is true", "stream_options")
        return self


class ContentPart(BaseModel):
    type: str
    text: Optional[str] = None


class FunctionCall(BaseModel):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(BaseModel):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[ContentPart], None] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None  # an assistant turn that called tools
    tool_call_id: Optional[str] = None  # a tool's answer


class FunctionDefinition(BaseModel):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: dict[str, str]


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=INT32_MAX)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    tools: Optional[list[Tool]] = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: bool = True
    functions: Optional[list[Any]] = None
    modalities: Optional[list[str]] = None

    @model_validator(mode="after")
    def _chat_supported(self):
        if self.functions:
            raise invalid("functions (deprecated) is not supported: send tools", "functions")
        tools = self.tools or []
        if len(tools) > MAX_TOOLS:
            raise invalid(f"{len(tools)} tools, over the limit of {MAX_TOOLS}", "tools")
        names = [t.function.name for t in tools]
        if len(set(names)) != len(names):
            raise invalid("tool names must be unique", "tools")
        if self.tool_choice not in (None, "none", "auto") and not tools:
            raise invalid("tool_choice needs tools", "tool_choice")
        if isinstance(self.tool_choice, NamedToolChoice) and self.tool_choice.function.get("name") not in names:
            raise invalid(f"tool_choice names {self.tool_choice.function.get('name')!r}, which is not in tools",
                          "tool_choice")
        if self.modalities and self.modalities != ["text"]:
            raise invalid("only the text modality is supported", "modalities")
        if self.top_logprobs is not None and not self.logprobs:
            raise invalid("top_logprobs needs logprobs set to true", "top_logprobs")
        if self.max_tokens is not None and self.max_completion_tokens is not None \
                and self.max_tokens != self.max_completion_tokens:
            raise invalid("give max_tokens or max_completion_tokens, not both with different values", "max_tokens")
        return self


class CompletionRequest(SamplingRequest):
    prompt: Union[str, list[str], list[int], list[list[int]]]
    logprobs: Optional[int] = Field(None, ge=0, le=20)
    echo: bool = False
    best_of: Optional[int] = None
    suffix: Optional[str] = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value):
        def ids(v):
            return isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= INT64_MAX
                                               for i in v)

        if isinstance(value, str) or ids(value) or (isinstance(value, list) and (
                all(isinstance(v, str) for v in value) or all(ids(v) for v in value))):
            return value
        raise ValueError("must be a string, a list of strings, a list of token ids (0 to 2**63-1) "
                         "or a list of such lists")

    @model_validator(mode="after")
    def _completion_supported(self):
        if self.echo:
            raise invalid("echo is not supported", "echo")
        if self.suffix:
            raise invalid("suffix is not supported", "suffix")
        if self.best_of not in (None, self.n):
            raise invalid("best_of other than n is not supported", "best_of")
        if self.prompt == "" or self.prompt == [] or any(p in ("", []) for p in self.prompt_list()):
            raise invalid("prompt must not be empty", "prompt")
        return self

    def prompt_list(self) -> list[Union[str, list[int]]]:
        """The prompts as a list: one string or token list per prompt."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        # The checker cannot narrow a union of list types by their items: the casts say what all() found.
        if p and all(isinstance(x, int) for x in p):
            return [cast("list[int]", p)]
        return list(cast("Union[list[str], list[list[int]]]", p))
