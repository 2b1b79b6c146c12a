"""The step loop and the in-process generate / stream API.

One engine thread owns the model, the slot KV and the page pool. Each step
decodes one token for every running sequence in one batched call and
spends the rest of the token budget on prompt chunks (batch-1 calls into
the sequence's own slot). A step is four calls, each handing plain data to
the next: the scheduler decides, the model runner computes, the scheduler's
update writes the results into the requests, the output processor tells the
callers. Callers submit from any thread and receive tokens through callbacks
run on the engine thread; a callback that raises aborts its own request only.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..errors import EngineOverloaded, EngineStopped, SessionBusy
from ..kv.codec import codec
from ..kv.event_publisher import ZmqEventPublisher
from ..kv.page_pool import PagePool
from ..runtime.array_module import placement
from ..runtime.cpu_threads import pin_calling_thread
from ..runtime.model_folder import locate
from ..runtime.open_decoder import open_slot_decoder
from ..runtime.tokenizer import IncrementalDetokenizer, TextTokenizer
from ..speculative.modes import SpeculativeMode
from ..speculative.proposer import Proposer
from .constraints import ConstraintCompiler, MaskComputer
from .kv_assembly import assemble_kv
from .memory_budget import check_kv_fits
from .model_runner import ModelRunner
from .options import (
    EngineConfig,
    GenerateOptions,
    GenerateRequest,
    GenerateResult,
    GenerateToken,
    PrioritizedGenerateResult,
    Priority,
    ScheduledGenerateArrival,
)
from .output_processor import OutputProcessor, deliver_done
from .request_checks import check_request
from .sampling import RequestSampler
from .scheduler import Scheduler
from .sequence import DoneCallback, Sequence, Status, TokenCallback
from .snapshot import EngineSnapshot
from .speculation import Speculation
from .step_records import RunnerOutput, SchedulerOutput
from .stopping import StopChecker

if TYPE_CHECKING:
    from llguidance import LLMatcher


@dataclass
class RequestHandle:
    request_id: int
    prompt_ids: list[int]
    _seq: Sequence = field(repr=False)

    def cancel(self) -> None:
        self._seq.cancel_requested = True

    # The request's statistics so far (GenerateResult's names); plain ints, readable from any thread.
    prefix_cache_hit_len = property(lambda self: self._seq.prefix_hit_len)
    total_draft_tokens = property(lambda self: self._seq.drafted)
    total_accepted_draft_tokens = property(lambda self: self._seq.accepted)


@dataclass(frozen=True)
class PreparedRequest:
    """A request that passed every check (Engine.prepare), ready to submit."""

    prompt_ids: list[int]
    options: GenerateOptions
    context_limit: int
    matcher: LLMatcher | None  # for a constrained request
    proposer: Proposer | None
    spec_mode: SpeculativeMode | None
    spec_k: int


@dataclass
class EngineStats:
    steps: int = 0
    decode_steps: int = 0
    preemptions: int = 0
    empty_steps: int = 0  # steps that ran nothing while requests waited (stays 0: no spinning)
    verify_calls: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0


class Engine:
    def __init__(self, model_folder: Path, config: EngineConfig | None = None):
        self.config = config or EngineConfig()
        self.config.validate()
        self.files = locate(Path(model_folder), self.config.model_variant)
        self.tokenizer = TextTokenizer(self.files.folder)
        # The model's declared context caps the operator's max_model_len; a model that declares none gets it.
        self.max_len = min(self.config.max_model_len, self.files.context_length or self.config.max_model_len)
        pool_tokens = self.config.num_gpu_pages * self.config.page_size
        if pool_tokens < self.max_len:
            raise ValueError(f"num_gpu_pages x page_size = {self.config.num_gpu_pages} x {self.config.page_size} = "
                             f"{pool_tokens} tokens, below max_model_len {self.max_len}: a sequence of full length "
                             "would never fit; raise num_gpu_pages or lower max_model_len")
        self.decoder = open_slot_decoder(self.files, self.config.scheduler.max_num_seqs, self.max_len,
                                         self.config.intra_op_threads, self.config.execution_providers or None,
                                         self.config.pin_threads, self.tokenizer.vocab_size, self.config.allow_host_kv)
        self.kv_device = self.decoder.arrays.device  # "cuda" or "cpu": where the running batch's KV lives
        self.kv_line = f"{placement(self.decoder.arrays)}, onnxruntime on {self.decoder.providers[0]}"
        shape = self.decoder.shape
        self.vocab_size = shape.vocab_size
        values_per_token = shape.num_layers * 2 * shape.num_kv_heads * shape.head_dim
        self.memory_line = check_kv_fits(
            int(self.config.num_gpu_pages * self.config.page_size * values_per_token
                * codec(self.config.kv_cache_dtype).bytes_per_value(shape.head_dim)),
            self.decoder.bytes_per_token() * self.config.scheduler.max_num_seqs * self.max_len)
        self.pool = PagePool(self.config.num_gpu_pages, self.config.page_size, shape.num_layers,
                             shape.num_kv_heads, shape.head_dim, self.config.kv_cache_dtype)
        self.kv, self.connector = assemble_kv(self.config, self.files, self.decoder, self.pool, self.max_len)
        self.scheduler = Scheduler(self.config.scheduler, self.kv, self.config.speculative_disable_by_batch_size)
        self.speculation = Speculation(self.config, self.decoder, self.max_len, self.vocab_size)
        self.kv.slot_listeners = list(self.speculation.slot_listeners)
        self.stats = EngineStats()
        self.on_step = lambda engine: None  # metrics hook, called on the engine thread after each step
        self.on_death = lambda error: None  # called once if the engine thread dies (the server reports unhealthy)
        # Called on the engine thread after each step with its scheduler and runner outputs, for drivers and
        # observers; one that raises stops the engine thread, which is reported as its death.
        self.step_listeners: list[Callable[[SchedulerOutput, RunnerOutput], None]] = []
        self._ids = itertools.count(1)
        self._arrivals = itertools.count()
        self._inbox: deque[Sequence] = deque()
        self._live: dict[int, Sequence] = {}  # every submitted, unfinished sequence
        self._commands: deque = deque()
        self._sessions_in_flight: set[str] = set()
        self._wake = threading.Condition()
        self._closing = False
        self._stopped = False  # the engine thread has taken its last requests: submit refuses
        self.error: BaseException | None = None
        self._compiler: ConstraintCompiler | None = None
        self.masks = MaskComputer(self.vocab_size)
        self.runner = ModelRunner(self.decoder, self.kv, self.masks, self.vocab_size, self.stats)
        self.output = OutputProcessor(self._forget)
        try:  # bound last: nothing after it can fail and leave its sockets open
            self.kv_events = ZmqEventPublisher(self.config.kv_events) if self.config.kv_events.enabled else None
        except ValueError:
            self.connector.close()
            raise
        if self.kv_events is not None:  # the connector's tiers announce their pages on the same stream
            publisher = self.kv_events
            self.connector.on_event = lambda event: publisher.publish([event])
        self._thread = threading.Thread(target=self._run, name="tritongen-engine", daemon=True)
        self._thread.start()

    # ---- public API -------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    @property
    def steps(self) -> int:
        return self.stats.steps

    def snapshot(self) -> EngineSnapshot:
        """Read on the engine thread (between steps) or by an observer that tolerates a torn read."""
        waiting = self.scheduler.waiting
        stats = self.stats
        return EngineSnapshot(
            running=len(self.scheduler.running),
            waiting=sum(1 for s in waiting if s.num_preemptions == 0),
            swapped=sum(1 for s in waiting if s.num_preemptions > 0),
            pages_used=self.pool.num_used(), pages_free=self.pool.num_available(),
            mask_seconds=self.masks.seconds, drafted_tokens=stats.drafted_tokens,
            accepted_tokens=stats.accepted_tokens, verify_calls=stats.verify_calls,
            connector=dict(self.kv.connector_stats))

    def context_limit(self, request: GenerateRequest) -> int:
        limit = self.max_len
        if request.options.max_context is not None:
            limit = min(limit, request.options.max_context)
        return limit

    def prepare(self, request: GenerateRequest) -> PreparedRequest:
        """Every check of a request, in one place (request_checks); raises InvalidOption."""
        ids, limit, matcher = check_request(request, self.tokenizer, self.vocab_size, self.context_limit(request),
                                            self.constraint_compiler)
        proposer, spec_mode, spec_k = self.speculation.for_request(request.options)
        return PreparedRequest(ids, request.options, limit, matcher, proposer, spec_mode, spec_k)

    def submit(self, request: GenerateRequest | PreparedRequest, on_token: TokenCallback | None = None,
               on_done: DoneCallback | None = None, priority: Priority = Priority.NORMAL,
               session_id: str | None = None, end_session: bool = False,
               arrival_step: int | None = None) -> RequestHandle:
        """Queue a request; one already prepared (`prepare`) is not checked again."""
        if not self.alive:
            raise EngineStopped("engine is not running") from self.error  # the cause: engine.error, not the wire
        prepared = request if isinstance(request, PreparedRequest) else self.prepare(request)
        ids, options = prepared.prompt_ids, prepared.options
        eos = (options.eos_token_id,) if options.eos_token_id is not None else self.tokenizer.eos_token_ids
        seq = Sequence(
            request_id=next(self._ids), prompt_ids=ids, priority=priority, arrival=next(self._arrivals),
            sampler=RequestSampler(options, ids, self.vocab_size, eos if options.stop_on_eos else ()),
            stopper=StopChecker(options, eos, len(ids), prepared.context_limit),
            detok=IncrementalDetokenizer(self.tokenizer, ids, options.skip_special_tokens), on_token=on_token,
            on_done=on_done,
            session_id=session_id, end_session=end_session,
            logprobs=[] if options.top_logprobs is not None else None, matcher=prepared.matcher,
            proposer=prepared.proposer, spec_mode=prepared.spec_mode, spec_k=prepared.spec_k,
        )
        if arrival_step is not None:
            seq.status, seq.arrival_step = Status.SCHEDULED, arrival_step
        with self._wake:
            if self._stopped:  # checked under the lock the engine thread ends under: no request is left unanswered
                raise EngineStopped("engine is not running") from self.error  # the cause: engine.error, not the wire
            # Not yet admitted, beyond what the free batch slots take at the next step.
            free_slots = self.config.scheduler.max_num_seqs - len(self.scheduler.running)
            waiting = len(self._live) - len(self.scheduler.running) - max(free_slots, 0)
            if waiting >= self.config.max_queue_len:
                raise EngineOverloaded(f"overloaded: {waiting} requests are already waiting "
                                       f"(max_queue_len {self.config.max_queue_len}); retry later")
            if session_id is not None:
                if session_id in self._sessions_in_flight:
                    raise SessionBusy(f"session {session_id!r} already has a request in flight")
                self._sessions_in_flight.add(session_id)
            self._inbox.append(seq)
            self._live[seq.request_id] = seq
            self._wake.notify()
        return RequestHandle(seq.request_id, ids, seq)

    def constraint_compiler(self) -> ConstraintCompiler:
        """Built on first use: the llguidance tokenizer bridge takes about half a second."""
        with self._wake:
            if self._compiler is None:
                self._compiler = ConstraintCompiler(self.tokenizer.json_text, self.vocab_size,
                                                    self.tokenizer.eos_token_id)
            return self._compiler

    def generate(self, request: GenerateRequest, **kwargs) -> GenerateResult:
        done: queue.Queue = queue.Queue()
        self.submit(request, on_done=lambda result, error: done.put((result, error)), **kwargs)
        result, error = done.get()
        if error is not None:
            raise error
        return result

    def generate_scheduled(self, arrivals: list[ScheduledGenerateArrival]) -> list[PrioritizedGenerateResult]:
        """onnx-genai-engine's scheduled run: each request becomes visible once the engine has run its
        `arrival_step` steps from now (steps with nothing to run are skipped); results in the order given."""
        done: queue.Queue = queue.Queue()
        with self._wake:  # all queued before the engine thread looks: else the first would start alone
            base = self.steps
            for index, arrival in enumerate(arrivals):
                r = arrival.request
                self.submit(r.request, priority=r.priority, session_id=r.session_id,
                            arrival_step=base + arrival.arrival_step,
                            on_done=partial(_put_indexed, done, index))
        results: list = [None] * len(arrivals)
        for _ in arrivals:
            index, result, error = done.get()
            if error is not None:
                raise error
            results[index] = PrioritizedGenerateResult(arrivals[index].request.session_id, result)
        return results

    def stream(self, request: GenerateRequest, **kwargs) -> Iterator[GenerateToken]:
        """Yield tokens as they are produced; closing the iterator cancels the request."""
        events: queue.Queue = queue.Queue()
        handle = self.submit(request, on_token=events.put,
                             on_done=lambda result, error: events.put((result, error)), **kwargs)
        try:
            while True:
                event = events.get()
                if isinstance(event, GenerateToken):
                    yield event
                    continue
                if event[1] is not None:
                    raise event[1]
                return
        finally:
            handle.cancel()

    def wake(self) -> None:
        """Have the engine thread look at its inputs now (it sleeps while idle)."""
        with self._wake:
            self._wake.notify()

    def close_session(self, session_id: str) -> None:
        with self._wake:
            self._commands.append(session_id)
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout=30)
        self.masks.close()
        self.connector.close()
        if self.kv_events is not None:
            self.kv_events.publish(self.kv.cache.take_events())
            self.kv_events.close()

    # ---- engine thread ----------------------------------------------------

    def _run(self) -> None:
        if self.config.pin_threads:
            pin_calling_thread()
        try:
            while self._take_inbox():
                self._stepped(*self._step())
        except BaseException as exc:  # noqa: BLE001 - reported to every waiting request
            self.error = exc
        finally:
            reason = self.error or EngineStopped("engine closed")
            with self._wake:
                self._stopped = True
                pending = list(self._live.values())
            for seq in pending:
                self._notify(seq, None, reason)
            if self.error is not None:
                self.on_death(self.error)

    def _take_inbox(self) -> bool:
        """Move new requests to the scheduler; block while idle. False when closing."""
        sched = self.scheduler
        with self._wake:
            # Idle, the thread still wakes when the oldest session pin is due to expire.
            while not (self._inbox or self._commands or sched.has_work() or sched.not_arrived or self._closing):
                self._wake.wait(self.kv.expire_sessions(time.monotonic()))
            if self._closing:
                return False
            while self._inbox:
                sched.add(self._inbox.popleft())
            while self._commands:
                self.kv.close_session(self._commands.popleft())
        self.kv.expire_sessions(time.monotonic())
        next_arrival = sched.next_arrival_step()  # None: nothing is waiting to arrive
        if not sched.has_work() and next_arrival is not None:
            self.stats.steps = max(self.stats.steps, next_arrival)  # idle: jump to the next arrival
        return True

    def _step(self) -> tuple[SchedulerOutput, RunnerOutput]:
        plan = self.scheduler.schedule(self.stats.steps)
        output = self.runner.execute(plan)
        update = self.scheduler.update_from_output(plan, output)
        self.output.process(update)
        return plan, output

    def _stepped(self, plan: SchedulerOutput, output: RunnerOutput) -> None:
        """After a step: counters, the prefix cache's page events, the hooks."""
        for listener in list(self.step_listeners):
            listener(plan, output)
        sched, stats = self.scheduler, self.stats
        stats.preemptions, stats.empty_steps = sched.num_preemptions, sched.empty_steps
        if self.kv_events is not None:
            self.kv_events.publish(self.kv.cache.take_events())
        stats.steps += 1
        self.on_step(self)

    def _forget(self, seq: Sequence) -> None:
        """A request ended: no longer live, its session free for the next turn."""
        with self._wake:
            self._live.pop(seq.request_id, None)
            if seq.session_id is not None:
                self._sessions_in_flight.discard(seq.session_id)

    def _notify(self, seq: Sequence, result, error) -> None:
        seq.status = Status.FINISHED
        self._forget(seq)
        deliver_done(seq, result, error)


def _put_indexed(done: queue.Queue, index: int, result: GenerateResult | None, error: BaseException | None) -> None:
    done.put((index, result, error))
