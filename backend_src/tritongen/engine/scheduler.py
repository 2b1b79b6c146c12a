"""Which sequences run in the next step: admission, priorities, preemption, the token budget.

Every step decodes one token for each running sequence that is past its
prompt, then spends what is left of `max_num_batched_tokens` on prompt
chunks, so running streams keep flowing while long prompts prefill.
Higher priority is admitted first; when slots or pages run out, a waiting
request of higher priority preempts the lowest-priority, newest running
sequence. Priority ages: each `priority_aging_seconds` a request has spent
in the queue lifts it one level, so a low request under a stream of high
ones still starts. A preempted sequence keeps its tokens and returns to the queue;
its full pages stay in the prefix cache, so re-admission copies back what
survived and recomputes only the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..kv.manager import KvManager
from .options import Priority, SchedulerConfig, SchedulingPolicy
from .sequence import Sequence, Status

if TYPE_CHECKING:
    from ..speculative.proposer import Proposer


@dataclass
class StepPlan:
    decode: list[Sequence] = field(default_factory=list)
    prefill: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, tokens this step)
    preempted: list[Sequence] = field(default_factory=list)
    # Alone in the batch and still no page: only if the pool were smaller than the context, which loading refuses.
    out_of_pages: list[Sequence] = field(default_factory=list)
    spare_tokens: int = 0  # budget left after decode rows and prompt chunks (a draft model's catch-up uses it)


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KvManager):
        config.validate()
        self.config = config
        self.kv = kv
        self.not_arrived: list[Sequence] = []  # submitted for a later step (ScheduledGenerateArrival)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []  # index == slot
        self.num_preemptions = 0
        self.failed_admissions = 0
        self.slot_listeners: list[Proposer] = []  # per-slot state beside the target's (speculative proposers)

    def _level(self, seq: Sequence, now: float) -> int:
        """Priority after aging: one level up per `priority_aging_seconds` spent waiting, at most high."""
        waited = seq.waited + (now - seq.waiting_since if seq.status == Status.WAITING else 0.0)
        return min(Priority.HIGH.value, seq.priority.value + int(waited // self.config.priority_aging_seconds))

    def _rank(self, seq: Sequence, now: float) -> tuple:
        """Sort key: first in line is smallest."""
        if self.config.policy == SchedulingPolicy.FCFS:
            return (seq.arrival,)
        return (-self._level(seq, now), seq.arrival)

    def add(self, seq: Sequence) -> None:
        if seq.status == Status.SCHEDULED:
            self.not_arrived.append(seq)
        else:
            self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def next_arrival_step(self) -> int | None:
        return min((s.arrival_step for s in self.not_arrived), default=None)

    def arrive(self, step: int) -> None:
        for seq in [s for s in self.not_arrived if s.arrival_step <= step]:
            self.not_arrived.remove(seq)
            seq.status, seq.waiting_since = Status.WAITING, time.monotonic()
            self.waiting.append(seq)

    # ---- admission and preemption ------------------------------------------

    def _victim(self, below: int | None, now: float) -> Sequence | None:
        """The lowest-priority, newest running sequence (strictly below level `below` when given)."""
        if self.config.policy == SchedulingPolicy.FCFS and below is not None:
            return None
        candidates = [s for s in self.running if below is None or self._level(s, now) < below]
        return max(candidates, key=lambda s: (-self._level(s, now), s.arrival), default=None)

    def preempt(self, seq: Sequence, plan: StepPlan) -> None:
        self.remove(seq, keep_session=False)
        seq.status, seq.waiting_since = Status.WAITING, time.monotonic()
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.append(seq)
        plan.preempted.append(seq)

    def remove(self, seq: Sequence, keep_session: bool) -> None:
        """Take a sequence out of the running batch; the last row moves into its slot."""
        slot = seq.slot
        assert slot is not None  # a running sequence's slot is its row in `running`
        self.kv.release(seq, keep_session)
        for listener in self.slot_listeners:
            listener.release(slot)
        last = self.running.pop()
        if last is not seq:
            assert last.slot is not None  # running too
            self.kv.slots.move(last.slot, slot, last.num_computed)
            for listener in self.slot_listeners:
                listener.move(last.slot, slot, last.num_computed)
            last.slot = slot
            self.running[slot] = last
        seq.slot = None

    def _admit(self, plan: StepPlan, now: float) -> None:
        self.waiting.sort(key=lambda s: self._rank(s, now))
        while self.waiting:
            seq = self.waiting[0]
            fits = len(self.running) < self.config.max_num_seqs and self.kv.can_admit(seq)
            if not fits:
                victim = self._victim(self._level(seq, now), now)
                if victim is None:
                    break
                self.preempt(victim, plan)
                continue
            if not self.kv.admit(seq, len(self.running)):
                self.failed_admissions += 1  # can_admit was wrong; the request keeps its place
                break
            self.waiting.pop(0)
            seq.waited += now - seq.waiting_since
            seq.status = Status.RUNNING
            if seq.admitted_at is None:
                seq.admitted_at = now
            self.running.append(seq)

    def schedule(self, step: int) -> StepPlan:
        plan = StepPlan()
        now = time.monotonic()
        self.arrive(step)
        self._admit(plan, now)
        # Decode rows need a page for the token they add; when the pool is dry the newest,
        # lowest-priority sequence steps back (possibly the one asking).
        for seq in sorted(self.running, key=lambda s: self._rank(s, now)):
            if seq.status != Status.RUNNING or not seq.is_decoding:
                continue
            while not self.kv.reserve(seq, seq.num_computed + 1):
                victim = self._victim(None, now)
                assert victim is not None  # `seq` itself runs, so there is always one
                if victim is seq and len(self.running) == 1:
                    plan.out_of_pages.append(seq)
                    break
                self.preempt(victim, plan)
                if victim is seq:
                    break
        plan.decode = [s for s in self.running if s.is_decoding and s not in plan.out_of_pages]
        budget = self.config.max_num_batched_tokens - len(plan.decode)
        for seq in sorted(self.running, key=lambda s: self._rank(s, now)):
            if budget <= 0:
                break
            if not seq.is_decoding:
                n = min(seq.prefill_target - seq.num_computed, budget)
                plan.prefill.append((seq, n))
                budget -= n
        plan.spare_tokens = max(budget, 0)
        return plan
