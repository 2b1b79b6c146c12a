"""The OpenAI-compatible API, driven by the official `openai` client against the real Triton.

Triton runs the generator on free ports; the API runs in-process under
uvicorn in a thread, talking to it over gRPC streaming.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx2
import jsonschema
import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
import uvicorn

from tritongen.openai_api import create_app
from tritongen.runtime.tokenizer import TextTokenizer
from tritongen.serve import free_port

from conftest import REPOSITORY
from triton_helpers import NO_HEADS, model_ready, small_repository, start_server, stop_server_later, tensor

pytestmark = pytest.mark.server
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
STORY = "Write a long story about a dragon."


@pytest.fixture(scope="module")
def triton(generator_server):
    return generator_server


@contextmanager
def running(app):
    """An app on a free port in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        assert thread.is_alive() and time.time() < deadline, "the OpenAI API did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def api(triton):
    with running(create_app(triton.url_grpc)) as url:
        yield url


@pytest.fixture(scope="module")
def client(api):
    return openai.OpenAI(base_url=api + "/v1", api_key="unused", max_retries=0, timeout=60)


def generator_directly(triton, messages) -> tuple[str, int, int]:
    """The generator's own answer over Triton gRPC: (text, num_input_tokens, num_output_tokens)."""
    events: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(triton.url_grpc)
    c.start_stream(callback=lambda result, error: events.put((result, error)))
    c.async_stream_infer("generator", [tensor("messages", np.array([json.dumps(messages).encode()], dtype=object)),
                                       tensor("exclude_input_in_output", np.array([True]))])
    result, error = events.get(timeout=60)
    c.stop_stream()
    c.close()
    assert error is None, error
    return (result.as_numpy("text_output")[0].decode(), int(result.as_numpy("num_input_tokens")[0]),
            int(result.as_numpy("num_output_tokens")[0]))


def cancellations(triton) -> list[int]:
    lines = triton.log_file.read_text(errors="replace").splitlines()
    return [int(ln.split("cancelled after ")[1].split()[0]) for ln in lines if "cancelled after " in ln]


def wait_for_cancellation(triton, before: int) -> int:
    deadline = time.time() + 20
    while time.time() < deadline:
        found = cancellations(triton)
        if len(found) > before:
            return found[-1]
        time.sleep(0.2)
    pytest.fail("the generator never reported the cancellation")


def test_models_lists_the_generator(client):
    assert [m.id for m in client.models.list().data] == ["generator"]


def test_chat_answer_and_usage_match_the_generator(client, triton):
    text, prompt_tokens, output_tokens = generator_directly(triton, FRANCE)
    out = client.chat.completions.create(model="generator", messages=FRANCE, temperature=0)
    assert text == "The capital of France is Paris."
    assert out.choices[0].message.content == text and out.choices[0].message.role == "assistant"
    assert out.choices[0].finish_reason == "stop" and out.object == "chat.completion"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (prompt_tokens, output_tokens)
    assert out.usage.total_tokens == prompt_tokens + output_tokens


