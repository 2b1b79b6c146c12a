"""The public generation types, mirroring `onnx-genai-engine`'s config.rs.

Field names, defaults and validation messages follow onnx-genai-engine's config so a
user of the Rust engine finds the same knobs here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from pathlib import Path
from typing import ClassVar, Optional, Union

from ..errors import InvalidOption
from ..kv.codec import KV_DTYPES
from ..kv.connector_config import KvConnectorConfig
from ..kv.kv_events import KvEventsConfig
from ..speculative.modes import Eagle3Config, MtpConfig, SharedKvProposerConfig, SpeculativeMode

TokenId = int
# A stop sequence is either text or a run of token ids (onnx-genai-engine's StopSequence).
StopSequence = Union[str, tuple[int, ...]]
# onnx-genai-engine's GeneratePrompt: raw text or already-tokenized ids.
GeneratePrompt = Union[str, list[int]]


class Priority(Enum):
    LOW = 0
    NORMAL = 1
    HIGH = 2


CONSTRAINT_KINDS = ("json", "json_schema", "regex", "lark")


@dataclass(frozen=True)
class GenerateConstraint:
    """onnx-genai-engine's GenerateConstraint: Json (any value), JsonSchema, Regex or Lark."""

    kind: str
    text: str = ""  # schema, pattern or grammar; empty for "json"

    def __post_init__(self) -> None:
        if self.kind not in CONSTRAINT_KINDS:
            raise ValueError(f"constraint kind must be one of {', '.join(CONSTRAINT_KINDS)}, got {self.kind!r}")

    @staticmethod
    def choice(options: list[str]) -> "GenerateConstraint":
        """Exactly one of the given strings (vLLM's guided `choice`), as a Lark grammar."""
        if not isinstance(options, list) or not options or not all(isinstance(o, str) and o for o in options):
            raise ValueError("choice needs a non-empty list of non-empty strings")
        return GenerateConstraint("lark", "start: " + " | ".join(json.dumps(o) for o in options))


@dataclass
class GenerateOptions:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    greedy: bool = True
    seed: Optional[int] = None
    stop_sequences: list[StopSequence] = field(default_factory=list)
    eos_token_id: Optional[TokenId] = None
    stop_on_eos: bool = True
    max_context: Optional[int] = None
    top_logprobs: Optional[int] = None
    constraint: Optional[GenerateConstraint] = None
    num_speculative_tokens: Optional[int] = None
    speculative_mode: Optional[SpeculativeMode] = None
    # Ours, in addition to onnx-genai-engine: no EOS or stop before this many tokens.
    min_length: int = 0
    # Ours, as vLLM's SamplingParams: added to a token's logit before any filter; token id sequences never
    # generated (the last id of each is banned where the output ends with the rest); special tokens kept in
    # the text; a matched stop string kept at the end of the text.
    logit_bias: dict[TokenId, float] = field(default_factory=dict)
    bad_words_ids: list[tuple[TokenId, ...]] = field(default_factory=list)
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False

    def validate(self) -> None:
        """Raise InvalidOption, with onnx-genai-engine's message, for the first invalid field."""
        empty_stop = next((i for i, stop in enumerate(self.stop_sequences) if not len(stop)), None)
        for name, ok, message in (
            ("max_new_tokens", self.max_new_tokens > 0, "max_new_tokens must be greater than zero"),
            ("temperature", math.isfinite(self.temperature) and self.temperature >= 0.0,
             "temperature must be finite and non-negative"),
            ("top_p", math.isfinite(self.top_p) and self.top_p >= 0.0, "top_p must be finite and non-negative"),
            ("top_k", self.top_k >= 0, "top_k must be non-negative"),
            ("min_p", math.isfinite(self.min_p) and 0.0 <= self.min_p <= 1.0,
             "min_p must be finite and between 0 and 1"),
            ("repetition_penalty", math.isfinite(self.repetition_penalty) and self.repetition_penalty > 0.0,
             "repetition_penalty must be finite and greater than zero"),
            ("frequency_penalty", math.isfinite(self.frequency_penalty), "frequency_penalty must be finite"),
            ("presence_penalty", math.isfinite(self.presence_penalty), "presence_penalty must be finite"),
            ("max_context", self.max_context is None or self.max_context > 0,
             "max_context must be greater than zero when provided"),
            # Capped at 20 only where clients reach us (the Triton and OpenAI boundaries).
            ("top_logprobs", self.top_logprobs is None or self.top_logprobs >= 0, "top_logprobs must not be negative"),
            ("min_length", self.min_length >= 0, "min_length must be non-negative"),
            ("logit_bias", all(math.isfinite(b) for b in self.logit_bias.values()), "logit_bias values must be finite"),
            ("bad_words_ids", all(len(w) for w in self.bad_words_ids), "bad words must not be empty"),
            ("stop_sequences", empty_stop is None, f"stop sequence {empty_stop} must not be empty"),
            ("seed", self.seed is None or 0 <= self.seed < 2**64, "seed must be an unsigned 64-bit integer"),
            ("num_speculative_tokens", self.num_speculative_tokens is None or self.num_speculative_tokens > 0,
             "num_speculative_tokens must be greater than zero when provided"),
        ):
            if not ok:
                raise InvalidOption(name, message)
        if self.speculative_mode is not None:
            try:
                self.speculative_mode.validate()
            except ValueError as exc:
                raise InvalidOption("speculative_mode", str(exc)) from None


