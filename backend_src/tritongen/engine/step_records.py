"""What flows between the rooms of one step, one way: scheduler -> model runner -> scheduler -> output processor.

Plain data, so each room can be read (and tested) alone: the scheduler decides
and lists, the runner computes and reports, the scheduler's update is the one
writer of request state after a model call, the output processor tells the
callers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..kv.slot_ops import SlotOp
from .options import FinishReason, GenerateToken
from .sampling import TokenChoice
from .sequence import Sequence

Outcome = FinishReason | Exception  # how a request ended: a reason, or the error that failed it


@dataclass
class SchedulerOutput:
    step: int
    batch: list[Sequence]  # the running batch in slot order, for the runner to read (never to write)
    decode: list[int] = field(default_factory=list)  # request ids that decode one token (or verify drafts)
    prefill: list[tuple[int, int]] = field(default_factory=list)  # (request id, prompt tokens this step)
    speculate: dict[int, int] = field(default_factory=dict)  # request id -> draft tokens it may verify (paged)
    spare_tokens: int = 0  # budget left after decode rows and prompt chunks (a draft model's catch-up uses it)
    kv_ops: list[SlotOp] = field(default_factory=list)  # slot moves, releases and loads, performed first
    finished: list[tuple[Sequence, Outcome]] = field(default_factory=list)  # ended before the model ran


@dataclass
class RowOutput:
    """One request's part of a model call."""

    choices: list[TokenChoice] = field(default_factory=list)  # sampled tokens, in order (several when verified)
    computed: int = 0  # tokens whose KV the call made valid
    hidden: dict | None = None  # the target's hidden states a head reads, at the last position; None: unchanged
    drafted: int = 0
    accepted: int = 0


@dataclass
class RunnerOutput:
    rows: dict[int, RowOutput] = field(default_factory=dict)  # by request id
    failed: dict[int, Exception] = field(default_factory=dict)  # requests whose part of the step failed
    decoded_together: tuple[int, ...] = ()  # the request ids of the batched decode call

    def fail(self, request_id: int, error: Exception) -> None:
        """A request's part of the step failed: it ends with the first error, whatever it produced before."""
        self.failed.setdefault(request_id, error)
        self.rows.pop(request_id, None)


@dataclass
class StepUpdate:
    """What the scheduler's update decided, for the output processor to deliver."""

    tokens: list[tuple[Sequence, GenerateToken]] = field(default_factory=list)  # in the order they were taken
    finished: list[tuple[Sequence, Outcome]] = field(default_factory=list)
