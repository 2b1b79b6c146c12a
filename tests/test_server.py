"""The real tritonserver with the generator: gRPC streaming, HTTP generate, errors, cancellation."""

from __future__ import annotations

import json
import queue
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from conftest import REPOSITORY
from tritongen.serve import TritonServer
from tritongen.tokenizer import TextTokenizer

pytestmark = pytest.mark.server
FRANCE = json.dumps([{"role": "user", "content": "What is the capital of France?"}])


@pytest.fixture(scope="module")
def server(target_folder, tmp_path_factory):
    log = tmp_path_factory.mktemp("triton") / "server.log"
    with TritonServer(REPOSITORY, ["generator"], http_port=0, grpc_port=0, metrics_port=0, log_file=log) as srv:
        yield srv


def tensor(name, value):
    value = np.asarray(value)
    t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t


def stream(server, inputs, cancel_after=None, timeout=60):
    """Run one gRPC streaming request; return the list of (result, error) it produced."""
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    client.async_stream_infer("generator", inputs, request_id="r1")
    got = []
    while True:
        result, error = events.get(timeout=timeout)
        got.append((result, error))
        if cancel_after is not None and len(got) >= cancel_after:
            client.stop_stream(cancel_requests=True)
            return got
        if error is not None or result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    return got


def post(server, path, body):
    request = urllib.request.Request(server.url_http + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_grpc_stream_of_chat_answer(server, target_folder):
    got = stream(server, [tensor("messages", np.array([FRANCE.encode()], dtype=object)),
                          tensor("stream", np.array([True]))])
    assert all(error is None for _, error in got)
    results = [r for r, _ in got]
    text = "".join(r.as_numpy("text_output")[0].decode() for r in results)
    assert text == "The capital of France is Paris."
    assert len(results) > 3
    assert [r.as_numpy("finish_reason")[0].decode() for r in results[:-1]] == [""] * (len(results) - 1)
    assert results[-1].as_numpy("finish_reason")[0].decode() == "eos_token"
    tok = TextTokenizer(target_folder)
    prompt_len = len(tok.encode(tok.render_chat(json.loads(FRANCE))))
    assert {int(r.as_numpy("num_input_tokens")[0]) for r in results} == {prompt_len}
    ids = np.concatenate([r.as_numpy("output_ids") for r in results])
    assert sum(int(r.as_numpy("num_output_tokens")[0]) for r in results) == len(ids)
    assert tok.decode(list(ids)) == text


def test_http_generate_echoes_prompt_and_counts_tokens(server):
    status, body = post(server, "/v2/models/generator/generate", {"text_input": "The capital of France is", "max_tokens": 6})
    assert status == 200, body
    out = json.loads(body)
    assert out["text_output"].startswith("The capital of France is Paris")
    assert out["finish_reason"] == "max_tokens" and out["num_output_tokens"] == 6
    status, body = post(server, "/v2/models/generator/generate",
                        {"text_input": "The capital of France is", "max_tokens": 6, "exclude_input_in_output": True})
    assert json.loads(body)["text_output"] == out["text_output"][len("The capital of France is"):]


def test_http_generate_stream_sends_sse_events(server):
    body = {"text_input": "Count: one, two, three,", "max_tokens": 10, "stream": True, "stop_words": ["six"]}
    status, text = post(server, "/v2/models/generator/generate_stream", body)
    assert status == 200
    events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    assert len(events) > 1
    finishes = [e["finish_reason"] for e in events]
    assert all(f == "" for f in finishes[:-1]) and finishes[-1] in ("max_tokens", "stop_sequence:0")
    streamed = "".join(e["text_output"] for e in events)
    assert "six" not in streamed
    status, whole = post(server, "/v2/models/generator/generate", {**body, "stream": False, "exclude_input_in_output": True})
    assert json.loads(whole)["text_output"] == streamed


@pytest.mark.parametrize("body, field", [
    ({"max_tokens": 4}, "text_input, input_ids or messages"),
    ({"text_input": "hi", "temperature": -1.0}, "temperature"),
    ({"text_input": "hi", "sampling_parameters": "{\"tempature\": 1}"}, "tempature"),
    ({"text_input": "hi", "sampling_parameters": "{\"max_tokens\": \"abc\"}"}, "max_tokens"),
])
def test_bad_request_gets_clear_error_and_server_keeps_serving(server, body, field):
    status, text = post(server, "/v2/models/generator/generate", body)
    assert status == 400 and field in json.loads(text)["error"]
    status, text = post(server, "/v2/models/generator/generate", {"text_input": "Hello", "max_tokens": 2})
    assert status == 200 and json.loads(text)["num_output_tokens"] == 2


def test_grpc_error_arrives_in_the_stream(server):
    got = stream(server, [tensor("text_input", np.array([b"hi"], dtype=object)),
                          tensor("temperature", np.array([-0.5], dtype=np.float32))])
    assert len(got) == 1 and got[0][1] is not None and "temperature" in str(got[0][1])


def test_cancelled_stream_stops_generating(server):
    inputs = [tensor("text_input", np.array([b"Write a long story about a dragon."], dtype=object)),
              tensor("max_tokens", np.array([2000], dtype=np.int32)),
              tensor("ignore_eos", np.array([True])), tensor("stream", np.array([True]))]
    got = stream(server, inputs, cancel_after=3)
    assert len(got) == 3
    deadline = time.time() + 20
    while time.time() < deadline:
        lines = [ln for ln in server.log_file.read_text(errors="replace").splitlines() if "cancelled after" in ln]
        if lines:
            break
        time.sleep(0.2)
    assert lines, "the generator never reported the cancellation"
    generated = int(lines[-1].split("cancelled after ")[1].split()[0])
    assert generated < 200
    status, text = post(server, "/v2/models/generator/generate", {"text_input": "Hello", "max_tokens": 2})
    assert status == 200
