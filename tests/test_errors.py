"""The error taxonomy: each type's wire code survives the trip to a front end, and a failure during generation
reaches the client as "generation failed" with the details in the server log only.

Unit level: a stand-in for triton_python_backend_utils (the responder), stubs for the Triton client.
"""

from __future__ import annotations

import asyncio
import sys
import types

import numpy as np
import pytest

from tritongen.dynamo.triton_stream import GeneratorStream
from tritongen.engine.options import GenerateOptions, GenerateRequest
from tritongen.errors import (
    KINDS,
    EngineOverloaded,
    EngineStopped,
    InvalidOption,
    RequestFailed,
    SessionBusy,
    from_wire,
)
from tritongen.openai_api.errors import from_generator
from tritongen.openai_api.generator_client import GeneratorClient
from tritongen.triton.request_inputs import parse_request

FAILED = "[tritongen:failed] generation failed; the server log has the details"
EXAMPLES = [InvalidOption("max_tokens", "max_tokens must be at least 1"), EngineOverloaded("3 requests wait"),
            EngineStopped("the engine stopped"), SessionBusy("session 's' already has a request in flight"),
            RequestFailed("constraint failed: /secret/path")]


@pytest.mark.parametrize("error", EXAMPLES[:-1], ids=lambda e: e.code)
def test_every_kind_reads_back_from_its_message(error):
    assert from_wire(error.wire()) == (type(error), str(error))


def test_a_failure_goes_out_without_what_failed():
    assert RequestFailed("constraint failed: /secret/path").wire() == FAILED
    assert from_wire(FAILED) == (RequestFailed, "generation failed; the server log has the details")


def test_the_code_is_read_at_the_start_only_and_must_be_known():
    assert from_wire("Request for unknown model: 'generator' is not found") is None  # Triton's own
    assert from_wire("session '[tritongen:overloaded] ' already has a request in flight") is None
    assert from_wire("[tritongen:no_such_code] x") is None
    assert sorted(KINDS) == ["failed", "invalid", "overloaded", "session_busy", "stopped"]


def test_each_kind_has_its_http_status_and_a_triton_code():
    assert {e.code: (e.http_status, e.triton_code) for e in EXAMPLES} == {
        "invalid": (400, "INVALID_ARG"), "overloaded": (429, "UNAVAILABLE"), "stopped": (503, "UNAVAILABLE"),
        "session_busy": (409, "ALREADY_EXISTS"), "failed": (500, "INTERNAL")}


def test_a_second_request_on_a_busy_session_is_session_busy(tiny):
    tiny.submit(GenerateRequest("Hello", GenerateOptions(max_new_tokens=64)), session_id="s")
    with pytest.raises(SessionBusy, match="session 's' already has a request in flight"):
        tiny.submit(GenerateRequest("Hello", GenerateOptions(max_new_tokens=2)), session_id="s")


# ---- the responder: types to Triton responses ---------------------------------------------------------------


@pytest.fixture
def responder(monkeypatch):
    """tritongen.triton.responder against a stand-in pb_utils; `.logged` holds what it logged as errors."""
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    class TritonError:
        INVALID_ARG, UNAVAILABLE, ALREADY_EXISTS, INTERNAL = "INVALID_ARG", "UNAVAILABLE", "ALREADY_EXISTS", "INTERNAL"

        def __init__(self, message, code):
            self.message, self.code = message, code

    class InferenceResponse:
        def __init__(self, output_tensors=(), error=None):
            self.error = error

    pb.TritonError, pb.InferenceResponse = TritonError, InferenceResponse
    pb.logged = []
    pb.Logger = types.SimpleNamespace(log_error=pb.logged.append, log_info=lambda message: None)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    monkeypatch.delitem(sys.modules, "tritongen.triton.responder", raising=False)
    import tritongen.triton.responder as module

    module.logged = pb.logged
    return module


class Sender:
    def __init__(self):
        self.sent = []

    def send(self, response=None, flags=0):
        self.sent.append((response, flags))


class Now:
    def put(self, job):
        job()


def final_error(responder, error):
    parsed = parse_request({"input_ids": np.array([1, 2, 3])}, {}, {}, None)
    sender = Sender()
    stream = responder.RequestResponder(sender, parsed, [1, 2, 3], None, types.SimpleNamespace(), Now(),
                                        {"text_output"}, 1, request_id="client-7")
    stream.on_done(None, error)
    (response, flags), = sender.sent
    assert flags == 1
    return response.error


def test_a_failure_during_generation_reaches_the_client_without_its_text(responder):
    try:
        raise RuntimeError("constraint rejected token 42: /secret/path")
    except RuntimeError as exc:
        error = final_error(responder, exc)
    assert (error.message, error.code) == (FAILED, "INTERNAL")
    logged, = responder.logged
    assert "client-7" in logged and "constraint rejected token 42: /secret/path" in logged and "Traceback" in logged


@pytest.mark.parametrize("error", EXAMPLES[1:-1], ids=lambda e: e.code)
def test_a_typed_error_goes_out_with_its_own_code(responder, error):
    sent = final_error(responder, error)
    assert (sent.message, sent.code) == (error.wire(), error.triton_code) and responder.logged == []


def test_a_request_failed_in_the_engine_is_logged_and_goes_out_without_its_text(responder):
    sent = final_error(responder, RequestFailed("constraint failed: /secret/path"))
    assert (sent.message, sent.code) == (FAILED, "INTERNAL")
    logged, = responder.logged
    assert "client-7" in logged and "constraint failed: /secret/path" in logged


# ---- the front ends: the code back to a type ----------------------------------------------------------------


@pytest.mark.parametrize("error, status", list(zip(EXAMPLES, [400, 429, 503, 409, 500])), ids=str)
def test_the_openai_api_answers_each_kind_with_its_status(error, status):
    kind, text = from_wire(error.wire())
    answer = from_generator(kind, text, error.wire())
    assert answer.status == status
    if status in (400, 409):
        assert answer.message == str(error)  # the request's own fault, as the generator said it
    else:
        assert answer.message.startswith("the generator is") or answer.message.startswith("the generator failed")


class ReadyStub:
    def __init__(self, ready: bool):
        self.ready = ready

    async def is_ready(self):
        return self.ready

    async def is_model_ready(self, model):
        return self.ready


@pytest.mark.parametrize("ready, status", [(True, 500), (False, 503)])
def test_an_error_without_a_code_is_judged_by_readiness_not_its_words(ready, status):
    """Triton's own errors (the generator not loaded, its stub gone) carry no code token."""
    message = "Request for unknown model: 'generator' is not found"
    openai = asyncio.run(GeneratorClient._error(ReadyStub(ready), message))
    assert openai.status == status and openai.detail == message
    stream = types.SimpleNamespace(_client=ReadyStub(ready), model="generator")
    dynamo = asyncio.run(GeneratorStream._error(stream, message))
    assert dynamo.kind is (RequestFailed if ready else EngineStopped)
    tagged = asyncio.run(GeneratorStream._error(stream, EngineOverloaded("3 requests wait").wire()))
    assert (tagged.kind, str(tagged)) == (EngineOverloaded, "3 requests wait")
