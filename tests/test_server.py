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

from tritongen.runtime.tokenizer import TextTokenizer
from tritongen.serve import scrape_metrics

from triton_helpers import cancelled_counts, tensor

pytestmark = pytest.mark.server
FRANCE = json.dumps([{"role": "user", "content": "What is the capital of France?"}])


@pytest.fixture(scope="module")
def server(generator_server):
    return generator_server


def stream(server, inputs, cancel_after=None, timeout=60, outputs=None):
    """Run one gRPC streaming request; return the list of (result, error) it produced."""
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    client.async_stream_infer("generator", inputs, request_id="r1",
                              outputs=[grpcclient.InferRequestedOutput(name) for name in outputs or []] or None)
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


def test_only_requested_outputs_are_sent(server):
    inputs = [tensor("text_input", np.array([b"The capital of France is"], dtype=object)),
              tensor("max_tokens", np.array([6], dtype=np.int32)), tensor("stream", np.array([True]))]
    everything = stream(server, inputs)
    chosen = stream(server, inputs, outputs=["output_ids", "finish_reason"])
    assert all(error is None for _, error in everything + chosen)
    names = [{o.name for o in r.get_response().outputs} for r, _ in chosen]
    assert names and all(n == {"output_ids", "finish_reason"} for n in names)
    assert len({o.name for o in everything[-1][0].get_response().outputs}) > 5
    ids = [np.concatenate([r.as_numpy("output_ids") for r, _ in got]).tolist() for got in (everything, chosen)]
    assert ids[0] == ids[1] and len(ids[0]) == 6
    assert chosen[-1][0].as_numpy("finish_reason")[0].decode() == "max_tokens"


def test_http_generate_echoes_prompt_and_counts_tokens(server):
    status, body = post(
        server, "/v2/models/generator/generate", {"text_input": "The capital of France is", "max_tokens": 6}
    )
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
    status, whole = post(
        server, "/v2/models/generator/generate", {**body, "stream": False, "exclude_input_in_output": True}
    )
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
    before = len(cancelled_counts(server))  # the server is shared: count only this request's line
    got = stream(server, inputs, cancel_after=3)
    assert len(got) == 3
    deadline = time.time() + 20
    while time.time() < deadline and len(cancelled_counts(server)) == before:
        time.sleep(0.2)
    counts = cancelled_counts(server)
    assert len(counts) > before, "the generator never reported the cancellation"
    generated = counts[-1]
    assert generated < 200
    status, text = post(server, "/v2/models/generator/generate", {"text_input": "Hello", "max_tokens": 2})
    assert status == 200


def test_session_turn_reuses_kv_and_reports_prefix_hit(server):
    first = {"text_input": "My name is Ada and I like to", "max_tokens": 5, "session_id": "chat-7",
             "exclude_input_in_output": True}
    status, text = post(server, "/v2/models/generator/generate", first)
    assert status == 200, text
    out1 = json.loads(text)
    follow = {"text_input": first["text_input"] + out1["text_output"] + " What is my name?", "max_tokens": 4,
              "session_id": "chat-7", "end_session": True}
    status, text = post(server, "/v2/models/generator/generate", follow)
    out2 = json.loads(text)
    assert status == 200 and out2["prefix_cache_hit_len"] >= out1["num_input_tokens"]
    status, text = post(server, "/v2/models/generator/generate", {"text_input": "hi", "priority": "urgent"})
    assert status == 400 and "priority" in json.loads(text)["error"]


def scrape(server) -> dict[str, float]:
    return scrape_metrics(server.url_metrics)


def test_metrics_families_report_plausible_values(server):
    before = scrape(server)  # the server is shared: other modules' requests are counted too
    for _ in range(2):
        status, _ = post(server, "/v2/models/generator/generate", {"text_input": "Tell me a joke", "max_tokens": 6})
        assert status == 200
    deadline = time.time() + 10
    while time.time() < deadline:
        m = scrape(server)
        # The per-token histogram is observed on a thread of its own, after the counters.
        if m.get("tritongen:request_success_total", 0) >= 2 and "tritongen:kv_pages_free" in m \
                and m.get("tritongen:time_per_output_token_seconds_count", 0) >= 10:
            break
        time.sleep(0.3)
    assert m["tritongen:prompt_tokens_total"] >= 8
    assert m["tritongen:generation_tokens_total"] >= 12
    assert m["tritongen:request_success_total"] >= 2
    assert "tritongen:prefix_cache_hit_tokens_total" in m
    for hist in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds"):
        assert m[f"tritongen:{hist}_count"] >= 2 and m[f"tritongen:{hist}_sum"] >= 0
    assert m["tritongen:time_per_output_token_seconds_count"] >= 10
    name = "tritongen:e2e_request_latency_seconds_sum"
    latency = m[name] - before.get(name, 0)
    assert 0 < latency < 60  # the two requests above, each well under a minute
    assert m["tritongen:kv_pages_free"] > 0 and m["tritongen:kv_pages_used"] >= 0
    for gauge in ("num_requests_running", "num_requests_waiting", "num_requests_swapped"):
        assert m[f"tritongen:{gauge}"] >= 0


def test_speculative_request_reports_draft_statistics_and_keeps_output(server):
    words = "alpha beta gamma delta " * 6
    body = {"text_input": f"Repeat exactly: {words}\nRepeat exactly: {words}", "max_tokens": 16,
            "exclude_input_in_output": True}
    status, plain = post(server, "/v2/models/generator/generate", body)
    assert status == 200, plain
    spec_body = {**body, "speculative": json.dumps({"mode": "prompt_lookup", "ngram": 2, "max_tokens": 4}),
                 "num_draft_tokens": 4}
    status, spec = post(server, "/v2/models/generator/generate", spec_body)
    assert status == 200, spec
    plain, spec = json.loads(plain), json.loads(spec)
    assert spec["text_output"] == plain["text_output"]
    assert spec["total_draft_tokens"] > 0 and 0 < spec["total_accepted_draft_tokens"] <= spec["total_draft_tokens"]
    assert plain["total_draft_tokens"] == 0
    for bad, field in ((json.dumps({"mode": "medusa"}), "speculative mode"),
                       (json.dumps({"mode": "draft_model", "path": "/etc/passwd"}), "path"),
                       ("not json", "speculative")):
        status, text = post(server, "/v2/models/generator/generate", {**body, "speculative": bad})
        assert status == 400 and field in json.loads(text)["error"]
