"""TritonPythonModel for the decoupled `generator`: tensors in, engine calls, responses out.

Token callbacks run on the engine thread and only queue work; a JobThread
builds the responses, asks Triton whether the client is still there and sends,
while the engine runs the next step. The last data response carries the FINAL
flag.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import threading
import time
import traceback
from functools import partial
from pathlib import Path

import triton_python_backend_utils as pb_utils

from ..engine.engine import Engine
from ..engine.options import GenerateOptions, GenerateRequest, GenerateResult, Priority
from ..errors import EngineStopped, InvalidOption, RequestFailed, TritongenError
from .generator_settings import parse_settings
from .job_thread import JobThread, StepJobs
from .metrics import GeneratorMetrics
from .request_inputs import ParsedRequest, RequestError, named_error, parse_request
from .request_limits import load_json
from .responder import FINAL, RequestResponder, error_response
from .stop_watch import StopWatch

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # where this tritongen was imported from, for the load log


def _exit_thread() -> None:
    raise SystemExit("injected response thread exit")


def _parameters(config: dict) -> dict[str, str]:
    return {k: v["string_value"] for k, v in config.get("parameters", {}).items()}


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
        self.shutdown_grace = settings.shutdown_grace_seconds
        self.input_names = [i["name"] for i in self.model_config["input"]]
        self.output_names = {o["name"] for o in self.model_config["output"]}
        self.logger = pb_utils.Logger
        self.engine = Engine(target, settings.engine)
        self.limits = dataclasses.replace(settings.limits, context=self.engine.max_len)
        self.broken: str | None = None  # why the model can no longer answer (a response thread died)
        self.sending = JobThread(lambda exc: pb_utils.Logger.log_error(f"sending a response failed: {exc!r}"),
                                  on_death=partial(self._thread_died, "response"))
        self.observing = JobThread(lambda exc: pb_utils.Logger.log_error(f"a metric update failed: {exc!r}"),
                                    name="tritongen-metrics", on_death=partial(self._thread_died, "metrics"))
        # What the engine thread queues during a step, handed to those threads as the step ends (on_step),
        # or as the engine thread stops (on_death, finalize).
        self.step_sends, self.step_observations = StepJobs(self.sending), StepJobs(self.observing)
        engine_config = settings.engine
        cache_info = {"block_size": str(engine_config.page_size), "num_gpu_blocks": str(engine_config.num_gpu_pages),
                      "cache_dtype": engine_config.kv_cache_dtype, "kv_device": self.engine.kv_device}
        self.metrics = GeneratorMetrics({"model": args["model_name"], "version": args["model_version"]},
                                        self.step_sends.put, self.step_observations.put, cache_info,
                                        settings.vllm_metric_aliases)
        self._streams: set[RequestResponder] = set()  # accepted, final response not sent yet
        self._streams_lock = threading.Lock()
        self.engine.on_step = self._on_step
        self.engine.on_death = self._report_unhealthy
        self.model_name = args["model_name"]
        self.fault_injection = os.environ.get("TRITONGEN_FAULT_INJECTION") == "1"
        warm = self.engine.generate(GenerateRequest("Hello", GenerateOptions(max_new_tokens=2)))
        self.logger.log_info(f"generator ready: tritongen at {PACKAGE_DIR}, target {target} "
                             f"({self.engine.files.layout} layout, "
                             f"{type(self.engine.decoder).__name__}), {self.engine.kv_line}, "
                             f"{self.engine.memory_line}; warm-up produced {len(warm.token_ids)} tokens")
        self.grace_timer: threading.Timer | None = None  # started when the server begins to stop
        self.stop_watch = StopWatch(partial(pb_utils.is_model_ready, self.model_name), self._server_stopping,
                                    lambda: bool(self._streams))

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
            request_in = parsed.request
            if parsed.prompt_field == "messages":  # a rendered chat gets no BOS: its template writes what it needs
                assert isinstance(request_in.prompt, str)  # the chat template's text
                request_in = GenerateRequest(self.engine.tokenizer.encode(request_in.prompt, add_bos=False),
                                             request_in.options)
            try:
                prepared = self.engine.prepare(request_in)  # every check of the request, once
            except InvalidOption as exc:
                raise named_error(exc, parsed) from None
            stream = RequestResponder(sender, parsed, prepared.prompt_ids, self.engine.tokenizer, self.metrics,
                                      self.step_sends, self._wanted(request, parsed),
                                      parsed.mode.stream_interval or self.stream_interval, self._closed,
                                      request.request_id())
            with self._streams_lock:
                if self.broken:
                    raise EngineStopped(self.broken)
                self._streams.add(stream)
            try:
                stream.handle = self.engine.submit(
                    prepared, on_token=stream.on_token, on_done=partial(self._done, stream), priority=parsed.priority,
                    session_id=parsed.session_id, end_session=parsed.end_session)
            except BaseException:
                with self._streams_lock:
                    self._streams.discard(stream)
                raise
        except TritongenError as exc:  # named invalid options, overloaded, stopped, a busy session
            sender.send(error_response(exc), flags=FINAL)
        except ValueError as exc:  # RequestError and the parsers' refusals: the request's fault, naming the field
            sender.send(error_response(InvalidOption("", str(exc))), flags=FINAL)
        except Exception:  # noqa: BLE001 - our bug, not the client's: logged here, never shown to the client
            pb_utils.Logger.log_error(f"request {request.request_id() or '-'} failed before generation: "
                                      f"{traceback.format_exc()}")
            sender.send(error_response(RequestFailed("failed before generation")), flags=FINAL)

    def _wanted(self, request, parsed: ParsedRequest) -> set[str]:
        """The outputs each response holds: text_output and the flagged ones for a vLLM-backend client's return_*
        flags; else the outputs the client named; else all of them."""
        if parsed.mode.vllm_outputs is not None:
            return {"text_output", *parsed.mode.vllm_outputs}
        return set(request.requested_output_names()) or self.output_names

    def _closed(self, stream: RequestResponder) -> None:
        with self._streams_lock:
            self._streams.discard(stream)

    def _inject(self, fault: str | None) -> None:
        """Tests only: make the engine thread or the response thread die, to prove each is noticed."""
        if fault == "engine_crash":
            self.engine.step_listeners.append(_crash_engine_thread)
            self.engine.wake()
        elif fault == "send_thread_exit":
            self.sending.put(_exit_thread)

    def _done(self, stream: RequestResponder, result: GenerateResult | None, error: BaseException | None) -> None:
        self.metrics.engine_stepped(self.engine, force=True)  # published before the final response goes out
        if error is not None and error is self.engine.error:  # the engine thread died of it (_report_unhealthy logs it)
            error = EngineStopped("the engine stopped; the server log has the details")
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
        message = f"the generator's {name} thread stopped; the model is unloading"  # the client's: no details
        pb_utils.Logger.log_error(f"{message}: {error!r}")
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

    def _server_stopping(self) -> None:
        """tritonserver got SIGTERM: refuse new requests; open streams go on for shutdown_grace_seconds, then
        end with an error, so each client has its final response before Triton's exit timeout closes it."""
        message = "the server is stopping"
        pb_utils.Logger.log_info(f"{message}: open streams get {self.shutdown_grace:g}s to finish")
        with self._streams_lock:
            self.broken = self.broken or message
        self.grace_timer = threading.Timer(self.shutdown_grace, self._end_streams, (message,))
        self.grace_timer.daemon = True
        self.grace_timer.start()

    def _end_streams(self, message: str) -> None:
        with self._streams_lock:
            streams = list(self._streams)
        for stream in streams:
            self.sending.put(partial(stream.abort, message))

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
        self.stop_watch.close()
        if self.grace_timer is not None:
            self.grace_timer.cancel()
        self.engine.close()
        self._flush_step()  # the responses of requests the closing engine ended
        self.sending.close()
        self.observing.close()
        self._release()

    def _release(self) -> None:
        """Free every pb_utils object this model holds (metrics, response senders) now, while the stub can take
        them back. Python backend 24.10's stub clears its instance before its own teardown; a Metric or sender
        freed after that (one held in a reference cycle, collected at interpreter exit) builds a stub with no
        shared memory and crashes it (SIGSEGV) at every stop."""
        vars(self).clear()
        gc.collect()


def _crash_engine_thread(plan, output) -> None:
    """A step listener that raises: the engine thread dies after its next step (fault injection)."""
    raise RuntimeError("injected engine fault")