def test_chat_streaming_sends_deltas_then_usage(client):
    chunks = list(client.chat.completions.create(model="generator", messages=FRANCE, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    deltas = [c for c in chunks if c.choices]
    assert len(deltas) > 3 and deltas[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in deltas) == "The capital of France is Paris."
    assert [c.choices[0].finish_reason for c in deltas] == [None] * (len(deltas) - 1) + ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 8

    two = list(client.chat.completions.create(model="generator", messages=FRANCE, temperature=0, stream=True,
                                              n=2, max_tokens=4))
    for index in (0, 1):
        mine = [c.choices[0] for c in two if c.choices[0].index == index]
        assert "".join(c.delta.content for c in mine) == "The capital of France"
        assert mine[-1].finish_reason == "length"


def test_completions_count_tokens_and_stream_the_same_text(client, target_folder):
    prompt = "The capital of France is"
    out = client.completions.create(model="generator", prompt=prompt, max_tokens=6, temperature=0)
    assert out.object == "text_completion" and out.choices[0].text.startswith(" Paris")
    assert out.choices[0].finish_reason == "length"
    assert out.usage.prompt_tokens == len(TextTokenizer(target_folder).encode(prompt))
    assert out.usage.completion_tokens == 6
    streamed = client.completions.create(model="generator", prompt=prompt, max_tokens=6, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == out.choices[0].text


def test_stop_ends_the_text_before_the_stop_string(client):
    full = client.completions.create(model="generator", prompt="Count: one, two, three,", max_tokens=12,
                                     temperature=0).choices[0].text
    stop = full.split()[1]  # a word from the middle of the greedy continuation
    out = client.completions.create(model="generator", prompt="Count: one, two, three,", max_tokens=12,
                                    temperature=0, stop=[stop, "never-generated"])
    assert out.choices[0].text == full[:full.index(stop)]
    assert out.choices[0].finish_reason == "stop"


def test_seed_makes_sampling_reproducible(client):
    ask = dict(model="generator", messages=[{"role": "user", "content": STORY}], temperature=0.8, max_tokens=16)
    single = client.chat.completions.create(seed=7, **ask)
    first = single.choices[0].message.content
    assert client.chat.completions.create(seed=7, **ask).choices[0].message.content == first
    three = client.chat.completions.create(seed=7, n=3, **ask)
    texts = [c.message.content for c in three.choices]
    assert [c.index for c in three.choices] == [0, 1, 2]
    assert texts[0] == first  # choice i samples with seed + i
    assert len(set(texts)) > 1
    assert three.usage.prompt_tokens == single.usage.prompt_tokens  # counted once, not once per choice
    assert single.usage.completion_tokens < three.usage.completion_tokens <= 3 * 16


def test_json_schema_response_validates(client):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    out = client.chat.completions.create(
        model="generator", temperature=0, max_tokens=60,
        messages=[{"role": "user", "content": "Describe a person called Ada, aged 36, as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
    value = json.loads(out.choices[0].message.content)
    assert set(value) == {"name", "age"}
    assert isinstance(value["name"], str) and len(value["name"]) <= 20
    assert isinstance(value["age"], int) and not isinstance(value["age"], bool)


def test_logprobs_in_chat_and_completions_shapes(client):
    chat = client.chat.completions.create(model="generator", messages=FRANCE, temperature=0, logprobs=True,
                                          top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    assert "".join(t.token for t in content) == chat.choices[0].message.content
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 and t.bytes == list(t.token.encode()) for t in content)
    assert all(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in content)
    text = client.completions.create(model="generator", prompt="The capital of France is", max_tokens=4,
                                     temperature=0, logprobs=3).choices[0]
    lp = text.logprobs
    assert "".join(lp.tokens) == text.text and len(lp.token_logprobs) == 4
    assert all(len(top) == 3 for top in lp.top_logprobs)
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(4)]


def test_invalid_requests_get_openai_errors(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="generator", messages=FRANCE, temperature=5)
    err = caught.value
    assert err.status_code == 400
    body = err.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == "temperature"
    # A fault only the generator can see (a schema it cannot compile) is still the client's: 400.
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="generator", messages=FRANCE, response_format={
            "type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "bogus"}}})
    assert "json_schema" in caught.value.response.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError):  # ... also when streaming: the error comes before the 200
        list(client.completions.create(model="generator", prompt="hi", stream=True, extra_body={
            "response_format": {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "bogus"}}}}))
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="gpt-4", prompt="hi")
    assert caught.value.response.json()["error"]["code"] == "model_not_found"


def test_json_past_the_depth_bound_is_a_400_naming_the_field_and_at_it_is_served(api, client):
    """Each top-level field may nest 64 levels (the bound every door holds): deeper is refused before the body is
    parsed (sent raw: the client's own json.dumps would recurse); a response format and a tool at the bound run."""
    start = '{"model": "generator", "messages": [{"role": "user", "content": "hi"}], '
    for field in ("response_format", "tools", "messages", "logit_bias"):
        status, _, body = post(api + "/v1/chat/completions", (start + f'"{field}": ' + "[" * 100_000 + "}").encode())
        assert status == 400 and body["error"]["param"] == field, body
    schema: dict = {"type": "integer"}
    for _ in range(61):  # 62 levels, two under the response format's own
        schema = {"type": "array", "items": schema}
    out = client.chat.completions.create(model="generator", messages=FRANCE, max_tokens=4, response_format={
        "type": "json_schema", "json_schema": {"name": "nested", "schema": schema}})
    assert out.choices[0].message.content.lstrip().startswith("[")
    tool = {"type": "function", "function": {"name": "f", "parameters": schema["items"]}}  # 61: three under tools
    out = client.chat.completions.create(model="generator", messages=FRANCE, max_tokens=4, tools=[tool],
                                         tool_choice="required")
    assert out.choices[0].finish_reason in ("length", "tool_calls")


def test_client_disconnect_cancels_the_generation(client, triton, api):
    before = len(cancellations(triton))
    stream = client.completions.create(model="generator", prompt=STORY, max_tokens=2000, stream=True,
                                       extra_body={"ignore_eos": True})
    for _, _chunk in zip(range(3), stream):
        pass
    stream.close()
    assert wait_for_cancellation(triton, before) < 200

    # Non-streaming: the client hangs up before the answer is ready.
    body = json.dumps({"model": "generator", "prompt": STORY, "max_tokens": 2000, "ignore_eos": True}).encode()
    host, port = api.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.5)
    assert wait_for_cancellation(triton, before + 1) < 200
    out = client.completions.create(model="generator", prompt="Hello", max_tokens=2)
    assert out.usage.completion_tokens == 2


def post(url: str, body: bytes, headers: dict | None = None) -> tuple[int, dict, dict]:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"{}")


