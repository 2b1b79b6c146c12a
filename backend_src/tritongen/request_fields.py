"""The generator's request fields, one row each: how clients spell it, its Triton dtype, the bounds a boundary
adds, and the GenerateOptions field it sets.

Why one table: the Triton request parsing, the config.pbtxt check, the OpenAI API and the Dynamo worker all read
these rows, so a field is declared once. The standard library only: the Triton adapter, the OpenAI layer and the
Dynamo worker (whose environment has no engine) each import it, and none of them the others. The engine still
validates every value (GenerateOptions.validate); a row holds only what a boundary adds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

INT32_MAX = 2**31 - 1  # an INT32 input: a larger value is refused by a front end, never wrapped


@dataclass(frozen=True)
class RequestField:
    name: str  # the generator's input tensor, and the request parameter of that name
    dtype: str  # the input's Triton data type as config.pbtxt spells it, less TYPE_
    option: str = ""  # the GenerateOptions field it sets; "": parsed on its own (prompt, mode, session...)
    # Other spellings read as this field (vLLM's, TensorRT-LLM's); a tensor only where config.pbtxt declares one.
    aliases: tuple[str, ...] = ()
    vllm: str = ""  # its vLLM SamplingParams name: a sampling_parameters key, and Dynamo's sampling option
    wire_range: Optional[tuple[float, float]] = None  # bounds the Triton boundary adds (OpenAI's)
    # An OpenAI API field under the vLLM name (a client's extra_body), bounded as pydantic's Field takes it.
    openai: Optional[Mapping[str, float]] = None
    tensor: bool = True  # an input of config.pbtxt (else a sampling_parameters key only)
    parameter: bool = True  # also read as a request parameter
    # JSON text (for guided_decoding_guide, a json_schema guide's): its nesting is bounded (json_depth) before it is
    # parsed; the tests send every such row nested past the bound.
    json: bool = False
    names: tuple[str, ...] = field(init=False)  # name, then the aliases

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", (self.name, *self.aliases))


MAX_DRAFT_TOKENS = 16
MAX_TOP_LOGPROBS = 20  # OpenAI's
_PENALTY_RANGE = (-2.0, 2.0)  # OpenAI's, which vLLM keeps too

# Rows that set an option come first, in the order their errors are found.
FIELDS = (
    RequestField("max_tokens", "INT32", "max_new_tokens", vllm="max_tokens"),
    RequestField("temperature", "FP32", "temperature", vllm="temperature"),
    RequestField("top_p", "FP32", "top_p", vllm="top_p"),
    RequestField("top_k", "INT32", "top_k", vllm="top_k", openai={"ge": -1}),  # vLLM's -1 is off, as our 0
    RequestField("min_p", "FP32", "min_p", vllm="min_p", openai={"ge": 0.0, "le": 1.0}),
    RequestField("repetition_penalty", "FP32", "repetition_penalty", vllm="repetition_penalty", openai={"gt": 0.0}),
    RequestField("frequency_penalty", "FP32", "frequency_penalty", vllm="frequency_penalty", wire_range=_PENALTY_RANGE),
    RequestField("presence_penalty", "FP32", "presence_penalty", vllm="presence_penalty", wire_range=_PENALTY_RANGE),
    RequestField("min_length", "INT32", "min_length", ("min_tokens",), vllm="min_tokens", openai={"ge": 0}),
    RequestField("seed", "UINT64", "seed", ("random_seed",), vllm="seed"),
    RequestField("end_id", "INT32", "eos_token_id"),
    RequestField("ignore_eos", "BOOL", "stop_on_eos", vllm="ignore_eos", openai={}),  # sets stop_on_eos to not it
    RequestField("skip_special_tokens", "BOOL", "skip_special_tokens", vllm="skip_special_tokens", tensor=False),
    RequestField("include_stop_str_in_output", "BOOL", "include_stop_str_in_output",
                 vllm="include_stop_str_in_output", tensor=False),
    RequestField("top_logprobs", "INT32", "top_logprobs", ("logprobs",), vllm="logprobs",
                 wire_range=(0, MAX_TOP_LOGPROBS)),
    RequestField("num_draft_tokens", "INT32", "num_speculative_tokens", wire_range=(1, MAX_DRAFT_TOKENS)),
    RequestField("speculative", "STRING", "speculative_mode", json=True),
    # The prompt (exactly one of the three), the stops and the vLLM-style JSON: tensors only.
    RequestField("text_input", "STRING", parameter=False),
    RequestField("input_ids", "INT64", parameter=False),
    RequestField("messages", "STRING", parameter=False, json=True),
    RequestField("stop_words", "STRING", parameter=False),
    RequestField("sampling_parameters", "STRING", parameter=False, json=True),
    RequestField("tools", "STRING", json=True),
    RequestField("chat_template_kwargs", "STRING", json=True),
    RequestField("stream", "BOOL"),
    RequestField("stream_interval", "INT32"),
    RequestField("exclude_input_in_output", "BOOL"),
    RequestField("return_log_probs", "BOOL"),
    RequestField("priority", "STRING"),
    RequestField("session_id", "STRING"),
    RequestField("end_session", "BOOL"),
    RequestField("guided_decoding_guide_type", "STRING"),
    RequestField("guided_decoding_guide", "STRING", json=True),
    # The vLLM backend's flags: each asks for one output beside text_output.
    RequestField("return_finish_reason", "BOOL"),
    RequestField("return_cumulative_logprob", "BOOL"),
    RequestField("return_logprobs", "BOOL"),
    RequestField("return_num_input_tokens", "BOOL"),
    RequestField("return_num_output_tokens", "BOOL"),
)
BY_NAME = {row.name: row for row in FIELDS}
# The generator's input tensors -> dtype as Triton's clients name it (config.pbtxt's STRING is BYTES on the wire).
CLIENT_DTYPES = {row.name: "BYTES" if row.dtype == "STRING" else row.dtype for row in FIELDS if row.tensor}
