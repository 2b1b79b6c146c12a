"""How the generator's adapter turns engine tokens into streamed responses when its send thread lags.

The engine never waits for sends: a piece queued for the send thread takes every complete token produced
by the time it runs, so a send thread that falls behind sends fewer, larger responses, in order, and the
final response carries the rest. Unit level: a stand-in for triton_python_backend_utils (adapter only).
"""

from __future__ import annotations

import sys
import threading
import types

import numpy as np
import pytest

from tritongen.engine.options import FinishReason, GenerateResult, GenerateToken, TokenLogprob
from tritongen.engine.snapshot import EngineSnapshot
from tritongen.runtime.repository import read_config
from tritongen.triton.request_inputs import parse_request

from conftest import REPOSITORY

FINAL = 1


@pytest.fixture
def adapter(monkeypatch):
    """tritongen.triton.model imported against a stand-in pb_utils that records what responses hold."""
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL

    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, array

    class InferenceResponse:
        def __init__(self, output_tensors=(), error=None):
            self.outputs = {t.name: t.array for t in output_tensors}
            self.error = error

    pb.Tensor, pb.InferenceResponse = Tensor, InferenceResponse
    pb.MetricFamily = types.SimpleNamespace(COUNTER=0, GAUGE=1, HISTOGRAM=2)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    monkeypatch.delitem(sys.modules, "tritongen.triton.model", raising=False)
    monkeypatch.delitem(sys.modules, "tritongen.triton.metrics", raising=False)
    monkeypatch.delitem(sys.modules, "tritongen.triton.responder", raising=False)
    import tritongen.triton.model as triton_model

    return triton_model


class Sender:
    def __init__(self):
        self.sent: list[tuple[list[int], str, int]] = []  # (output_ids, text_output, flags)
        self.outputs: list[dict] = []  # every tensor of each response

    def send(self, response=None, flags=0):
        outputs = response.outputs if response is not None else {}
        self.outputs.append(outputs)
        ids = outputs["output_ids"].tolist() if "output_ids" in outputs else []
        text = outputs["text_output"][0].decode() if "text_output" in outputs else ""
        self.sent.append((ids, text, flags))

    def is_cancelled(self):
        return False


class PausedJobThread:
    """Holds jobs until the test runs them: a send thread that has fallen behind the engine."""

    def __init__(self):
        self.jobs = []

    def put(self, job):
        self.jobs.append(job)

    def run(self):
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            job()


def stream_for(adapter, interval, sending, wanted=("output_ids", "text_output"), **inputs):
    """A streaming request for [1, 2, 3]; `inputs` adds request tensors (e.g. return_log_probs)."""
    tensors = {"input_ids": np.array([1, 2, 3]), "stream": np.array([True]), **inputs}
    parsed = parse_request(tensors, {}, {}, None)
    metrics = types.SimpleNamespace(request_finished=lambda result: None)
    tokenizer = types.SimpleNamespace(decode=lambda ids: "t")
    sender = Sender()
    stream = adapter.RequestResponder(sender, parsed, [1, 2, 3], tokenizer, metrics, sending, set(wanted), interval)
    return stream, sender


def result(ids, text):
    return GenerateResult(token_ids=ids, text=text, finish_reason=FinishReason.MAX_TOKENS, num_prompt_tokens=3)


def test_a_lagging_send_thread_merges_tokens_in_order(adapter):
    sending = PausedJobThread()
    stream, sender = stream_for(adapter, 1, sending)
    stream.on_token(GenerateToken(10, "a"))
    sending.run()  # keeping up: one token per response
    for token, text in ((11, "b"), (12, "c"), (13, "d")):
        stream.on_token(GenerateToken(token, text))
    assert len(sending.jobs) == 1  # one piece waits, however many tokens arrive meanwhile
    sending.run()
    stream.on_token(GenerateToken(14, "e", FinishReason.MAX_TOKENS))
    stream.on_done(result([10, 11, 12, 13, 14], "abcde"), None)
    sending.run()
    assert sender.sent == [([10], "a", 0), ([11, 12, 13], "bcd", 0), ([14], "e", FINAL)]