def test_api_key_is_required_when_set(triton):
    with running(create_app(triton.url_grpc, api_key="s3cret")) as url:
        with pytest.raises(openai.AuthenticationError) as caught:
            openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
        assert caught.value.response.json()["error"]["code"] == "invalid_api_key"
        status, _, body = post(url + "/v1/completions", b'{"model": "generator", "prompt": "Hi"}')  # no header
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        good = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        assert good.completions.create(model="generator", prompt="Hello", max_tokens=2).usage.completion_tokens == 2
        with urllib.request.urlopen(url + "/health", timeout=10) as r:  # probes need no key
            assert r.status == 200


def test_body_size_is_limited_before_parsing(triton):
    with running(create_app(triton.url_grpc, max_body_bytes=10_000)) as url:
        big = json.dumps({"model": "generator", "prompt": "x" * 20_000}).encode()
        status, _, body = post(url + "/v1/completions", big)
        assert status == 413 and body["error"]["code"] == "request_too_large"

        # Chunked, no Content-Length: counted as it arrives. Three 4 KiB chunks, the body left unfinished:
        # the answer comes before the client would have sent the rest, and the server closes the connection.
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
                             b"1000\r\n" + big[i:i + 4096] + b"\r\n" for i in range(0, 3 * 4096, 4096)))
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer, answer[:200]
        assert b"connection: close" in answer.lower(), answer[:200]


def test_fan_out_and_integer_ranges_are_checked_before_any_generation(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="generator", prompt=["a"] * 20, n=4, max_tokens=1)
    assert caught.value.response.json()["error"]["param"] == "n" and "80 generations" in str(caught.value)
    for field, value in (("max_tokens", 2**32 + 5), ("max_tokens", 2**31), ("top_k", 2**40), ("min_tokens", 2**33)):
        with pytest.raises(openai.BadRequestError) as caught:  # never wrapped around to a small int32
            client.completions.create(model="generator", prompt="Hi", extra_body={field: value})
        assert caught.value.response.json()["error"]["param"] == field
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="generator", prompt=[[1, 2**64]])
    assert caught.value.response.json()["error"]["param"] == "prompt"