@dataclass
class GenerateRequest:
    prompt: GeneratePrompt
    options: GenerateOptions = field(default_factory=GenerateOptions)


@dataclass(frozen=True)
class FinishReason:
    """Why generation stopped; str() gives the wire spelling (`stop_sequence:N`)."""

    kind: str
    index: Optional[int] = None
    # The fixed reasons, assigned below the class (instances cannot be built inside its body).
    MAX_TOKENS: ClassVar[FinishReason]
    EOS_TOKEN: ClassVar[FinishReason]
    LENGTH: ClassVar[FinishReason]
    CANCELLED: ClassVar[FinishReason]

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @staticmethod
    def stop_sequence(index: int) -> "FinishReason":
        return FinishReason("stop_sequence", index)


FinishReason.MAX_TOKENS = FinishReason("max_tokens")
FinishReason.EOS_TOKEN = FinishReason("eos_token")
FinishReason.LENGTH = FinishReason("length")
FinishReason.CANCELLED = FinishReason("cancelled")


@dataclass
class TokenLogprob:
    token_id: TokenId
    logprob: float
    top: list[tuple[TokenId, float]]
    rank: int = 1  # ours: 1 + how many tokens were more likely than the chosen one (vLLM's `rank`)


@dataclass
class GenerateToken:
    """One streamed token; `text` is the newly releasable text (may be empty)."""

    token_id: TokenId
    text: str
    finish_reason: Optional[FinishReason] = None
    logprob: Optional[TokenLogprob] = None


@dataclass
class RequestTiming:
    """Ours, beyond onnx-genai-engine: what the metrics and benchmarks need, in seconds."""

    queue: float = 0.0  # submission to first admission into the running batch
    first_token: float = 0.0  # submission to first generated token
    end_to_end: float = 0.0
    inter_token: list[float] = field(default_factory=list)


@dataclass
class GenerateResult:
    text: str
    token_ids: list[TokenId]
    finish_reason: FinishReason
    prefix_cache_hit_len: int = 0
    logprobs: Optional[list[TokenLogprob]] = None
    num_prompt_tokens: int = 0
    timing: RequestTiming = field(default_factory=RequestTiming)
    total_draft_tokens: int = 0  # speculative statistics, TensorRT-LLM's names
    total_accepted_draft_tokens: int = 0


class SchedulingPolicy(StrEnum):
    PRIORITY = "priority"  # higher priority first, aging lifts the long-waiting; may preempt
    FCFS = "fcfs"  # arrival order, never preempts for a later arrival


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 16
    # Tokens per step: one per decoding sequence, the rest for prompt chunks.
    max_num_batched_tokens: int = 256
    policy: SchedulingPolicy | str = SchedulingPolicy.PRIORITY  # a str is checked and converted by validate()
    # Ours: a request moves up one priority level for each this many seconds it has waited in the queue
    # (low ranks as normal after it, as high after twice it), so none waits behind later arrivals forever.
    priority_aging_seconds: float = 30.0

    def validate(self) -> None:
        if self.max_num_seqs <= 0:
            raise ValueError("max_num_seqs must be greater than zero")
        if self.max_num_batched_tokens <= 0:
            raise ValueError("max_num_batched_tokens must be greater than zero")
        if self.policy not in tuple(SchedulingPolicy):
            raise ValueError(f"scheduler policy must be 'priority' or 'fcfs', got {self.policy!r}")
        self.policy = SchedulingPolicy(self.policy)
        if not self.priority_aging_seconds > 0:
            raise ValueError("priority_aging_seconds must be greater than zero")


