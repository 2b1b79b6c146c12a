"""Malformed requests through the real tritonserver, over gRPC streaming and the HTTP generate endpoint.

Each case is sent both ways and must get a clear error naming the field
(wrong dtypes and shapes are rejected by Triton itself, before the
generator; over HTTP, Triton's JSON-to-tensor conversion rejects a wrongly
typed JSON value with a message of its own that does not name the input).
Afterwards the server is ready, a good request succeeds over both
protocols and no KV page is held.

Also the shared helpers of the reliability tests (test_cancellation.py and
test_overload_and_faults.py import them): a small copy of the repository,
gRPC / HTTP clients, metrics, and the python backend stub's memory.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import NamedTuple

import numpy as np
import pytest
from test_json_depth import DEEP, JSON_ROWS, NESTED_STRINGS, at_the_limit, schema, with_companions

from triton_helpers import (
    F32,
    I32,
    I64,
    generate,
    grpc_request,
    grpc_text,
    is_final,
    start_server,
    stop_server_later,
    text,
    tiny_repository,
    wait_idle,
)

pytestmark = pytest.mark.server

# ---- the table --------------------------------------------------------------------------------------------

HI = {"text_input": text("Hello")}
DERIVE = object()
# Triton's HTTP front end converts JSON to the input's declared dtype before the generator sees the
# request; a wrongly typed value fails there, with a message that does not name the input.
TRITON_JSON = "Unable to parse"
LONG_PROMPT = "word " * 400  # 401 tokens; the test server's context holds 256


class Case(NamedTuple):
    id: str
    inputs: dict  # gRPC input tensors (numpy arrays, sent with their dtype)
    field: str  # must appear in the error
    http: object = DERIVE  # HTTP body: derived from `inputs`, or a dict, or raw bytes
    http_field: str | None = None  # when HTTP names it differently
    parameters: dict | None = None  # Triton request parameters (gRPC); HTTP sends them as top-level keys


def sp(**kwargs) -> dict:
    """text_input + sampling_parameters JSON."""
    return {**HI, "sampling_parameters": text(json.dumps(kwargs))}


def with_prompt(tensors: dict) -> dict:
    return tensors if "messages" in tensors else {**HI, **tensors}


def without(tensors: dict, name: str) -> dict:
    return {k: v for k, v in tensors.items() if k != name}


CASES = [
    # prompt
    Case("no_prompt", {"max_tokens": I32(4)}, "text_input, input_ids or messages"),
    Case("two_prompts", {**HI, "input_ids": I64(1, 2)}, "text_input, input_ids"),
    Case("empty_text_input", {"text_input": text("")}, "text_input"),
    Case("text_input_invalid_utf8", {"text_input": text(b"\xff\xfe hi")}, "text_input"),
    Case("text_input_wrong_dtype", {"text_input": I32(5)}, "text_input", http_field=TRITON_JSON),
    Case("text_input_two_values", {"text_input": text("a", "b")}, "text_input"),
    Case("text_input_no_value", {"text_input": np.array([], dtype=object)}, "text_input"),
    Case("input_ids_empty", {"input_ids": I64()}, "input_ids"),
    Case("input_ids_wrong_dtype", {"input_ids": F32(1.5, 2.5)}, "input_ids", http_field=TRITON_JSON),
    Case("input_ids_2d", {"input_ids": np.array([[1, 2]], np.int64)}, "input_ids", http_field=TRITON_JSON),
    Case("input_ids_above_vocabulary", {"input_ids": I64(1, 49152)}, "input_ids"),
    Case("input_ids_negative", {"input_ids": I64(1, -1)}, "input_ids"),
    Case("text_input_longer_than_context", {"text_input": text(LONG_PROMPT)}, "text_input"),
    Case("input_ids_longer_than_context", {"input_ids": np.full(300, 28, np.int64)}, "input_ids"),
    Case(
        "messages_longer_than_context",
        {"messages": text(json.dumps([{"role": "user", "content": LONG_PROMPT}]))},
        "messages",
    ),
    # messages
    Case("messages_not_json", {"messages": text("hello")}, "messages"),
    Case("messages_an_object", {"messages": text('{"role": "user", "content": "hi"}')}, "messages"),
    Case("messages_empty_list", {"messages": text("[]")}, "messages"),
    Case("messages_content_not_string", {"messages": text('[{"role": "user", "content": 5}]')}, "messages[0]"),
    Case("messages_invalid_utf8", {"messages": text(b'[{"role": "user", "content": "\xc3"}]')}, "messages"),
    # numbers: negative, zero, NaN, infinite, huge, wrong type or shape
    Case("max_tokens_zero", {**HI, "max_tokens": I32(0)}, "max_tokens"),
    Case("max_tokens_negative", {**HI, "max_tokens": I32(-5)}, "max_tokens"),
    Case("max_tokens_wrong_dtype", {**HI, "max_tokens": F32(4.5)}, "max_tokens", http_field=TRITON_JSON),
    Case("max_tokens_two_values", {**HI, "max_tokens": I32(4, 5)}, "max_tokens"),
    Case("temperature_nan", {**HI, "temperature": F32(np.nan)}, "temperature"),
    Case("temperature_negative", {**HI, "temperature": F32(-1.0)}, "temperature"),
    Case(
        "temperature_overflows_fp32",
        {**HI, "temperature": F32(np.inf)},
        "temperature",
        http={"text_input": "Hello", "temperature": 1e39},
    ),
    Case("top_p_negative", {**HI, "top_p": F32(-0.5)}, "top_p"),
    Case("top_p_infinite", {**HI, "top_p": F32(np.inf)}, "top_p", http={"text_input": "Hello", "top_p": 1e39}),
    Case("min_p_above_one", {**HI, "min_p": F32(2.0)}, "min_p"),
    Case("repetition_penalty_zero", {**HI, "repetition_penalty": F32(0.0)}, "repetition_penalty"),
    Case("frequency_penalty_nan", {**HI, "frequency_penalty": F32(np.nan)}, "frequency_penalty"),
    Case(
        "presence_penalty_infinite",
        {**HI, "presence_penalty": F32(-np.inf)},
        "presence_penalty",
        http={"text_input": "Hello", "presence_penalty": -1e39},
    ),
    Case("top_k_negative", {**HI, "top_k": I32(-5)}, "top_k"),
    Case("min_length_negative", {**HI, "min_length": I32(-1)}, "min_length"),
    Case("num_draft_tokens_zero", {**HI, "num_draft_tokens": I32(0)}, "num_draft_tokens"),
    Case("num_draft_tokens_huge", {**HI, "num_draft_tokens": I32(2**31 - 1)}, "num_draft_tokens"),
    Case("top_logprobs_21", {**HI, "top_logprobs": I32(21)}, "top_logprobs"),
    Case("top_logprobs_negative", {**HI, "top_logprobs": I32(-1)}, "top_logprobs"),
    Case(
        "seed_and_random_seed_differ",
        {**HI, "seed": np.array([1], np.uint64), "random_seed": np.array([2], np.uint64)},
        "random_seed",
    ),
    Case("stream_wrong_dtype", {**HI, "stream": I32(1)}, "stream", http_field=TRITON_JSON),
    Case("unknown_input", {**HI, "frobnicate": I32(1)}, "frobnicate"),
    # strings
    Case("priority_unknown", {**HI, "priority": text("urgent")}, "priority"),
    Case("priority_high_not_granted", {**HI, "priority": text("high")}, "priority"),
    Case("session_id_empty", {**HI, "session_id": text("")}, "session_id"),
    Case("end_session_without_session", {**HI, "end_session": np.array([True])}, "end_session"),
    Case("stop_words_empty", {**HI, "stop_words": text("x", "")}, "stop word 1"),
    Case("stop_words_invalid_utf8", {**HI, "stop_words": text(b"\xff")}, "stop_words"),
    # sampling_parameters
    Case("sampling_parameters_not_json", {**HI, "sampling_parameters": text("{max_tokens: 3")}, "sampling_parameters"),
    Case("sampling_parameters_a_list", {**HI, "sampling_parameters": text("[1, 2]")}, "sampling_parameters"),
    Case(
        "sampling_parameters_invalid_utf8",
        {**HI, "sampling_parameters": text(b'{"stop": ["\xff"]}')},
        "sampling_parameters",
    ),
    Case("sampling_parameters_unknown_key", sp(tempature=1), "tempature"),
    Case("sampling_temperature_a_word", sp(temperature="hot"), "sampling_parameters.temperature"),
    Case("sampling_temperature_nan", sp(temperature=float("nan")), "temperature"),
    Case("sampling_top_p_overflows", sp(top_p="1e400"), "top_p"),
    Case("sampling_max_tokens_a_list", sp(max_tokens=[3]), "sampling_parameters.max_tokens"),
    Case("sampling_max_tokens_null", sp(max_tokens=None), "sampling_parameters.max_tokens"),
    Case("sampling_max_tokens_1e30", sp(max_tokens=1e30), "sampling_parameters.max_tokens"),
    Case("sampling_max_tokens_fraction", sp(max_tokens=2.5), "sampling_parameters.max_tokens"),
    Case("sampling_seed_negative", sp(seed=-1), "seed"),
    Case("sampling_seed_above_64_bits", sp(seed=2**64), "seed"),
    Case("sampling_stop_empty", sp(stop=[""]), "stop word 0"),
    Case("sampling_stop_a_number", sp(stop=5), "sampling_parameters.stop"),
    Case("sampling_stop_token_ids_a_string", sp(stop_token_ids="5"), "stop_token_ids"),
    Case("sampling_ignore_eos_a_word", sp(ignore_eos="maybe"), "sampling_parameters.ignore_eos"),
    Case("sampling_logprobs_50", sp(logprobs=50), "logprobs"),
    Case("sampling_guided_decoding_a_string", sp(guided_decoding="json"), "sampling_parameters.guided_decoding"),
    Case(
        "sampling_guided_decoding_two_kinds",
        sp(guided_decoding={"regex": "a+", "choice": ["a"]}),
        "sampling_parameters.guided_decoding",
    ),
    Case(
        "sampling_guided_regex_invalid",
        sp(guided_decoding={"regex": "[a-"}),
        "sampling_parameters.guided_decoding.regex",
    ),
    Case(
        "sampling_guided_json_invalid_schema",
        sp(guided_decoding={"json": {"type": "objekt"}}),
        "sampling_parameters.guided_decoding.json",
    ),
    # speculative
    Case("speculative_not_json", {**HI, "speculative": text("fast")}, "speculative"),
    Case("speculative_a_list", {**HI, "speculative": text('["prompt_lookup"]')}, "speculative"),
    Case("speculative_unknown_mode", {**HI, "speculative": text('{"mode": "medusa"}')}, "speculative"),
    Case("speculative_missing_mtp_head", {**HI, "speculative": text('{"mode": "mtp"}')}, "speculative"),
    Case("speculative_missing_draft_model", {**HI, "speculative": text('{"mode": "draft_model"}')}, "speculative"),
    Case(
        "speculative_file_path", {**HI, "speculative": text('{"mode": "draft_model", "path": "/etc/passwd"}')}, "path"
    ),
    Case(
        "speculative_ngram_a_string",
        {**HI, "speculative": text('{"mode": "prompt_lookup", "ngram": "3"}')},
        "speculative.ngram",
    ),
    Case("speculative_ngram_zero", {**HI, "speculative": text('{"mode": "prompt_lookup", "ngram": 0}')}, "ngram"),
    # guided decoding tensors
    Case(
        "guide_type_unknown",
        {**HI, "guided_decoding_guide_type": text("xml"), "guided_decoding_guide": text("x")},
        "guided_decoding_guide_type",
    ),
    Case("guide_missing", {**HI, "guided_decoding_guide_type": text("regex")}, "guided_decoding_guide"),
    Case("guide_without_type", {**HI, "guided_decoding_guide": text("a+")}, "guided_decoding_guide_type"),
    Case(
        "json_schema_invalid",
        {**HI, "guided_decoding_guide_type": text("json_schema"), "guided_decoding_guide": text('{"type": "objekt"}')},
        "guided_decoding_guide",
    ),
    Case(
        "json_schema_not_json",
        {**HI, "guided_decoding_guide_type": text("json_schema"), "guided_decoding_guide": text("{type")},
        "guided_decoding_guide",
    ),
    Case(
        "regex_invalid",
        {**HI, "guided_decoding_guide_type": text("regex"), "guided_decoding_guide": text("[a-")},
        "guided_decoding_guide",
    ),
    Case(
        "lark_invalid",
        {**HI, "guided_decoding_guide_type": text("lark"), "guided_decoding_guide": text("start: foo")},
        "guided_decoding_guide",
    ),
    # limits and ranges, each checked before the work it bounds
    Case("end_id_outside_vocabulary", {**HI, "end_id": I32(10**9), "min_length": I32(2)}, "end_id"),
    Case("frequency_penalty_above_2", {**HI, "frequency_penalty": F32(2.5)}, "frequency_penalty"),
    Case("presence_penalty_below_minus_2", {**HI, "presence_penalty": F32(-3.0)}, "presence_penalty"),
    Case("stop_words_too_many", {**HI, "stop_words": text(*["s"] * 33)}, "stop_words"),
    Case("stop_word_too_long", {**HI, "stop_words": text("x" * 300)}, "stop_words"),
    Case("sampling_stop_too_many", sp(stop=["s"] * 40), "stop words"),
    Case("sampling_stop_token_ids_too_many", sp(stop_token_ids=list(range(100))), "stop_token_ids"),
    Case("sampling_stop_token_id_outside_vocabulary", sp(stop_token_ids=[10**6]), "stop_token_ids"),
    Case("session_id_too_long", {**HI, "session_id": text("s" * 300)}, "session_id"),
    Case(
        "speculative_ngram_huge",
        {**HI, "speculative": text('{"mode": "prompt_lookup", "ngram": 100000}')},
        "speculative.ngram",
    ),
    Case(
        "sampling_parameters_nested_5000_deep",
        {**HI, "sampling_parameters": text("[" * 5000 + "]" * 5000)},
        "sampling_parameters",
    ),
    Case(
        "sampling_parameters_5000_digit_integer",
        {**HI, "sampling_parameters": text('{"seed": ' + "9" * 5000 + "}")},
        "sampling_parameters",
    ),
    Case(
        "sampling_parameters_over_max_json_bytes",
        {**HI, "sampling_parameters": text(json.dumps({"stop": ["s" * 600_000] * 2}))},
        "sampling_parameters",
    ),
    Case("messages_nested_5000_deep", {"messages": text("[" * 5000 + "]" * 5000)}, "messages"),
    Case("messages_lone_surrogate", {"messages": text('[{"role": "user", "content": "\\ud800"}]')}, "messages"),
    Case("messages_too_many", {"messages": text(json.dumps([{"role": "user", "content": "hi"}] * 2000))}, "messages"),
    Case(
        "guide_too_long",
        {**HI, "guided_decoding_guide_type": text("regex"), "guided_decoding_guide": text("a" * 200000)},
        "guided_decoding_guide",
    ),
    # every JSON input of the request field table, and JSON inside sampling_parameters' strings, nested 100,000 deep
    *[Case(f"{row.name}_nested_100000_deep", with_prompt(with_companions(row.name, DEEP)),
           f"{row.name} nests deeper than the limit of 64 levels") for row in JSON_ROWS],
    *[Case(f"{field}_nested_100000_deep", sp(**value), f"{field} nests deeper")
      for field, value in NESTED_STRINGS.items()],
    *[Case(f"parameter_{row.name}_nested_100000_deep", with_prompt(without(with_companions(row.name, ""), row.name)),
           f"{row.name} nests deeper", parameters={row.name: DEEP}) for row in JSON_ROWS if row.parameter],
    # request parameters (gRPC parameters; top-level JSON keys that are not inputs over HTTP)
    Case("parameter_min_tokens_a_word", HI, "parameter min_tokens", parameters={"min_tokens": "many"}),
    Case("parameter_unknown", HI, "frobnicate_param", parameters={"frobnicate_param": 1}),
    Case("parameter_stop_a_number", HI, "parameter stop", parameters={"stop": 5}),
]


def http_body(case: Case) -> bytes:
    """The HTTP generate body for a case: strings as JSON strings (invalid UTF-8 kept as raw bytes),
    [1]-shaped inputs as scalars, the rest as lists."""
    if isinstance(case.http, bytes):
        return case.http
    if isinstance(case.http, dict):
        return json.dumps(case.http).encode()
    body = {}
    for name, array in case.inputs.items():
        values = [v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v.item() for v in array.reshape(-1)]
        body[name] = values[0] if array.shape == (1,) and name not in ("input_ids", "stop_words") else (
            [list(map(lambda v: v.item(), row)) for row in array] if array.ndim == 2 else values)
    body.update(case.parameters or {})
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogateescape")


CAPITAL = {"text_input": "The capital of France is", "max_tokens": 6, "exclude_input_in_output": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_input")
    repository = tiny_repository(root / "repo", max_model_len="256", num_gpu_pages="64", max_num_seqs="4")
    # Cancelling streams of requests Triton rejected itself leaves it unable to unload the generator (a Triton
    # 2.51 bug): a short exit timeout bounds the shutdown.
    srv = start_server(repository, root / "server.log", exit_timeout=3)
    try:
        status, body = generate(srv, {"text_input": "Hello", "max_tokens": 2})  # warm, and a prefix in the cache
        assert status == 200, body
        status, body = generate(srv, CAPITAL)
        assert status == 200, body
        srv.answer_before = json.loads(body)["text_output"]  # what an unharmed server answers at the end too
        srv.pages_before = wait_idle(srv)["tritongen:kv_pages_used"]
        yield srv
    finally:
        stop_server_later(srv)


def assert_ready(server) -> None:
    with urllib.request.urlopen(server.url_http + "/v2/health/ready", timeout=10) as r:
        assert r.status == 200


def test_table_is_large_enough():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_request_over_grpc(server, case):
    got = grpc_request(server, case.inputs, case.parameters, timeout=30)
    assert len(got) == 1, f"expected one error response, got {got}"
    error = got[0][1]
    assert error is not None, f"accepted: {grpc_text(got)!r}"
    assert case.field in str(error), str(error)
    assert_ready(server)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_request_over_http(server, case):
    status, body = generate(server, http_body(case), timeout=30)
    error = json.loads(body).get("error", "")
    assert status >= 400 and error, body
    if case.http_field == TRITON_JSON:
        assert status in (400, 500) and TRITON_JSON in error, body
    else:
        assert status == 400, body
        assert (case.http_field or case.field) in error, body
    assert_ready(server)


# Values that look extreme but are valid: they run and finish normally (a prompt near the context
# limit keeps each one to a few tokens).
NEAR_LIMIT = {"input_ids": [28] * 250}
ACCEPTED = [
    ("max_tokens_int32_max", {**NEAR_LIMIT, "max_tokens": 2**31 - 1}, "length"),
    ("top_k_int32_max", {"text_input": "Hello", "max_tokens": 3, "top_k": 2**31 - 1, "temperature": 0.7,
                         "seed": 1}, "max_tokens"),
    ("temperature_3e38", {"text_input": "Hello", "max_tokens": 3, "temperature": 3e38, "seed": 1}, "max_tokens"),
    ("min_length_huge", {"text_input": "Hello", "max_tokens": 3, "min_length": 2**31 - 1}, "max_tokens"),
    ("temperature_subnormal_is_greedy", {"text_input": "Hello", "max_tokens": 3, "temperature": 1e-40}, "max_tokens"),
    ("repetition_penalty_3e38", {"text_input": "Hello", "max_tokens": 3, "repetition_penalty": 3e38,
                                 "temperature": 0.7, "seed": 1, "return_log_probs": True, "top_logprobs": 3},
     "max_tokens"),
]


@pytest.mark.parametrize("body, finish", [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_extreme_but_valid_values_run_and_finish(server, body, finish):
    status, text_ = generate(server, body)
    assert status == 200, text_
    assert json.loads(text_)["finish_reason"] == finish


@pytest.mark.parametrize("row", JSON_ROWS, ids=[row.name for row in JSON_ROWS])
def test_json_inputs_at_the_depth_limit_are_not_refused_for_it(server, row):
    """Nested exactly max_json_depth deep: served, or refused only for something else (such as a template)."""
    inputs = {**with_prompt(with_companions(row.name, at_the_limit(row.name))), "max_tokens": I32(3)}
    status, answer = generate(server, http_body(Case("", inputs, "")))
    assert status == 200 or "nests deeper" not in answer, answer


def test_a_json_schema_guide_at_the_depth_limit_is_compiled_and_followed(server):
    status, answer = generate(server, {"text_input": "Hello", "max_tokens": 3, "exclude_input_in_output": True,
                                       "guided_decoding_guide_type": "json_schema",
                                       "guided_decoding_guide": json.dumps(schema(64))})
    assert status == 200, answer
    assert json.loads(answer)["text_output"].lstrip().startswith("[")  # the schema's outer array, opened


def test_server_healthy_and_no_page_held_afterwards(server):
    assert_ready(server)
    got = grpc_request(server, {"text_input": text(CAPITAL["text_input"]), "max_tokens": I32(CAPITAL["max_tokens"]),
                                "stream": np.array([True]), "exclude_input_in_output": np.array([True])})
    assert all(e is None for _, e in got) and is_final(got[-1][0])
    status, body = generate(server, CAPITAL)
    assert status == 200 and json.loads(body)["text_output"] == grpc_text(got) == server.answer_before
    m = wait_idle(server)
    assert m["tritongen:kv_pages_used"] == server.pages_before, m
    assert m["tritongen:kv_pages_free"] + m["tritongen:kv_pages_used"] == 64


@pytest.mark.parametrize("via", ["http", "grpc"])
def test_a_64_mib_prompt_is_refused_before_any_work(server, via):
    """Sized before it is decoded or tokenized (which would take many seconds): refused at once, naming the field
    and the setting. Most of the second is moving 64 MiB through Triton; a busy machine only makes that slower,
    so the fastest of three tries is the one held to the bound."""
    prompt = "word " * ((64 << 20) // 5)
    body = json.dumps({"text_input": prompt, "max_tokens": 2}).encode()  # encoded before the clock starts
    tensor_input = {"text_input": text(prompt)}
    times = []
    for _ in range(3):
        start = time.monotonic()
        if via == "http":
            status, answer = generate(server, body)
            error = json.loads(answer)["error"]
            assert status == 400
        else:
            (_, error), = grpc_request(server, tensor_input)
            error = str(error)
        times.append(time.monotonic() - start)
        assert "text_input" in error and "max_prompt_bytes" in error
        if times[-1] < 1.0:
            break
    print(f"{via}: refused in {', '.join(f'{t:.2f}s' for t in times)}: {error}")
    assert min(times) < 1.0
