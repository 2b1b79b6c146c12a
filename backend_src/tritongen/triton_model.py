"""TritonPythonModel for the decoupled `generator`: tensors in, engine calls, responses out.

Token callbacks run on the engine thread and only queue work; a SendThread
builds the responses, asks Triton whether the client is still there and sends,
while the engine runs the next step. The last data response carries the FINAL
flag.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
import traceback
from functools import partial
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from .engine import Engine, EngineOverloaded, EngineStopped
from .generator_settings import parse_settings
from .options import FinishReason, GenerateOptions, GenerateRequest, GenerateResult, GenerateToken, Priority
from .triton_metrics import GeneratorMetrics
from .request_inputs import ParsedRequest, RequestError, parse_request
from .request_limits import load_json
from .send_thread import SendThread, StepBatch

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


def _exit_thread() -> None:
    raise SystemExit("injected response thread exit")


class ClientCancelled(Exception):
    """Raised inside a token callback when Triton reports the request cancelled."""


def _error(message: str, code: str = "INVALID_ARG") -> "pb_utils.InferenceResponse":
    """INVALID_ARG for client errors, UNAVAILABLE for overload and shutdown (retry), INTERNAL otherwise."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, getattr(pb_utils.TritonError, code)))


def _naming(field: str | None, error: Exception) -> str:
    """The error's message, led by the request field it concerns when the message does not name it."""
    message = str(error)
    return message if field is None or field in message else f"{field}: {message}"


def _parameters(config: dict) -> dict[str, str]:
    return {k: v["string_value"] for k, v in config.get("parameters", {}).items()}


