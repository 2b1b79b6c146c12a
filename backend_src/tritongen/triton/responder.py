"""One request's responses: tokens buffered until they carry whole characters, grouped by stream_interval,
sent in order on the job thread, the FINAL flag on the last; and whether the client is still there.

Token callbacks run on the engine thread and only buffer and queue; building a
response and every sender call (a round trip to the server) happen on the job
thread, while the engine runs its next step.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from functools import partial

import numpy as np
import triton_python_backend_utils as pb_utils

from ..engine.engine import RequestHandle
from ..engine.options import FinishReason, GenerateResult, GenerateToken
from ..errors import EngineStopped, RequestFailed, TritongenError
from .job_thread import StepJobs
from .request_inputs import ParsedRequest

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
# Our finish reasons in the vLLM backend's words (its `str(output.finish_reason)`).
VLLM_FINISH = {"eos_token": "stop", "stop_sequence": "stop", "max_tokens": "length", "length": "length",
               "cancelled": "abort"}
# Every request is asked whether its client is still there at most this often, whether it is queued,
# prefilling or decoding, and however its tokens are grouped into responses: the question is an IPC
# round trip, as costly as a send, so it is bounded by time rather than made per response (a send
# thread that falls behind sends a few large responses, and a count of responses would then never
# come round before the request finished).
_CANCEL_CHECK_SECONDS = 0.25


class ClientCancelled(Exception):
    """Raised inside a token callback when Triton reports the request cancelled."""


def error_response(error: TritongenError) -> "pb_utils.InferenceResponse":
    """The error's message behind its code token, with its Triton error code."""
    return pb_utils.InferenceResponse(
        error=pb_utils.TritonError(error.wire(), getattr(pb_utils.TritonError, error.triton_code)))