def test_a_token_without_its_text_waits_for_the_rest_of_the_character(adapter):
    sending = PausedJobThread()
    stream, sender = stream_for(adapter, 1, sending)
    stream.on_token(GenerateToken(20, "x"))
    stream.on_token(GenerateToken(21, ""))  # the first bytes of a character: no text yet
    sending.run()
    assert sender.sent == [([20], "x", 0)]
    stream.on_token(GenerateToken(22, "é"))
    sending.run()
    assert sender.sent[-1] == ([21, 22], "é", 0)


def test_a_piece_queued_before_the_end_leaves_the_tokens_to_the_final_response(adapter):
    sending = PausedJobThread()
    stream, sender = stream_for(adapter, 2, sending)
    for token, text in ((30, "p"), (31, "q"), (32, "r")):
        stream.on_token(GenerateToken(token, text))
    stream.on_token(GenerateToken(33, "s", FinishReason.MAX_TOKENS))
    stream.on_done(result([30, 31, 32, 33], "pqrs"), None)
    sending.run()  # the queued piece runs after the request ended: the final response holds everything
    assert sender.sent == [([30, 31, 32, 33], "pqrs", FINAL)]


def test_interval_holds_back_until_enough_tokens(adapter):
    sending = PausedJobThread()
    stream, sender = stream_for(adapter, 3, sending)
    for token in (40, 41):
        stream.on_token(GenerateToken(token, "t"))
    assert sending.jobs == []
    stream.on_token(GenerateToken(42, "t"))
    sending.run()
    assert sender.sent == [([40, 41, 42], "ttt", 0)]


def test_every_response_holds_every_output_the_client_asked_for(adapter):
    """Regression: responses before the last left out the end-of-request outputs, and every response the
    logprob ones when no logprobs were asked for. perf_analyzer 2.51 asks for every output and records stale
    memory for a missing one (or an empty number tensor); a NaN among them left its profile export empty
    (seen in CI and in make bench)."""
    declared = {o.name for o in read_config(REPOSITORY / "generator").output}
    sending = PausedJobThread()
    stream, sender = stream_for(adapter, 1, sending, wanted=declared)
    stream.handle = types.SimpleNamespace(prefix_cache_hit_len=16, total_draft_tokens=0, total_accepted_draft_tokens=0)
    stream.on_token(GenerateToken(10, "a"))
    sending.run()
    stream.on_token(GenerateToken(11, "b", FinishReason.MAX_TOKENS))
    done = result([10, 11], "ab")
    done.prefix_cache_hit_len, done.total_draft_tokens, done.total_accepted_draft_tokens = 16, 3, 2
    stream.on_done(done, None)
    sending.run()
    first, last = sender.outputs
    assert set(first) == set(last) == declared
    assert [r["prefix_cache_hit_len"].tolist() for r in (first, last)] == [[16], [16]]
    assert [r["total_draft_tokens"].tolist() for r in (first, last)] == [[0], [3]]
    assert [r["total_accepted_draft_tokens"].tolist() for r in (first, last)] == [[0], [2]]
    for response in (first, last):  # no logprobs asked for: no entries, a total of 0
        assert response["logprobs"].shape == (0,)
        assert response["cumulative_logprob"].tolist() == [0.0] and response["cumulative_logprob"].dtype == np.float32


def test_cumulative_logprob_adds_up_across_streamed_responses(adapter):
    sending = PausedJobThread()
    stream, sender = stream_for(adapter, 1, sending, wanted=("cumulative_logprob", "logprobs"),
                                return_log_probs=np.array([True]))
    values = {10: -0.5, 11: -1.25, 12: -2.0}
    for token, value in values.items():
        finish = FinishReason.MAX_TOKENS if token == 12 else None
        stream.on_token(GenerateToken(token, "t", finish, TokenLogprob(token, value, [])))
        if finish is None:
            sending.run()
    stream.on_done(result(list(values), "ttt"), None)
    sending.run()
    assert [r["cumulative_logprob"].tolist() for r in sender.outputs] == [[-0.5], [-1.75], [-3.75]]
    assert [len(r["logprobs"]) for r in sender.outputs] == [1, 1, 1]