class _Stream:
    """One request's response side: buffers ids until they carry text."""

    def __init__(self, sender, parsed: ParsedRequest, prompt_ids: list[int], tokenizer, metrics,
                 sending: StepBatch, wanted: set[str], interval: int, on_closed=lambda stream: None):
        self.sender = sender
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
        self.pending = threading.Lock()
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
        self.handle = None  # the engine's RequestHandle, once submitted

    def response(self, text: str, ids: list[int], finish: FinishReason | None, logprobs: list) -> "pb_utils.InferenceResponse":
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
        with self.pending:
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
        """The first `count` unsent ids (with their text and logprobs); the caller holds `pending`."""
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
        """Send thread: whether the client left; if so the engine cancels the request (at its next step)."""
        self.check_queued = False
        if not self.cancelled and self.sender.is_cancelled():
            self.cancelled = True
            if self.handle is not None:
                self.handle.cancel()

    def _send_piece(self) -> None:
        """Send thread: every complete token produced since the last response."""
        with self.pending:
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
        with self.pending:
            self.finished = True
        self.sending.put(partial(self._send_final, result, error))

    def abort(self, message: str) -> None:
        """Send thread, or a dying one as its last act: end the request with an error unless it has ended."""
        if self.closed:
            return
        if self.handle is not None:
            self.handle.cancel()
        self._close(_error(message, "UNAVAILABLE"))

    def _close(self, response=None) -> None:
        self.closed = True
        self.on_closed(self)
        self.sender.send(response, flags=FINAL)

    def _send_final(self, result: GenerateResult | None, error: BaseException | None) -> None:
        if self.closed:  # aborted when a response thread died
            return
        with self.pending:
            text, ids, logprobs = self._take(len(self.ids))
        if isinstance(error, ClientCancelled) or (result is not None and result.finish_reason == FinishReason.CANCELLED):
            pb_utils.Logger.log_info(f"request cancelled after {self.num_generated} tokens")
            self._close()
        elif error is not None:
            code = "UNAVAILABLE" if isinstance(error, EngineStopped) else "INTERNAL"
            self._close(_error(f"generation failed: {error}", code))
        elif not self.parsed.mode.stream:
            text = result.text
            if not self.parsed.mode.exclude_input_in_output:
                prompt = self.parsed.prompt_text
                text = (prompt if prompt is not None else self.tokenizer.decode(self.prompt_ids)) + text
            self._close(self.response(text, result.token_ids, result.finish_reason, result.logprobs or []))
        else:
            self._close(self.response(text, ids, result.finish_reason, logprobs))


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        self.model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(self.model_config):
            raise pb_utils.TritonModelException("generator must use the decoupled transaction policy")
        repository = Path(args["model_repository"]).parent
        settings = parse_settings(_parameters(self.model_config), repository)
        target = repository / settings.target_model
        self.defaults = settings.defaults
        self.allow_high_priority = settings.allow_high_priority
        self.stream_interval = settings.stream_interval
        self.input_names = [i["name"] for i in self.model_config["input"]]
        self.output_names = {o["name"] for o in self.model_config["output"]}
        self.logger = pb_utils.Logger
        self.engine = Engine(target, settings.engine)
        self.limits = dataclasses.replace(settings.limits, context=self.engine.max_len)
        self.broken: str | None = None  # why the model can no longer answer (a response thread died)
        self.sending = SendThread(lambda exc: pb_utils.Logger.log_error(f"sending a response failed: {exc!r}"),
                                  on_death=partial(self._thread_died, "response"))
        self.observing = SendThread(lambda exc: pb_utils.Logger.log_error(f"a metric update failed: {exc!r}"),
                                    name="tritongen-metrics", on_death=partial(self._thread_died, "metrics"))
        # What the engine thread queues during a step, handed to those threads as the step ends (on_step),
        # or as the engine thread stops (on_death, finalize).
        self.step_sends, self.step_observations = StepBatch(self.sending), StepBatch(self.observing)
        self.metrics = GeneratorMetrics({"model": args["model_name"], "version": args["model_version"]},
                                        self.step_sends.put, self.step_observations.put)
        self._streams: set[_Stream] = set()  # accepted, final response not sent yet
        self._streams_lock = threading.Lock()
        self.engine.on_step = self._on_step
        self.engine.on_death = self._report_unhealthy
        self.model_name = args["model_name"]
        self.fault_injection = os.environ.get("TRITONGEN_FAULT_INJECTION") == "1"
        warm = self.engine.generate(GenerateRequest("Hello", GenerateOptions(max_new_tokens=2)))
        self.logger.log_info(f"generator ready: target {target} ({self.engine.files.layout} layout, "
                             f"{type(self.engine.decoder).__name__}), {self.engine.memory_line}; warm-up produced "
                             f"{len(warm.token_ids)} tokens")

    def execute(self, requests):
        for request in requests:
            self._start(request)
        return None

    def _start(self, request) -> None:
        sender = request.get_response_sender()
        try:
            tensors = {}
            for name in self.input_names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    tensors[name] = tensor.as_numpy()
            raw_params = request.parameters()
            parameters = load_json("request parameters", raw_params, self.limits) if raw_params else {}
            if not isinstance(parameters, dict):
                raise RequestError("request parameters must be a JSON object")
            if self.fault_injection:  # tests only: TRITONGEN_FAULT_INJECTION=1 in the server's environment
                self._inject(parameters.pop("tritongen_fault", None))
            parsed = parse_request(tensors, parameters, self.defaults, self.engine.tokenizer.render_chat, self.limits)
            parsed.request.options.bad_words_ids = self.engine.tokenizer.word_sequences(parsed.bad_words)
            if parsed.priority == Priority.HIGH and not self.allow_high_priority:
                raise RequestError("priority high is reserved: this server does not grant it to clients "
                                   "(generator setting allow_high_priority)")
            try:
                self.engine.check_options(parsed.request.options)
            except ValueError as exc:
                raise RequestError(str(exc)) from None
            request_in = parsed.request
            if parsed.prompt_field == "messages":  # a rendered chat gets no BOS: its template writes what it needs
                request_in = GenerateRequest(self.engine.tokenizer.encode(request_in.prompt, add_bos=False),
                                             request_in.options)
            try:
                prompt_ids = self.engine.tokenize_prompt(request_in)
            except ValueError as exc:  # too long for the context or the pool, ids outside the vocabulary
                raise RequestError(_naming(parsed.prompt_field, exc)) from None
            stream = _Stream(sender, parsed, prompt_ids, self.engine.tokenizer, self.metrics, self.step_sends,
                             self._wanted(request, parsed),
                             parsed.mode.stream_interval or self.stream_interval, self._closed)
            with self._streams_lock:
                if self.broken:
                    raise EngineStopped(self.broken)
                self._streams.add(stream)
            try:
                stream.handle = self.engine.submit(
                    GenerateRequest(prompt_ids, parsed.request.options), on_token=stream.on_token,
                    on_done=partial(self._done, stream), priority=parsed.priority, session_id=parsed.session_id,
                    end_session=parsed.end_session)
            except BaseException as exc:
                with self._streams_lock:
                    self._streams.discard(stream)
                if isinstance(exc, ValueError):  # a constraint that does not compile names where it came from
                    constraint = parsed.constraint_field if "constraint" in str(exc) else None
                    raise RequestError(_naming(constraint, exc)) from None
                raise
        except (RequestError, ValueError) as exc:
            sender.send(_error(str(exc)), flags=FINAL)
        except (EngineOverloaded, EngineStopped) as exc:
            sender.send(_error(str(exc), "UNAVAILABLE"), flags=FINAL)
        except Exception:  # noqa: BLE001 - our bug, not the client's: logged here, never shown to the client
            pb_utils.Logger.log_error(f"a request failed before generation: {traceback.format_exc()}")
            sender.send(_error("internal error before generation; the server log has the details", "INTERNAL"),
                        flags=FINAL)

    def _wanted(self, request, parsed: ParsedRequest) -> set[str]:
        """The outputs each response holds: text_output and the flagged ones for a vLLM-backend client's return_*
        flags; else the outputs the client named; else all of them."""
        if parsed.mode.vllm_outputs is not None:
            return {"text_output", *parsed.mode.vllm_outputs}
        return set(request.requested_output_names()) or self.output_names

    def _closed(self, stream: _Stream) -> None:
        with self._streams_lock:
            self._streams.discard(stream)

    def _inject(self, fault: str | None) -> None:
        """Tests only: make the engine thread or the response thread die, to prove each is noticed."""
        if fault == "engine_crash":
            self.engine.inject_fault()
        elif fault == "send_thread_exit":
            self.sending.put(_exit_thread)

    def _done(self, stream: _Stream, result: GenerateResult | None, error: BaseException | None) -> None:
        self.metrics.engine_stepped(self.engine, force=True)  # published before the final response goes out
        stream.on_done(result, error)

    def _on_step(self, engine: Engine) -> None:
        """After each engine step: metrics; and ask about the clients of requests not asked lately, so a
        request whose client left stops within a fraction of a second, queued or running."""
        self.metrics.engine_stepped(engine)
        now = time.monotonic()
        with self._streams_lock:
            due = [s for s in self._streams if s.handle is not None and s.check_due(now)]
        for stream in due:
            self.step_sends.put(stream.check_cancelled)
        self._flush_step()

    def _flush_step(self) -> None:
        self.step_sends.flush()
        self.step_observations.flush()

    def _report_unhealthy(self, error: BaseException) -> None:
        """The engine thread died: every request got an error; unload so Triton reports the model not ready."""
        pb_utils.Logger.log_error(f"generator engine thread died: {error!r}; unloading the model")
        self._flush_step()  # every request's error response
        self._unload()

    def _thread_died(self, name: str, error: BaseException) -> None:
        """A response thread died (on that thread): refuse new requests, end every open one with an error, unload.

        The response thread's queued jobs will never run, so it answers every open request itself as its last
        act; the metrics thread's death leaves that to the response thread, behind what it already holds.
        """
        message = f"the generator's {name} thread stopped ({error!r}); the model is unloading"
        pb_utils.Logger.log_error(message)
        with self._streams_lock:
            self.broken = message
            streams = list(self._streams)
        for stream in streams:
            if name == "response":
                try:
                    stream.abort(message)
                except Exception as exc:  # noqa: BLE001 - the next request must still be answered
                    pb_utils.Logger.log_error(f"could not end a request: {exc!r}")
            else:
                self.sending.put(partial(stream.abort, message))
        self._unload()

    def _unload(self) -> None:
        """Triton 2.51's python backend has no readiness hook: unloading itself through the model control API
        is how a model says it cannot serve."""

        def unload() -> None:
            try:
                pb_utils.unload_model(self.model_name)
            except Exception as exc:  # noqa: BLE001 - e.g. not in explicit model control mode
                pb_utils.Logger.log_error(f"could not unload {self.model_name}: {exc!r}")

        threading.Thread(target=unload, name="tritongen-unload", daemon=True).start()

    def finalize(self) -> None:
        self.engine.close()
        self._flush_step()  # the responses of requests the closing engine ended
        self.sending.close()
        self.observing.close()
