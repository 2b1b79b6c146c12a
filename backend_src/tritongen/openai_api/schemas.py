"""The OpenAI request bodies we accept, validated before anything reaches Triton.

Why pydantic models: FastAPI turns a field that fails here into a 400 naming
the field (see app.py), so bad requests never cost a generator round trip.
Fields OpenAI defines that we cannot honour are rejected by name rather than
silently ignored; vendor extras that vLLM's server accepts through the
client's `extra_body` (top_k, min_p, repetition_penalty, ignore_eos,
min_tokens, stop_token_ids) are passed through to the generator.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .errors import invalid

INT32_MAX = 2**31 - 1  # the generator's INT32 inputs: a larger value is refused, never wrapped
INT64_MAX = 2**63 - 1


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


class SamplingRequest(BaseModel):
    """Fields the chat and completions endpoints share."""

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
    logit_bias: Optional[dict[str, float]] = None
    user: Optional[str] = None
    # vLLM-style extras (openai's `extra_body`).
    top_k: Optional[int] = Field(None, ge=-1, le=INT32_MAX)
    min_p: Optional[float] = Field(None, ge=0.0, le=1.0)
    repetition_penalty: Optional[float] = Field(None, gt=0.0)
    ignore_eos: Optional[bool] = None
    min_tokens: Optional[int] = Field(None, ge=0, le=INT32_MAX)
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
        if self.logit_bias:
            raise invalid("logit_bias is not supported", "logit_bias")
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        if any(not s for s in stops):
            raise invalid("stop strings must not be empty", "stop")
        if self.stream_options is not None and not self.stream:
            raise invalid("stream_options is only allowed when stream is true", "stream_options")
        return self


class ContentPart(BaseModel):
    type: str
    text: Optional[str] = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[ContentPart], None] = None
    name: Optional[str] = None


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1, le=INT32_MAX)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    tools: Optional[list[Any]] = None
    tool_choice: Optional[Any] = None
    functions: Optional[list[Any]] = None
    modalities: Optional[list[str]] = None

    @model_validator(mode="after")
    def _chat_supported(self):
        if self.tools or self.functions:
            raise invalid("tools and function calling are not supported", "tools" if self.tools else "functions")
        if self.tool_choice not in (None, "none"):
            raise invalid("tool_choice is not supported", "tool_choice")
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
        raise ValueError("must be a string, a list of strings, a list of token ids (0 to 2**63-1) or a list of such lists")

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
        if p and all(isinstance(x, int) for x in p):
            return [p]
        return list(p)
