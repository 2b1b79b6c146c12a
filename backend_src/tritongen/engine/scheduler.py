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

`schedule` decides and lists (the KV copies its decisions imply are slot
operations for the model runner to perform); `update_from_output` is the one
writer of request state after a model call: tokens, computed positions, page
commits, stop checks, frees.
"""

from __future__ import annotations

import time

from ..kv.manager import KvManager
from .options import FinishReason, GenerateToken, Priority, SchedulerConfig, SchedulingPolicy
from .sequence import Sequence, Status
from .step_records import Outcome, RowOutput, RunnerOutput, SchedulerOutput, StepUpdate


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KvManager, speculative_disable_by_batch_size: int = 0):
        config.validate()
        self.config = config
        self.kv = kv
        self.speculation_limit = speculative_disable_by_batch_size  # 0: no limit
        self.not_arrived: list[Sequence] = []  # submitted for a later step (ScheduledGenerateArrival)
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []  # index == slot
        self.num_preemptions = 0
        self.failed_admissions = 0
        self.empty_steps = 0  # steps that ran nothing while requests waited (stays 0: no spinning)

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

    def preempt(self, seq: Sequence) -> None:
        self.remove(seq, keep_session=False)
        seq.status, seq.waiting_since = Status.WAITING, time.monotonic()
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.append(seq)

    def remove(self, seq: Sequence, keep_session: bool) -> None:
        """Take a sequence out of the running batch; the last row moves into its slot (a listed copy)."""
        slot = seq.slot
        assert slot is not None  # a running sequence's slot is its row in `running`
        self.kv.release(seq, keep_session)
        last = self.running.pop()
        if last is seq:
            self.kv.vacate(slot, None, 0)
        else:
            assert last.slot is not None  # running too
            self.kv.vacate(slot, last.slot, last.num_computed)
            last.slot = slot
            self.running[slot] = last
        seq.slot = None

    def end(self, seq: Sequence, outcome: Outcome, ended: list[tuple[Sequence, Outcome]]) -> None:
        """Finish a request wherever it is (running, waiting, not yet arrived); a finished one stays as it ended."""
        if seq.status == Status.FINISHED:
            return
        if seq.status == Status.RUNNING:
            keep = (seq.session_id is not None and not seq.end_session and isinstance(outcome, FinishReason)
                    and outcome != FinishReason.CANCELLED)  # a cancelled turn does not extend its session
            self.remove(seq, keep_session=keep)
        else:
            (self.waiting if seq in self.waiting else self.not_arrived).remove(seq)
            if seq.session_id and seq.end_session:
                self.kv.close_session(seq.session_id)
        seq.status = Status.FINISHED
        ended.append((seq, outcome))

    def _admit(self, now: float) -> None:
        self.waiting.sort(key=lambda s: self._rank(s, now))
        while self.waiting:
            seq = self.waiting[0]
            fits = len(self.running) < self.config.max_num_seqs and self.kv.can_admit(seq)
            if not fits:
                victim = self._victim(self._level(seq, now), now)
                if victim is None:
                    break
                self.preempt(victim)
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

    # ---- one step -------------------------------------------------------------

    def schedule(self, step: int) -> SchedulerOutput:
        """Who runs this step and with what budget; the KV copies that implies are listed, not done."""
        ended: list[tuple[Sequence, Outcome]] = []
        for seq in [s for s in self.running + self.waiting + self.not_arrived
                    if s.cancel_requested or s.callback_error is not None]:
            self.end(seq, seq.callback_error or FinishReason.CANCELLED, ended)
        now = time.monotonic()
        self.arrive(step)
        self._admit(now)
        for seq in self._reserve_decode_pages(now):
            self.end(seq, RuntimeError("the KV page pool has no page left for this sequence"), ended)
        decode = [s for s in self.running if s.is_decoding]
        budget = self.config.max_num_batched_tokens - len(decode)
        prefill = []
        for seq in sorted(self.running, key=lambda s: self._rank(s, now)):
            if budget <= 0:
                break
            if not seq.is_decoding:
                n = min(seq.prefill_target - seq.num_computed, budget)
                prefill.append((seq.request_id, n))
                budget -= n
        if not (decode or prefill) and self.waiting:
            self.empty_steps += 1  # requests wait and nothing ran: admission is stuck
        return SchedulerOutput(step, list(self.running), [s.request_id for s in decode], prefill,
                               self._speculation(decode), max(budget, 0), self.kv.take_ops(), ended)

    def _reserve_decode_pages(self, now: float) -> list[Sequence]:
        """Decode rows need a page for the token they add; when the pool is dry the newest, lowest-priority
        sequence steps back (possibly the one asking). Returns the rows alone in the batch that still found
        none (only if the pool were smaller than the context, which loading refuses)."""
        stuck = []
        for seq in sorted(self.running, key=lambda s: self._rank(s, now)):
            if seq.status != Status.RUNNING or not seq.is_decoding:
                continue
            while not self.kv.reserve(seq, seq.num_computed + 1):
                victim = self._victim(None, now)
                assert victim is not None  # `seq` itself runs, so there is always one
                if victim is seq and len(self.running) == 1:
                    stuck.append(seq)
                    break
                self.preempt(victim)
                if victim is seq:
                    break
        return stuck

    def _speculation(self, decode: list[Sequence]) -> dict[int, int]:
        """Draft tokens each speculating row may have verified, with pages reserved for them. Above the batch
        size where speculation stops paying, none (every row decodes plainly; proposers' inputs stay current)."""
        if self.speculation_limit and len(decode) > self.speculation_limit:
            return {}
        rooms = {}
        for seq in decode:
            if seq.proposer is None:
                continue
            room = min(seq.spec_k, seq.stopper.options.max_new_tokens - seq.num_generated - 1,
                       seq.stopper.context_limit - len(seq.tokens) - 1)
            if room > 0 and not self.kv.reserve(seq, seq.num_computed + 1 + room):
                room = len(seq.pages) * self.kv.page_size - seq.num_computed - 1  # what the pages found cover
            if room > 0:
                rooms[seq.request_id] = room
        return rooms

    def update_from_output(self, plan: SchedulerOutput, output: RunnerOutput) -> StepUpdate:
        """Take what the model call produced into each request: its tokens (up to a stop, also inside accepted
        speculative tokens), computed positions, page commits; free the requests that ended.

        Stop strings are matched here too, on the detokenized text: only the writer of a request's tokens can
        cut them at a stop that ends inside a run of accepted draft tokens.
        """
        update = StepUpdate(finished=list(plan.finished))
        by_id = {s.request_id: s for s in plan.batch}
        ended: list[tuple[Sequence, Outcome]] = [(by_id[i], error) for i, error in output.failed.items()]
        for request_id, row in output.rows.items():
            outcome = self._take(by_id[request_id], row, plan.step, update)
            if outcome is not None:
                ended.append((by_id[request_id], outcome))
        for seq, outcome in ended:
            self.end(seq, outcome, update.finished)
        self.kv.apply(self.kv.take_ops())  # the commits and frees of this step, before callers hear of them
        return update

    def _take(self, seq: Sequence, row: RowOutput, step: int, update: StepUpdate) -> Outcome | None:
        """One request's tokens of this step; returns how it ended, if it did."""
        if row.hidden is not None:
            seq.hidden = row.hidden
        outcome: Outcome | None = None
        kept = 0
        for choice in row.choices:
            token = choice.token_id
            if seq.matcher is not None and not seq.matcher.consume_token(token):
                outcome = RuntimeError(f"constraint rejected token {token}: {seq.matcher.get_error()}")
                break
            kept += 1
            reason = self._append(seq, choice, step, update)
            if reason is not None:
                outcome = reason
                break
        rejected = isinstance(outcome, Exception)  # the rejected token's input was computed all the same
        seq.num_computed += row.computed - (len(row.choices) - kept - rejected)
        seq.drafted += row.drafted
        seq.accepted += min(row.accepted, max(kept - 1, 0)) if outcome is not None else row.accepted
        self.kv.commit_full_pages(seq)
        return outcome

    @staticmethod
    def _append(seq: Sequence, choice, step: int, update: StepUpdate) -> FinishReason | None:
        token = choice.token_id
        seq.tokens.append(token)
        now = time.monotonic()
        if seq.first_token_at is None:
            seq.first_token_at, seq.first_token_step = now, step
        seq.token_times.append(now)
        text, reason = seq.stopper.add(token, seq.detok.add(token))
        complete = seq.matcher is not None and seq.matcher.is_stopped()
        if reason is None and complete and token in seq.stopper.eos_token_ids:
            reason = FinishReason.EOS_TOKEN  # the constraint is complete: min_length cannot ask for more
        if seq.logprobs is not None:
            # The list exists only when the request asked for top_logprobs, and then its sampler reports them.
            assert choice.logprob is not None
            seq.logprobs.append(choice.logprob)
        update.tokens.append((seq, GenerateToken(token, text, reason, choice.logprob)))
        return reason