class Handle:
    def __init__(self):
        self.cancels = 0

    def cancel(self):
        self.cancels += 1


def sweeping_model(adapter, step, streams):
    """The generator's per-step sweep over live streams (whose jobs go to `step`), without an engine behind it."""
    model = object.__new__(adapter.TritonPythonModel)
    model.metrics = types.SimpleNamespace(engine_stepped=lambda engine: None)
    model.step_sends, model.step_observations = step, adapter.StepJobs(PausedJobThread())
    model._streams, model._streams_lock = set(streams), threading.Lock()
    return model


def test_a_steps_responses_reach_the_send_thread_when_the_step_ends(adapter):
    """Woken mid-step, the send thread would take the GIL whenever the engine thread's numpy copies let it
    go, and the engine thread would wait for it before its next model call."""
    sending = PausedJobThread()
    step = adapter.StepJobs(sending)
    (first, first_sender), (second, second_sender) = stream_for(adapter, 1, step), stream_for(adapter, 1, step)
    model = sweeping_model(adapter, step, [first, second])
    first.on_token(GenerateToken(10, "a"))
    second.on_token(GenerateToken(20, "b"))
    second.on_done(result([20], "b"), None)
    assert sending.jobs == []
    model._on_step(None)
    assert len(sending.jobs) == 3
    sending.run()
    assert first_sender.sent == [([10], "a", 0)]
    assert second_sender.sent == [([20], "b", FINAL)]  # its piece found it finished: the final took the token


def test_a_client_gone_under_a_lagging_send_thread_is_asked_about_by_time_not_by_responses(adapter):
    """Regression: clients used to be asked every 4th response; a lagging send thread merged a 64-token
    request into 3 responses, so a cancelled client's request ran to its end (8 of 500 in a CI run)."""
    sending = PausedJobThread()
    step = adapter.StepJobs(sending)
    stream, sender = stream_for(adapter, 1, step)
    stream.handle = Handle()
    model = sweeping_model(adapter, step, [stream])
    gone = False
    sender.is_cancelled = lambda: gone
    stream.on_token(GenerateToken(10, "a"))
    model._on_step(None)  # not due: a new request counts as asked when it arrives
    assert sending.jobs == [stream._send_piece]
    sending.run()
    gone = True  # the client cancels after its first response
    for token in range(11, 40):
        stream.on_token(GenerateToken(token, "b"))
    stream.checked_at -= sys.modules["tritongen.triton.responder"]._CANCEL_CHECK_SECONDS  # time passes
    model._on_step(None)
    model._on_step(None)  # the check already waits in the queue: no second one
    assert sending.jobs == [stream._send_piece, stream.check_cancelled]
    sending.run()
    assert stream.handle.cancels == 1
    assert [ids[-1] for ids, _, _ in sender.sent] == [10, 39]  # the piece queued before the check went out
    try:
        stream.on_token(GenerateToken(40, "c"))
    except sys.modules["tritongen.triton.responder"].ClientCancelled:
        pass
    else:
        raise AssertionError("the engine thread was not told to stop the request")


class RecordingFamily:
    """Stand-in pb_utils.MetricFamily: every metric records the calls made on it, in one shared log."""
    COUNTER, GAUGE, HISTOGRAM = 0, 1, 2
    log: list[tuple[str, str, float]] = []

    labels: dict[str, list[dict]] = {}  # family name -> the labels of each metric made of it

    def __init__(self, name, description, kind):
        self.name = name

    def Metric(self, labels, buckets=None):  # noqa: N802 - pb_utils' spelling
        name, log = self.name, self.log
        self.labels.setdefault(name, []).append(labels)
        return types.SimpleNamespace(increment=lambda v: log.append((name, "increment", v)),
                                     set=lambda v: log.append((name, "set", v)),
                                     observe=lambda v: log.append((name, "observe", v)))