class RequestResponder:
    """One request's response side: buffers ids until they carry text, then sends them on the job thread."""

    def __init__(self, sender, parsed: ParsedRequest, prompt_ids: list[int], tokenizer, metrics,
                 sending: StepJobs, wanted: set[str], interval: int, on_closed=lambda responder: None,
                 request_id: str = ""):
        self.sender = sender
        self.request_id = request_id  # the client's (Triton's request id), for the log
        self.on_closed = on_closed  # called once the final response or error went out
        self.closed = False  # the final response went out (send thread only)
        self.interval = interval  # new tokens per streamed response (stream_interval)
        self.wanted = wanted  # output names the client requested
        self.sending = sending
        self.cancelled = False  # set by the send thread when Triton reports the client gone
        self.check_queued = False  # a check_cancelled waits in the send queue: do not pile up more
        self.checked_at = time.monotonic()  # when the last check was queued
        self.num_generated = 0
        self.result: GenerateResult | None = None  # set when the request ends
        self.logprob_total = 0.0  # sum of the logprobs sent so far (send thread)
        # Tokens produced and not sent yet. The engine thread appends; a queued piece takes what is
        # there when the send thread reaches it, so a send thread that falls behind sends fewer,
        # larger responses instead of delaying the model.
        self.unsent_lock = threading.Lock()
        self.text = ""  # text of the unsent ids
        self.ready = 0  # unsent ids whose text is complete (the others wait for the rest of a character)
        self.piece_queued = False
        self.finished = False  # on_done ran: what is left goes out with the final response
        self.metrics = metrics
        self.parsed = parsed
        self.prompt_ids = prompt_ids
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.logprobs: list = []
        self.handle: RequestHandle | None = None  # once submitted

    def response(self, text: str, ids: list[int], finish: FinishReason | None,
                 logprobs: list) -> "pb_utils.InferenceResponse":
        """Every output the client asked for (all of them when it named none) in every response: a client reads
        each one it asked for from each response (perf_analyzer 2.51 reads stale memory for a missing one, and
        a NaN there leaves its profile export empty). Only those: each tensor costs CPU in the stub, the server
        and the client, for every token of every stream. Send thread only (it keeps the logprob total)."""
        self.logprob_total += sum(lp.logprob for lp in logprobs)
        values = {
            "text_output": lambda: np.array([text.encode("utf-8")], dtype=np.object_),
            "output_ids": lambda: np.array(ids, dtype=np.int64),
            "finish_reason": lambda: np.array([self._finish_text(finish).encode()], dtype=np.object_),
            "num_input_tokens": lambda: np.array([len(self.prompt_ids)], dtype=np.uint32),
            "num_output_tokens": lambda: np.array([len(ids)], dtype=np.uint32),
            "prefix_cache_hit_len": lambda: np.array([self._statistic(finish, "prefix_cache_hit_len")], np.uint32),
            "total_draft_tokens": lambda: np.array([self._statistic(finish, "total_draft_tokens")], np.int32),
            "total_accepted_draft_tokens": lambda: np.array([self._statistic(finish, "total_accepted_draft_tokens")],
                                                            np.int32),
            # Without logprobs asked for: no entries, a total of 0 (perf_analyzer 2.51 reads an empty number
            # tensor's value from stale memory too).
            "logprobs": lambda: np.array(self._logprobs_output(logprobs), dtype=np.object_),
            "cumulative_logprob": lambda: np.array([self.logprob_total], dtype=np.float32),
        }
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor(name, make()) for name, make in values.items() if name in self.wanted])

    def _statistic(self, finish: FinishReason | None, name: str) -> int:
        """A prefix-cache hit or draft count (GenerateResult's names): the result's in the last response, the
        request's so far before it."""
        source = self.result if finish is not None else self.handle
        return 0 if source is None else getattr(source, name)  # None: a piece sent before submit() returned

    def _finish_text(self, finish: FinishReason | None) -> str:
        """Ours ("" until the end), or with the vLLM backend's return_finish_reason its words ("None" until then)."""
        if self.parsed.mode.vllm_outputs is None:
            return str(finish) if finish else ""
        return VLLM_FINISH.get(finish.kind, "stop") if finish else "None"

    def _logprobs_output(self, logprobs: list) -> list[bytes]:
        """One JSON entry per token (ours); with the vLLM backend's return_logprobs, one JSON list per response in
        its shape, [{token_id: {logprob, rank, decoded_token}}, ...], or "null" when no logprobs were asked for."""
        if self.parsed.mode.vllm_outputs is None:
            return [self._logprob_entry(lp).encode() for lp in logprobs]
        if self.parsed.request.options.top_logprobs is None:
            return [b"null"]
        tokens = []
        for lp in logprobs:
            ranked = {i: rank for rank, (i, _) in enumerate(lp.top, start=1)}
            tokens.append({str(i): {"logprob": p, "rank": lp.rank if i == lp.token_id else ranked[i],
                                    "decoded_token": self.tokenizer.decode([i])} for i, p in lp.top})
        return [json.dumps(tokens).encode()]

    def _logprob_entry(self, lp) -> str:
        return json.dumps({"id": lp.token_id, "text": self.tokenizer.decode([lp.token_id]), "logprob": lp.logprob,
                           "top": [{"id": i, "text": self.tokenizer.decode([i]), "logprob": p} for i, p in lp.top]})

    def on_token(self, token: GenerateToken) -> None:
        if self.cancelled:
            raise ClientCancelled()
        self.num_generated += 1
        if not self.parsed.mode.stream:
            return
        with self.unsent_lock:
            self.ids.append(token.token_id)
            self.text += token.text
            if token.logprob is not None:
                self.logprobs.append(token.logprob)
            if token.text:
                self.ready = len(self.ids)
            # The last piece goes out with the result, in on_done.
            start = token.finish_reason is None and self.ready >= self.interval and not self.piece_queued
            self.piece_queued |= start
        if start:
            self.sending.put(self._send_piece)

    def _take(self, count: int) -> tuple[str, list[int], list]:
        """The first `count` unsent ids (with their text and logprobs); the caller holds `unsent_lock`."""
        taken = self.text, self.ids[:count], self.logprobs[:count]
        self.text, self.ids, self.logprobs = "", self.ids[count:], self.logprobs[count:]
        self.ready = 0
        return taken

    def check_due(self, now: float) -> bool:
        """Engine thread: whether to queue a check_cancelled now (and note that one is queued)."""
        due = (not self.check_queued and not self.cancelled and not self.finished
               and now - self.checked_at >= _CANCEL_CHECK_SECONDS)
        if due:
            self.check_queued, self.checked_at = True, now
        return due

    def check_cancelled(self) -> None:
        """Send thread: whether the client left; if so the engine cancels the request (at its next step).
        Never after the final response (an abort's): Triton has freed the sender's factory, and asking
        crashes tritonserver."""
        self.check_queued = False
        if not self.cancelled and not self.closed and self.sender.is_cancelled():
            self.cancelled = True
            if self.handle is not None:
                self.handle.cancel()

    def _send_piece(self) -> None:
        """Send thread: every complete token produced since the last response."""
        with self.unsent_lock:
            self.piece_queued = False
            if self.finished or self.closed:
                return
            text, ids, logprobs = self._take(self.ready)
        if self.cancelled:
            return
        self.sender.send(self.response(text, ids, None, logprobs))

    def on_done(self, result: GenerateResult | None, error: BaseException | None) -> None:
        if result is not None:
            self.result = result
            self.metrics.request_finished(result)
        with self.unsent_lock:
            self.finished = True
        self.sending.put(partial(self._send_final, result, error))

    def abort(self, message: str) -> None:
        """Send thread, or a dying one as its last act: end the request with an error unless it has ended."""
        if self.closed:
            return
        if self.handle is not None:
            self.handle.cancel()
        self._close(error_response(EngineStopped(message)))

    def _close(self, response=None) -> None:
        self.closed = True
        self.on_closed(self)
        self.sender.send(response, flags=FINAL)

    def _send_final(self, result: GenerateResult | None, error: BaseException | None) -> None:
        if self.closed:  # aborted when a response thread died
            return
        with self.unsent_lock:
            text, ids, logprobs = self._take(len(self.ids))
        if isinstance(error, ClientCancelled) or (
                result is not None and result.finish_reason == FinishReason.CANCELLED):
            pb_utils.Logger.log_info(f"request cancelled after {self.num_generated} tokens")
            self._close()
        elif error is not None:
            self._close(error_response(self._typed(error)))
        else:
            assert result is not None  # the engine reports either a result or an error
            if not self.parsed.mode.stream:
                text = result.text
                if not self.parsed.mode.exclude_input_in_output:
                    prompt = self.parsed.prompt_text
                    text = (prompt if prompt is not None else self.tokenizer.decode(self.prompt_ids)) + text
                self._close(self.response(text, result.token_ids, result.finish_reason, result.logprobs or []))
            else:
                self._close(self.response(text, ids, result.finish_reason, logprobs))

    def _typed(self, error: BaseException) -> TritongenError:
        """The error as the client gets it. A failure, RequestFailed or any exception that is not one of the typed
        errors (a model call, a proposer or a constraint that raised), is logged with the request's ids and goes
        out as RequestFailed, whose wire message never carries what failed."""
        if isinstance(error, TritongenError) and not isinstance(error, RequestFailed):
            return error
        engine_id = self.handle.request_id if self.handle is not None else "-"
        pb_utils.Logger.log_error(f"request {self.request_id or '-'} (engine request {engine_id}) failed: "
                                  f"{''.join(traceback.format_exception(error)).rstrip()}")
        return error if isinstance(error, RequestFailed) else RequestFailed(repr(error))