@pytest.fixture(scope="module")
def busy_triton(target_folder, tmp_path_factory):
    """One sequence at a time, one waiting: overload is easy to reach; fault injection to kill the engine."""
    root = tmp_path_factory.mktemp("busy")
    repository = small_repository(root / "repo", max_num_seqs="1", max_queue_len="1", **NO_HEADS)
    env = dict(os.environ, TRITONGEN_FAULT_INJECTION="1")
    saved, os.environ = os.environ, env
    try:
        server = start_server(repository, root / "server.log")
    finally:
        os.environ = saved
    yield server
    stop_server_later(server)  # its engine was killed: the short exit timeout keeps the shutdown short


def test_overload_is_429_with_retry_after_and_the_official_client_retries(busy_triton):
    with running(create_app(busy_triton.url_grpc)) as url:
        body = json.dumps({"model": "generator", "prompt": STORY, "max_tokens": 40, "ignore_eos": True}).encode()
        outcomes: list = []
        threads = [threading.Thread(target=lambda: outcomes.append(post(url + "/v1/completions", body)))
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        refused = [(h, b) for status, h, b in outcomes if status == 429]
        assert refused and all(status in (200, 429) for status, _, _ in outcomes), outcomes
        headers, error = refused[0]
        assert headers["retry-after"] == "1" and error["error"]["code"] == "overloaded"

        statuses: list[int] = []
        http = httpx2.Client(event_hooks={"response": [lambda r: statuses.append(r.status_code)]})
        retrying = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=8, http_client=http)
        done: list = []
        threads = [threading.Thread(target=lambda: done.append(retrying.completions.create(
            model="generator", prompt=STORY, max_tokens=20, extra_body={"ignore_eos": True}))) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        print(f"statuses seen by the official client: {statuses}")
        assert len(done) == 5 and all(c.usage.completion_tokens == 20 for c in done)
        assert 429 in statuses  # refused at first, retried after Retry-After, then served


def test_a_dead_engine_is_503_without_internals(busy_triton):
    with running(create_app(busy_triton.url_grpc)) as url:
        crash = grpcclient.InferInput("text_input", [1], "BYTES")
        crash.set_data_from_numpy(np.array([b"Hello"], dtype=object))
        c = grpcclient.InferenceServerClient(busy_triton.url_grpc)
        events: queue.Queue = queue.Queue()
        c.start_stream(callback=lambda result, error: events.put((result, error)))
        c.async_stream_infer("generator", [crash], parameters={"tritongen_fault": "engine_crash"})
        assert events.get(timeout=60)[1] is not None
        c.stop_stream()
        c.close()
        for moment in ("while the model unloads itself", "after"):
            status, headers, body = post(url + "/v1/completions",
                                         json.dumps({"model": "generator", "prompt": "Hi", "max_tokens": 2}).encode())
            message = body["error"]["message"]
            assert status == 503 and headers["retry-after"] == "1", (moment, status, body)
            assert "Triton" not in message and "127.0.0.1" not in message and "engine" not in message, message
            deadline = time.monotonic() + 30
            while model_ready(busy_triton):
                assert time.monotonic() < deadline, "the generator did not unload itself"
                time.sleep(0.1)


def tool(name: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"The {name.replace('_', ' ')} tool.",
                                             "parameters": {"type": "object", "properties": properties,
                                                            "required": required, "additionalProperties": False}}}


