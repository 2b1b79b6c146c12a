"""The step loop and the in-process generate / stream API.

One engine thread owns the model and every request's KV; callers submit
requests from any thread and receive tokens through callbacks run on the
engine thread. A callback that raises aborts its own request only.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

from .model_runner import DecoderRunner
from .repository import onnx_path
from .options import (EngineConfig, FinishReason, GenerateRequest, GenerateResult, GenerateToken, TokenLogprob)
from .sampling import RequestSampler
from .stopping import StopChecker
from .tokenizer import IncrementalDetokenizer, TextTokenizer

TokenCallback = Callable[[GenerateToken], None]
DoneCallback = Callable[[Optional[GenerateResult], Optional[BaseException]], None]


class EngineStopped(RuntimeError):
    """The engine thread is gone; no request can be served."""


@dataclass
class RequestHandle:
    request_id: int
    prompt_ids: list[int]
    cancel_requested: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancel_requested.set()


@dataclass
class _Active:
    handle: RequestHandle
    sampler: RequestSampler
    stopper: StopChecker
    detok: IncrementalDetokenizer
    on_token: TokenCallback | None
    on_done: DoneCallback | None
    pending: list[int]
    past: list
    position: int = 0
    logprobs: list[TokenLogprob] | None = None


class Engine:
    def __init__(self, model_folder: Path, config: EngineConfig | None = None):
        self.config = config or EngineConfig()
        model_folder = Path(model_folder)
        self.tokenizer = TextTokenizer(model_folder)
        self.runner = DecoderRunner(onnx_path(model_folder), self.config.intra_op_threads,
                                   self.config.execution_providers or None)
        self.vocab_size = self.runner.shape.vocab_size
        self._ids = itertools.count(1)
        self._inbox: deque[_Active] = deque()
        self._wake = threading.Condition()
        self._active: list[_Active] = []
        self._closing = False
        self.error: BaseException | None = None
        self.steps = 0
        self._thread = threading.Thread(target=self._run, name="tritongen-engine", daemon=True)
        self._thread.start()

    # ---- public API -------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def context_limit(self, request: GenerateRequest) -> int:
        limit = self.tokenizer.max_position
        if request.options.max_context is not None:
            limit = min(limit, request.options.max_context)
        return limit

    def tokenize_prompt(self, request: GenerateRequest) -> list[int]:
        """Validate a request and return its prompt ids; raises ValueError for the caller."""
        request.options.validate()
        prompt = request.prompt
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(i) for i in prompt]
        if not ids:
            raise ValueError("prompt must not be empty")
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise ValueError(f"input_ids contains {bad}, outside the vocabulary [0, {self.vocab_size})")
        limit = self.context_limit(request)
        if len(ids) >= limit:
            raise ValueError(f"prompt has {len(ids)} tokens but the context holds {limit}: no room for a new token")
        return ids

    def submit(self, request: GenerateRequest, on_token: TokenCallback | None = None,
               on_done: DoneCallback | None = None) -> RequestHandle:
        if not self.alive:
            raise EngineStopped(f"engine is not running: {self.error!r}")
        ids = self.tokenize_prompt(request)
        handle = RequestHandle(next(self._ids), ids)
        eos = request.options.eos_token_id if request.options.eos_token_id is not None else self.tokenizer.eos_token_id
        active = _Active(
            handle=handle,
            sampler=RequestSampler(request.options, ids, self.vocab_size, eos if request.options.stop_on_eos else None),
            stopper=StopChecker(request.options, eos, len(ids), self.context_limit(request)),
            detok=IncrementalDetokenizer(self.tokenizer, ids),
            on_token=on_token, on_done=on_done, pending=list(ids), past=self.runner.empty_past(),
            logprobs=[] if request.options.top_logprobs is not None else None,
        )
        with self._wake:
            self._inbox.append(active)
            self._wake.notify()
        return handle

    def generate(self, request: GenerateRequest) -> GenerateResult:
        done: queue.Queue = queue.Queue()
        self.submit(request, on_done=lambda result, error: done.put((result, error)))
        result, error = done.get()
        if error is not None:
            raise error
        return result

    def stream(self, request: GenerateRequest) -> Iterator[GenerateToken]:
        """Yield tokens as they are produced; closing the iterator cancels the request."""
        events: queue.Queue = queue.Queue()
        handle = self.submit(request, on_token=events.put, on_done=lambda result, error: events.put((result, error)))
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

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join(timeout=30)

    # ---- engine thread ----------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._wake:
                    while not self._inbox and not self._active and not self._closing:
                        self._wake.wait()
                    if self._closing:
                        break
                    self._active.extend(self._inbox)
                    self._inbox.clear()
                for seq in list(self._active):
                    self._advance(seq)
                self.steps += 1
        except BaseException as exc:  # noqa: BLE001 - reported to every waiting request
            self.error = exc
        finally:
            with self._wake:
                waiting = self._active + list(self._inbox)
                self._active, self._inbox = [], deque()
            reason = self.error or EngineStopped("engine closed")
            for seq in waiting:
                self._notify_done(seq, None, reason)

    def _advance(self, seq: _Active) -> None:
        if seq.handle.cancel_requested.is_set():
            self._finish(seq, FinishReason.CANCELLED)
            return
        try:
            token = self._forward_and_choose(seq)
            if token is None:
                return
            text, reason = seq.stopper.add(token.token_id, seq.detok.add(token.token_id))
            if seq.logprobs is not None:
                seq.logprobs.append(token.logprob)
            if seq.on_token is not None:
                seq.on_token(GenerateToken(token.token_id, text, reason, token.logprob))
        except Exception as exc:  # noqa: BLE001 - this request fails alone
            self._active.remove(seq)
            self._notify_done(seq, None, exc)
            return
        if reason is not None:
            self._finish(seq, reason)
        else:
            seq.pending = [token.token_id]

    def _forward_and_choose(self, seq: _Active):
        chunk = seq.pending[: self.config.prefill_chunk]
        seq.pending = seq.pending[len(chunk):]
        n = len(chunk)
        logits, seq.past, _ = self.runner.forward(
            np.array([chunk], dtype=np.int64),
            np.ones((1, seq.position + n), dtype=np.int64),
            np.arange(seq.position, seq.position + n, dtype=np.int64)[None, :],
            seq.past,
        )
        seq.position += n
        if seq.pending:
            return None  # more prompt to prefill
        return seq.sampler.choose(logits[0, -1])

    def _finish(self, seq: _Active, reason: FinishReason) -> None:
        self._active.remove(seq)
        st = seq.stopper
        result = GenerateResult(
            text=st.text, token_ids=list(st.token_ids), finish_reason=reason,
            logprobs=seq.logprobs, num_prompt_tokens=len(seq.handle.prompt_ids),
        )
        self._notify_done(seq, result, None)

    @staticmethod
    def _notify_done(seq: _Active, result, error) -> None:
        seq.past = []
        if seq.on_done is not None:
            try:
                seq.on_done(result, error)
            except Exception:  # noqa: BLE001 - a failing callback must not stop the engine
                pass
