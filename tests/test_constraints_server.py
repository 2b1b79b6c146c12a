"""The constrained-decoding suite on SmolLM2 through the real tritonserver.

Every case of tests/constraint_suite.py runs greedy and at temperature 0.8
with three seeds, 16 requests in flight over gRPC streaming; half the runs
send the constraint as guided_decoding_guide_type/guided_decoding_guide
tensors, half as sampling_parameters.guided_decoding (vLLM's spelling).
Every output that finishes on its own must validate; at least 90% must
finish on their own; a max_tokens cut is reported as such and never
counted valid. Bad constraints get an error before any token.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from constraint_suite import MAX_TOKENS, SUITE, Case, judge, report, suite_runs
from triton_helpers import tensor

pytestmark = pytest.mark.server
IN_FLIGHT = 16


@pytest.fixture(scope="module")
def server(generator_server):
    return generator_server


def text_tensor(name: str, text: str):
    return tensor(name, np.array([text.encode()], dtype=object))


def suite_inputs(case: Case, temperature: float, seed: int | None, max_tokens: int, via_tensors: bool) -> list:
    inputs = [text_tensor("messages", json.dumps(case.messages())), tensor("stream", np.array([True])),
              tensor("max_tokens", np.array([max_tokens], dtype=np.int32)),
              tensor("temperature", np.array([temperature], dtype=np.float32))]
    if seed is not None:
        inputs.append(tensor("seed", np.array([seed], dtype=np.uint64)))
    guide = case.guide_tensors()
    if via_tensors and guide is not None:
        inputs.append(text_tensor("guided_decoding_guide_type", guide[0]))
        if guide[1]:
            inputs.append(text_tensor("guided_decoding_guide", guide[1]))
    else:
        inputs.append(text_tensor("sampling_parameters", json.dumps({"guided_decoding": case.guided_decoding()})))
    return inputs


class StreamWorker:
    """One gRPC stream that runs one request at a time."""

    def __init__(self, server):
        self.events: queue.Queue = queue.Queue()
        self.client = grpcclient.InferenceServerClient(server.url_grpc)
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error)))
        self.count = 0

    def run(self, inputs: list, timeout: float = 300) -> dict:
        """Streamed pieces joined: text, finish_reason, token count, responses before the last; or error."""
        self.count += 1
        self.client.async_stream_infer("generator", inputs, request_id=str(self.count))
        pieces, ids, finish, responses = [], [], "", 0
        while True:
            result, error = self.events.get(timeout=timeout)
            if error is not None:
                return {"error": str(error), "responses": responses}
            responses += 1
            pieces.append(result.as_numpy("text_output")[0].decode())
            ids += result.as_numpy("output_ids").tolist()
            finish = result.as_numpy("finish_reason")[0].decode()
            if result.get_response().parameters["triton_final_response"].bool_param:
                return {"text": "".join(pieces), "finish_reason": finish, "num_tokens": len(ids),
                        "responses": responses, "error": None}

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def run_concurrently(server, jobs: list, make_inputs, in_flight: int = IN_FLIGHT) -> list[dict]:
    todo: queue.Queue = queue.Queue()
    for index, job in enumerate(jobs):
        todo.put((index, job))
    results: list = [None] * len(jobs)

    def work():
        worker = StreamWorker(server)
        try:
            while True:
                try:
                    index, job = todo.get_nowait()
                except queue.Empty:
                    return
                results[index] = worker.run(make_inputs(index, job))
        finally:
            worker.close()

    threads = [threading.Thread(target=work) for _ in range(in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_suite_outputs_validate_through_triton(server):
    jobs = suite_runs()
    t0 = time.time()
    got = run_concurrently(server, jobs, lambda i, job: suite_inputs(*job, MAX_TOKENS, via_tensors=i % 2 == 0))
    elapsed = time.time() - t0
    errors = [(job[0].name, g["error"]) for job, g in zip(jobs, got) if g["error"] is not None]
    assert not errors, errors
    outcomes = [judge(case, t, s, g["finish_reason"], g["text"], g["num_tokens"])
                for (case, t, s), g in zip(jobs, got)]
    figures = report(outcomes, f"constraint suite on SmolLM2 through Triton: {len(SUITE)} constraints, "
                               f"{len(jobs)} runs, {IN_FLIGHT} in flight over gRPC streaming, {elapsed:.0f}s "
                               f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    for o in outcomes:
        assert o.finish_reason in ("eos_token", "max_tokens"), (o.case, o.finish_reason)
        if o.finish_reason == "max_tokens":
            assert o.num_tokens == MAX_TOKENS, (o.case, o.num_tokens)
    assert figures.invalid == [], [(o.case, o.temperature, o.seed, o.error, o.text) for o in figures.invalid]
    assert figures.valid == figures.natural
    assert figures.natural_pct >= 90.0, figures.line()
    greedy = {o.case: o.text for o in outcomes if o.temperature == 0.0}
    seeded = [o for o in outcomes if o.temperature > 0]
    assert len({o.text for o in seeded}) > len(SUITE), "sampling with different seeds should vary the outputs"
    assert len(greedy) == len(SUITE)
    deadline = time.time() + 10
    while scrape(server, "tritongen:constraint_mask_seconds_total") <= 0 and time.time() < deadline:
        time.sleep(0.3)
    assert scrape(server, "tritongen:constraint_mask_seconds_total") > 0


def test_max_tokens_cut_is_reported_and_not_valid(server):
    case = next(c for c in SUITE if c.name == "meeting")
    worker = StreamWorker(server)
    try:
        for via_tensors in (True, False):
            got = worker.run(suite_inputs(case, 0.0, None, 6, via_tensors))
            assert got["error"] is None and got["finish_reason"] == "max_tokens" and got["num_tokens"] == 6
            outcome = judge(case, 0.0, None, got["finish_reason"], got["text"], got["num_tokens"])
            assert not outcome.natural and not outcome.valid
    finally:
        worker.close()


BAD = [
    ({"guided_decoding_guide_type": "json_schema", "guided_decoding_guide": '{"type": "object", "properties": '},
     "invalid json_schema constraint"),
    ({"guided_decoding_guide_type": "regex", "guided_decoding_guide": "[0-9"}, "invalid regex constraint"),
    ({"guided_decoding_guide_type": "lark", "guided_decoding_guide": "start: missing_rule"}, "invalid lark constraint"),
    ({"guided_decoding_guide_type": "xml", "guided_decoding_guide": "<a/>"}, "guided_decoding_guide_type"),
    ({"guided_decoding_guide_type": "regex"}, "guided_decoding_guide"),
    ({"sampling_parameters": json.dumps({"guided_decoding": {"grammar": 'start: ("a"'}})}, "invalid lark constraint"),
    ({"sampling_parameters": json.dumps({"guided_decoding": {"json": {"type": "strin"}}})},
     "invalid json_schema constraint"),
    ({"sampling_parameters": json.dumps({"guided_decoding": {"choice": []}})}, "choice"),
    ({"sampling_parameters": json.dumps({"guided_decoding": {"regex": "a", "choice": ["a"]}})}, "exactly one"),
]


@pytest.mark.parametrize("fields, message", BAD, ids=[m + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_constraint_errors_before_any_token(server, fields, message):
    inputs = [text_tensor("text_input", "Give me a number."), tensor("stream", np.array([True]))]
    inputs += [text_tensor(name, value) for name, value in fields.items()]
    worker = StreamWorker(server)
    try:
        got = worker.run(inputs, timeout=60)
        assert got["responses"] == 0 and got["error"] is not None and message in got["error"], got
        ok = worker.run([text_tensor("text_input", "Hello"), tensor("max_tokens", np.array([2], dtype=np.int32))])
        assert ok["error"] is None and ok["num_tokens"] == 2
    finally:
        worker.close()


def test_http_generate_with_guided_decoding(server):
    """The generate extension passes the guide inputs through; the answer is the constrained text."""
    case = next(c for c in SUITE if c.name == "rgb")
    body = {"messages": json.dumps(case.messages()), "max_tokens": MAX_TOKENS, "exclude_input_in_output": True,
            "guided_decoding_guide_type": "json_schema", "guided_decoding_guide": json.dumps(case.schema)}
    request = urllib.request.Request(server.url_http + "/v2/models/generator/generate",
                                     data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=120) as r:
        out = json.loads(r.read().decode())
    assert out["finish_reason"] == "eos_token"
    assert case.validate(out["text_output"]) is None, out["text_output"]


def scrape(server, name: str) -> float:
    try:
        with urllib.request.urlopen(server.url_metrics, timeout=10) as r:
            lines = r.read().decode().splitlines()
    except urllib.error.URLError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))