@dataclass
class EngineConfig:
    num_gpu_pages: int = 1024
    page_size: int = 16
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    # Longest sequence a slot holds (prompt + generated); capped by the model's context.
    max_model_len: int = 2048
    # Storage dtype of the page store (f32, f16, int8, fp8_e4m3fn, fp8_e5m2); the running batch stays f32.
    kv_cache_dtype: str = "f32"
    # External KV store for prompt chunks (onnx-genai-engine's KvConnectorConfig); the default, null, stores nothing.
    kv_connector: KvConnectorConfig = field(default_factory=KvConnectorConfig)
    # Ours (vLLM's KVEventsConfig): the prefix cache's page events, for KV-aware routers; off by default.
    kv_events: KvEventsConfig = field(default_factory=KvEventsConfig)
    # Requests allowed to wait for admission; beyond it, submit fails fast with "overloaded".
    max_queue_len: int = 256
    # Ours: which graph of an onnx-community hub folder (onnx/model_<variant>.onnx; "" for onnx/model.onnx).
    model_variant: str = ""
    # Ours: session pins (a finished turn's KV kept for the next). Each keeps at most this many pages
    # (None: a full context's), all together at most this many (None: half the pool; the least recently
    # used go first), and a pin unused this long is released.
    max_session_pages: Optional[int] = None
    max_pinned_pages: Optional[int] = None
    session_idle_seconds: float = 300.0
    intra_op_threads: int = 0
    # The engine thread on the first CPU it may use, onnxruntime's workers each on one of the next
    # (cpu_threads.py: why). Off when several engines share the same CPUs.
    pin_threads: bool = True
    # onnxruntime execution providers in order of preference; empty: CUDA if available, else CPU.
    execution_providers: list[str] = field(default_factory=list)
    # Ours: on CUDA without CuPy the slot KV could only be host memory, copied to the GPU and back every step;
    # such an engine refuses to load unless this allows it (array_module.py).
    allow_host_kv: bool = False
    # Speculative decoding: the default mode, K, and what each model-based mode needs.
    speculative_mode: SpeculativeMode = field(default_factory=SpeculativeMode)
    num_speculative_tokens: int = 4
    # Ours (vLLM's name): a step whose decoding batch has more rows than this decodes every row plainly: each
    # speculating row is verified in a call of its own, so above two rows speculation costs more than it saves
    # (bench/speculative_batches.py: prompt lookup 1.73x at 1 row, 1.28x at 2, 0.94x at 4); 0: never.
    speculative_disable_by_batch_size: int = 2
    draft_model: Optional[Path] = None  # a decoder folder with the target's vocabulary
    mtp: Optional[MtpConfig] = None
    eagle3: Optional[Eagle3Config] = None
    shared_kv: Optional[SharedKvProposerConfig] = None

    def validate(self) -> None:
        if self.num_speculative_tokens <= 0:
            raise ValueError("num_speculative_tokens must be greater than zero")
        if self.speculative_disable_by_batch_size < 0:
            raise ValueError("speculative_disable_by_batch_size must not be negative")
        self.speculative_mode.validate()
        for head in (self.mtp, self.eagle3, self.shared_kv):
            if head is not None:
                head.validate()
        if self.num_gpu_pages <= 0:
            raise ValueError("num_gpu_pages must be greater than zero")
        if self.page_size <= 0:
            raise ValueError("page_size must be greater than zero")
        if self.kv_cache_dtype not in KV_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_DTYPES)}, got {self.kv_cache_dtype!r}")
        self.kv_connector.validate(self.page_size)
        self.kv_events.validate()
        if self.max_queue_len <= 0:
            raise ValueError("max_queue_len must be greater than zero")
        for name in ("max_session_pages", "max_pinned_pages"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not self.session_idle_seconds > 0:
            raise ValueError("session_idle_seconds must be greater than zero")
        if self.max_model_len <= 1:
            raise ValueError("max_model_len must be greater than one")
        self.scheduler.validate()


@dataclass
class PrioritizedGenerateRequest:
    request: GenerateRequest
    priority: Priority = Priority.NORMAL
    session_id: Optional[str] = None


@dataclass
class ScheduledGenerateArrival:
    """A request the engine sees only once it has run `arrival_step` steps (deterministic scheduler tests)."""

    arrival_step: int
    request: PrioritizedGenerateRequest


@dataclass
class PrioritizedGenerateResult:
    session_id: Optional[str]
    result: GenerateResult