STR = {"type": "string", "maxLength": 16}
INT = {"type": "integer", "minimum": 0, "maximum": 1000}
TOOLS = [
    tool("get_weather", {"city": STR, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    tool("add_numbers", {"a": INT, "b": INT}, ["a", "b"]),
    tool("send_email", {"to": STR, "subject": STR, "urgent": {"type": "boolean"}}, ["to", "subject"]),
    tool("book_flight", {"from": STR, "to": STR, "passengers": INT}, ["from", "to", "passengers"]),
    tool("search_web", {"query": STR, "max_results": {"type": "integer", "minimum": 1, "maximum": 10}}, ["query"]),
    tool("create_event", {"title": STR, "day": {"type": "string", "enum": ["mon", "tue", "wed", "thu", "fri"]},
                          "attendees": {"type": "array", "items": STR, "maxItems": 3}}, ["title", "day"]),
    tool("set_alarm", {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                       "minute": {"type": "integer", "minimum": 0, "maximum": 59}}, ["hour", "minute"]),
    tool("translate", {"text": STR, "target": {"type": "string", "enum": ["fr", "de", "es"]}}, ["text", "target"]),
    tool("order_pizza", {"size": {"type": "string", "enum": ["small", "large"]},
                         "toppings": {"type": "array", "items": {"type": "string", "enum": ["ham", "olive", "cheese"]},
                                      "maxItems": 3}}, ["size"]),
    tool("convert_currency", {"amount": {"type": "number", "minimum": 0, "maximum": 100000},
                              "from": {"type": "string", "enum": ["USD", "EUR"]},
                              "to": {"type": "string", "enum": ["USD", "EUR"]}}, ["amount", "from", "to"]),
    tool("lookup_user", {"user": {"type": "object", "properties": {"id": INT, "name": STR},
                                  "required": ["id"], "additionalProperties": False}}, ["user"]),
    tool("rate_movie", {"title": STR, "stars": {"type": "integer", "minimum": 1, "maximum": 5}}, ["title", "stars"]),
    tool("play_song", {"artist": STR, "song": STR, "shuffle": {"type": "boolean"}}, ["song"]),
    tool("get_stock", {"ticker": {"type": "string", "pattern": "^[A-Z]{1,5}$"}}, ["ticker"]),
    tool("reserve_table", {"people": {"type": "integer", "minimum": 1, "maximum": 12},
                           "time": {"type": "string", "enum": ["18:00", "19:00", "20:00"]},
                           "notes": {"type": "array", "items": STR, "maxItems": 2}}, ["people", "time"]),
    tool("find_recipe", {"ingredients": {"type": "array", "items": STR, "minItems": 1, "maxItems": 3},
                         "vegetarian": {"type": "boolean"}}, ["ingredients"]),
    tool("track_package", {"carrier": {"type": "string", "enum": ["ups", "dhl"]}, "code": STR}, ["carrier", "code"]),
    tool("schedule_meeting", {"with": {"type": "array", "items": {"type": "object", "properties": {"name": STR},
                                                                   "required": ["name"], "additionalProperties": False},
                                       "maxItems": 2}, "minutes": INT}, ["with"]),
    tool("set_thermostat", {"room": STR, "celsius": {"type": "number", "minimum": 10, "maximum": 30}}, ["celsius"]),
    tool("log_workout", {"kind": {"type": "string", "enum": ["run", "swim", "bike"]}, "km": INT,
                         "details": {"type": "object", "properties": {"felt": {"type": "string",
                                                                               "enum": ["good", "bad"]}},
                                     "additionalProperties": False}}, ["kind", "km"]),
]


def valid_calls(calls, tools=TOOLS) -> list[str]:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    names = []
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
        names.append(call.function.name)
    return names


def test_twenty_tool_schemas_always_give_valid_calls(client):
    assert len(TOOLS) == 20

    patient = client.with_options(timeout=300)  # twenty at once: each waits for the batch

    def call(stream: bool, **kwargs):
        if stream:
            chunks = list(patient.chat.completions.create(stream=True, **kwargs))
            calls = [c for ch in chunks for choice in ch.choices for c in (choice.delta.tool_calls or [])]
            return calls, [choice.finish_reason for ch in chunks for choice in ch.choices if choice.finish_reason]
        out = patient.chat.completions.create(**kwargs)
        return out.choices[0].message.tool_calls, [out.choices[0].finish_reason]

    ask = [{"role": "user", "content": "Please use the tool for my request: book it, look it up, or do it."}]
    named = [dict(model="generator", messages=ask, tools=TOOLS, temperature=0, max_tokens=120,
                  tool_choice={"type": "function", "function": {"name": t["function"]["name"]}}) for t in TOOLS]
    # The first alone puts the shared tool listing in the prefix cache; the other nineteen at once: the server
    # batches them, each reusing that prefix instead of prefilling it again.
    first = call(False, **named[0])
    with ThreadPoolExecutor(len(named) - 1) as pool:
        results = [first, *pool.map(lambda i: call(bool(i % 2), **named[i]), range(1, len(named)))]
    for t, (calls, finish) in zip(TOOLS, results):  # each tool named, streaming every other time
        name = t["function"]["name"]
        assert valid_calls(calls) == [name] and finish == ["tool_calls"], (name, calls, finish)
    for stream in (False, True):  # required: the model picks among all twenty (SmolLM2, not tuned for tools, would
        # repeat parallel calls until max_tokens: one call)
        calls, finish = call(stream, model="generator", tools=TOOLS, tool_choice="required", temperature=0,
                             max_tokens=200, parallel_tool_calls=False,
                             messages=[{"role": "user", "content": "What is the weather in Paris?"}])
        print(f"required, stream={stream}: {[(c.function.name, c.function.arguments) for c in calls]}")
        assert valid_calls(calls) and finish == ["tool_calls"]


def test_auto_chooses_between_text_and_a_call(client, triton):
    tools = TOOLS[:2]
    ask = dict(model="generator", tools=tools, tool_choice="auto", temperature=0, max_tokens=60,
               messages=[{"role": "user", "content": "What is the capital of France?"}])
    text = client.chat.completions.create(**ask)
    assert text.choices[0].message.tool_calls is None and "Paris" in text.choices[0].message.content
    assert text.choices[0].finish_reason == "stop"
    opener = TextTokenizer(REPOSITORY / "target_gqa").encode("<tool_call>", add_bos=False)[0]
    called = client.chat.completions.create(logit_bias={str(opener): 30}, parallel_tool_calls=False, **ask)
    choice = called.choices[0]
    print(f"auto with the call made likely: {choice.message.tool_calls}")
    assert choice.finish_reason == "tool_calls" and valid_calls(choice.message.tool_calls, tools)


def test_logit_bias_and_json_object_on_both_endpoints(client):
    token = TextTokenizer(REPOSITORY / "target_gqa").encode(" banana", add_bos=False)[0]
    done = client.completions.create(model="generator", prompt="My favourite fruit is", max_tokens=3, temperature=0,
                                     logit_bias={str(token): 100})
    assert done.choices[0].text == " banana" * 3
    chat = client.chat.completions.create(model="generator", messages=FRANCE, max_tokens=3, temperature=0,
                                          logit_bias={str(token): 100})
    assert chat.choices[0].message.content == " banana" * 3
    with ThreadPoolExecutor(2) as pool:  # both at once: the server batches them
        both = [pool.submit(client.completions.create, model="generator", prompt="A JSON object describing a cat:",
                            max_tokens=150, temperature=0, extra_body={"response_format": {"type": "json_object"}}),
                pool.submit(client.chat.completions.create, model="generator", messages=FRANCE, max_tokens=150,
                            temperature=0, response_format={"type": "json_object"})]
    for out in (future.result() for future in both):
        choice = out.choices[0]
        text = choice.text if hasattr(choice, "text") else choice.message.content
        print(f"json_object: {choice.finish_reason} {text!r}")
        assert text.startswith("{")  # an object, whatever the model would rather write
        if choice.finish_reason == "stop":  # SmolLM2 may ramble until max_tokens; a finished answer parses
            assert isinstance(json.loads(text), dict)
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="generator", prompt="hi", logit_bias={"1": 101})
    assert caught.value.response.json()["error"]["param"] == "logit_bias"