def test_the_final_response_does_not_wait_for_the_per_token_histogram(adapter, monkeypatch):
    """A request's time-per-output-token observations (one server call per token) run on a thread of their
    own: its final response goes out before them, with its counters already updated."""
    monkeypatch.setattr(adapter.pb_utils, "MetricFamily", RecordingFamily)
    RecordingFamily.log = []
    sending, observing = PausedJobThread(), PausedJobThread()
    metrics = adapter.GeneratorMetrics({"model": "generator", "version": "1"}, sending.put, observing.put,
                                       {"block_size": "16"})
    stream, sender = stream_for(adapter, 8, sending)
    stream.metrics = metrics
    for token in range(50, 55):
        stream.on_token(GenerateToken(token, "t", FinishReason.MAX_TOKENS if token == 54 else None))
    done = result(list(range(50, 55)), "ttttt")
    done.timing.inter_token = [0.02, 0.021, 0.019, 0.022]
    stream.on_done(done, None)
    sending.run()
    assert sender.sent == [(list(range(50, 55)), "ttttt", FINAL)]
    names = [name for name, _, _ in RecordingFamily.log]
    assert "tritongen:generation_tokens_total" in names and "tritongen:time_per_output_token_seconds" not in names
    observing.run()
    tpot = [v for name, call, v in RecordingFamily.log if name == "tritongen:time_per_output_token_seconds"]
    assert tpot == [0.02, 0.021, 0.019, 0.022]


def test_gauges_are_set_only_when_they_change(adapter, monkeypatch):
    """Each gauge update is a round trip to the server: a snapshot whose values held still sends none."""
    monkeypatch.setattr(adapter.pb_utils, "MetricFamily", RecordingFamily)
    RecordingFamily.log = []
    sending = PausedJobThread()
    metrics = adapter.GeneratorMetrics({"model": "generator", "version": "1"}, sending.put, sending.put,
                                       {"block_size": "16"})
    used = {"pages": 10}
    engine = types.SimpleNamespace(snapshot=lambda: EngineSnapshot(
        running=3, waiting=0, swapped=0, pages_used=used["pages"], pages_free=100 - used["pages"],
        mask_seconds=0.0, drafted_tokens=0, accepted_tokens=0, verify_calls=0))

    def published() -> dict:
        RecordingFamily.log.clear()
        metrics.engine_stepped(engine, force=True)
        sending.run()
        return {name.removeprefix("tritongen:"): v for name, call, v in RecordingFamily.log if call == "set"}

    assert published() == {"num_requests_running": 3, "num_requests_waiting": 0, "num_requests_swapped": 0,
                           "kv_pages_used": 10, "kv_pages_free": 90, "kv_cache_usage_perc": 0.1,
                           "vllm:num_requests_running": 3, "vllm:num_requests_waiting": 0,
                           "vllm:kv_cache_usage_perc": 0.1, "vllm:gpu_cache_usage_perc": 0.1}
    assert published() == {}
    used["pages"] = 12
    assert published() == {"kv_pages_used": 12, "kv_pages_free": 88, "kv_cache_usage_perc": 0.12,
                           "vllm:kv_cache_usage_perc": 0.12, "vllm:gpu_cache_usage_perc": 0.12}


def test_router_aliases_and_the_cache_info_follow_the_setting(adapter, monkeypatch):
    """llm-d and the Inference Extension scrape vLLM's names; an operator may turn those aliases off."""
    monkeypatch.setattr(adapter.pb_utils, "MetricFamily", RecordingFamily)
    for aliases in (True, False):
        RecordingFamily.log, RecordingFamily.labels = [], {}
        adapter.GeneratorMetrics({"model": "generator", "version": "1"}, print, print,
                                 {"block_size": "16", "num_gpu_blocks": "1024"}, aliases)
        info = {name for name, call, v in RecordingFamily.log if call == "set" and v == 1}
        assert "tritongen:cache_config_info" in info
        assert RecordingFamily.labels["tritongen:cache_config_info"][0]["block_size"] == "16"
        vllm = sorted(n for n in RecordingFamily.labels if n.startswith("vllm:"))
        assert vllm == (["vllm:cache_config_info", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
                         "vllm:num_requests_running", "vllm:num_requests_waiting"] if aliases else [])
        if aliases:
            assert RecordingFamily.labels["vllm:num_requests_waiting"][0]["model_name"] == "generator"
            assert "vllm:cache_config_info" in info
