"""A dead engine or response thread: every request gets an error, and Triton reports the generator not ready."""

from __future__ import annotations

import json
import os
import queue
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from conftest import REPOSITORY
from triton_helpers import model_ready, start_server, stop_server_later, tiny_repository

pytestmark = pytest.mark.server


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_dead_engine_fails_requests_and_the_model_reports_not_ready(tmp_path, monkeypatch):
    monkeypatch.setitem(os.environ, "TRITONGEN_FAULT_INJECTION", "1")
    server = start_server(tiny_repository(tmp_path / "repo"), tmp_path / "server.log")
    try:
        url = server.url_http + "/v2/models/generator/generate"
        assert model_ready(server)
        status, body = post(url, {"text_input": "Hello", "max_tokens": 400, "ignore_eos": True,
                                  "parameters": {"tritongen_fault": "engine_crash"}})
        # The request learns that the engine stopped, not what killed it: the server log has that.
        assert status >= 400 and body["error"].startswith("[tritongen:stopped] ") and "injected" not in body["error"]
        deadline = time.time() + 30
        while model_ready(server) and time.time() < deadline:
            time.sleep(0.2)
        assert not model_ready(server)
        status, body = post(url, {"text_input": "Hello", "max_tokens": 2})
        assert status >= 400  # refused at once, never a hang
        log = server.log_file.read_text(errors="replace")
        assert "engine thread died: RuntimeError('injected engine fault')" in log
    finally:
        stop_server_later(server)  # a dead engine's server takes seconds to exit: the next test need not wait


def test_dead_response_thread_ends_open_requests_and_refuses_the_next(target_gqa_folder, tmp_path, monkeypatch):
    """The thread that sends every response dies: the request in flight gets an error, the next one is refused."""
    monkeypatch.setitem(os.environ, "TRITONGEN_FAULT_INJECTION", "1")
    server = start_server(REPOSITORY, tmp_path / "server.log")
    try:
        events: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(server.url_grpc)
        client.start_stream(callback=lambda result, error: events.put((result, error)))
        inputs = [grpcclient.InferInput("text_input", [1], "BYTES"), grpcclient.InferInput("max_tokens", [1], "INT32"),
                  grpcclient.InferInput("ignore_eos", [1], "BOOL"), grpcclient.InferInput("stream", [1], "BOOL")]
        for tensor, value in zip(inputs, [np.array([b"Once upon a time"], np.object_), np.array([1500], np.int32),
                                          np.array([True]), np.array([True])]):
            tensor.set_data_from_numpy(value)
        client.async_stream_infer("generator", inputs, request_id="open", enable_empty_final_response=True)
        result, error = events.get(timeout=60)
        assert error is None  # tokens are flowing
        url = server.url_http + "/v2/models/generator/generate"
        # UNAVAILABLE from the model (Triton's HTTP generate endpoint answers 400 for every error a model sends).
        status, body = post(
            url, {"text_input": "Hi", "max_tokens": 2, "parameters": {"tritongen_fault": "send_thread_exit"}}
        )
        assert status == 400 and "thread stopped" in body["error"], (status, body)
        start = time.monotonic()
        status, body = post(url, {"text_input": "Hi", "max_tokens": 2})
        elapsed = time.monotonic() - start
        print(f"next request: {status} {body} after {elapsed:.2f}s")
        # Refused by the model, or by Triton once the model has unloaded itself; at once either way.
        assert status >= 400 and elapsed < 1.0
        assert "thread stopped" in body["error"] or "generator" in body["error"], body
        deadline = time.monotonic() + 10
        while True:  # the open stream ends with the error, not silence
            result, error = events.get(timeout=max(0.1, deadline - time.monotonic()))
            if error is not None:
                break
        assert "thread stopped" in str(error)
        client.stop_stream()
        client.close()
        assert "response thread stopped" in server.log_file.read_text(errors="replace")
    finally:
        stop_server_later(server)
