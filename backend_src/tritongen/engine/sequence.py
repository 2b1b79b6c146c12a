"""One request's state inside the engine: tokens, KV placement, decoding helpers, timings."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np

from ..kv.connector import KvCacheKey
from ..kv.prefix_cache import Node
from ..runtime.tokenizer import IncrementalDetokenizer
from .options import FinishReason, GenerateResult, GenerateToken, Priority, RequestTiming, TokenLogprob
from .sampling import RequestSampler
from .stopping import StopChecker

if TYPE_CHECKING:
    from llguidance import LLMatcher

    from ..speculative.modes import SpeculativeMode
    from ..speculative.proposer import Proposer

TokenCallback = Callable[[GenerateToken], None]
DoneCallback = Callable[[Optional[GenerateResult], Optional[BaseException]], None]


class Status(Enum):
    SCHEDULED = "scheduled"  # waits for its arrival step
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request_id: int
    prompt_ids: list[int]
    priority: Priority
    arrival: int  # admission order within a priority (FCFS)
    sampler: RequestSampler
    stopper: StopChecker
    detok: IncrementalDetokenizer
    on_token: TokenCallback | None
    on_done: DoneCallback | None
    session_id: str | None = None
    end_session: bool = False
    arrival_step: int = 0
    tokens: list[int] = field(default_factory=list)
    num_computed: int = 0  # leading tokens whose KV is in the slot
    pages: list[int] = field(default_factory=list)  # page table covering the computed tokens
    num_cached_pages: int = 0  # leading pages registered in the prefix cache
    cache_node: Node | None = None
    slot: int | None = None
    status: Status = Status.WAITING
    prefix_hit_len: int = 0
    logprobs: list[TokenLogprob] | None = None
    matcher: LLMatcher | None = None  # set when the request is constrained
    proposer: Proposer | None = None  # None when not speculating
    spec_mode: SpeculativeMode | None = None
    spec_k: int = 0
    drafted: int = 0
    accepted: int = 0
    hidden: dict = field(default_factory=dict)  # target hidden states at the last computed token
    chunk_keys: list[KvCacheKey] | None = None  # KV connector keys of the prompt's complete chunks
    chunks_stored: int = 0  # leading prompt chunks the connector already holds
    num_preemptions: int = 0
    cancel_requested: bool = False
    callback_error: Exception | None = None  # the caller's token callback raised: the next step ends it
    created_at: float = field(default_factory=time.monotonic)
    waiting_since: float = field(default_factory=time.monotonic)  # last entry into the queue
    waited: float = 0.0  # seconds spent in the queue before the current wait (priority aging)
    admitted_at: float | None = None
    first_token_at: float | None = None
    first_token_step: int | None = None
    token_times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt_ids)

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - len(self.prompt_ids)

    @property
    def prefill_target(self) -> int:
        """Tokens whose KV must exist before the next decode: all but a sampled, unfed last token."""
        return len(self.tokens) - (1 if self.num_generated else 0)

    @property
    def is_decoding(self) -> bool:
        return self.num_generated > 0 and self.num_computed == len(self.tokens) - 1

    def result(self, reason: FinishReason) -> GenerateResult:
        return GenerateResult(
            text=self.stopper.text, token_ids=list(self.stopper.token_ids), finish_reason=reason,
            prefix_cache_hit_len=self.prefix_hit_len, logprobs=self.logprobs,
            num_prompt_tokens=len(self.prompt_ids), timing=self.timing(),
            total_draft_tokens=self.drafted, total_accepted_draft_tokens=self.accepted,
        )

    def timing(self) -> RequestTiming:
        now = time.monotonic()
        admitted = self.admitted_at if self.admitted_at is not None else now
        first = self.first_token_at if self.first_token_at is not None else now
        return RequestTiming(queue=admitted - self.created_at, first_token=first - self.created_at,
                             end_to_end=now - self.created_at, inter_token=np.diff(self.token_times).tolist())
