"""JSON nested far past max_json_depth, at every door and without a tritonserver: the generator's request parsing
(every STRING row of the request field table), the Dynamo worker's translation and the OpenAI API's body. Each is
a named 400-class refusal before anything parses it; a value at the limit is not refused for its depth.
(test_bad_input.py and test_openai_api.py send the same through the real server.)"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from test_openai_api import running

from tritongen.dynamo.request_inputs import generator_inputs
from tritongen.errors import InvalidOption
from tritongen.json_depth import MAX_JSON_DEPTH, check_json_depth, deeper_than, value_deeper_than
from tritongen.openai_api import create_app
from tritongen.openai_api.schemas import ChatCompletionRequest, CompletionRequest
from tritongen.request_fields import FIELDS
from tritongen.serve import free_port
from tritongen.triton.request_inputs import parse_request
from tritongen.triton.request_limits import RequestLimits

DEEP = "[" * 100_000  # opens 100,000 levels: what json.loads would recurse into
JSON_ROWS = [row for row in FIELDS if row.json]
OTHER_STRING_ROWS = [row for row in FIELDS if row.dtype == "STRING" and not row.json]


def nested(depth: int) -> str:
    """Arrays nested exactly `depth` deep."""
    return "[" * depth + "]" * depth


def schema(depth: int) -> dict:
    """A JSON schema whose text nests exactly `depth` deep: arrays of arrays of integers."""
    value: dict = {"type": "integer"}
    for _ in range(depth - 1):
        value = {"type": "array", "items": value}
    return value


def test_the_scan_counts_brackets_outside_strings_and_names_the_top_level_key():
    assert deeper_than(nested(3), 3) is None and deeper_than(nested(4), 3) == ""
    assert deeper_than('{"a": "[[[[[[", "b\\"[": [[]]}', 3) is None  # brackets and quotes inside strings
    assert deeper_than('{"a": 1, "b" : {"c": [["x"]]}}', 3) == "b"
    assert deeper_than(json.dumps({"k": json.loads(nested(5))}).encode("utf-16"), 4) == "k"  # bytes as json reads
    assert deeper_than(DEEP, MAX_JSON_DEPTH) == ""
    assert json.dumps(schema(7)).count("{") == 7 and deeper_than(json.dumps(schema(7)), 7) is None


def test_the_scan_is_linear_in_the_text_even_where_strings_are_left_open():
    """Every quote of these starts a string that never closes: scanning from each one again would take hours."""
    for text in ('\\"' * (1 << 19), '"a\\' * (1 << 18), '"' + "\\\n" * (1 << 19)):
        start = time.monotonic()
        assert deeper_than(text, MAX_JSON_DEPTH) is None
        assert time.monotonic() - start < 5


def test_an_already_parsed_value_is_measured_the_same_way():
    assert not value_deeper_than(json.loads(nested(5)), 5) and value_deeper_than(json.loads(nested(6)), 5)
    assert not value_deeper_than(schema(9), 9) and value_deeper_than({"a": schema(9)}, 9)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert value_deeper_than(deep, MAX_JSON_DEPTH)


def test_the_refusal_names_the_field_the_limit_and_the_setting():
    with pytest.raises(InvalidOption) as caught:
        check_json_depth("tools", DEEP, 64, "max_json_depth")
    assert caught.value.field == "tools"
    assert str(caught.value) == "tools nests deeper than the limit of 64 levels (generator setting max_json_depth)"


# ---- the generator's request parsing ----------------------------------------------------------------------

def s(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=np.object_)


def parse(tensors: dict, parameters: dict | None = None):
    if not any(k in tensors for k in ("text_input", "input_ids", "messages")):
        tensors = {"text_input": s("Hello"), **tensors}
    return parse_request(tensors, parameters or {}, {}, lambda messages, **_: "chat", RequestLimits())


def with_companions(name: str, value: str) -> dict:
    """The field set to `value`, with what it needs beside it to be read at all."""
    tensors = {name: s(value)}
    if name == "guided_decoding_guide":
        tensors["guided_decoding_guide_type"] = s("json_schema")
    if name in ("tools", "chat_template_kwargs"):  # read with a chat
        tensors["messages"] = s('[{"role": "user", "content": "hi"}]')
    return tensors


def spellings(row) -> list[tuple[dict, dict]]:
    """(tensors, parameters) for each way a client may send the row: its tensor, its request parameter."""
    tensors = with_companions(row.name, DEEP)
    out = [(tensors, {})] if row.tensor else []
    if row.parameter:
        out.append(({k: v for k, v in tensors.items() if k != row.name}, {row.name: DEEP}))
    return out


@pytest.mark.parametrize("row", JSON_ROWS, ids=[row.name for row in JSON_ROWS])
def test_every_json_field_nested_too_deep_is_refused_by_name(row):
    assert spellings(row)
    for tensors, parameters in spellings(row):
        with pytest.raises(InvalidOption) as caught:
            parse(tensors, parameters)
        assert caught.value.field == row.name, caught.value
        assert f"limit of {MAX_JSON_DEPTH} levels" in str(caught.value) and "max_json_depth" in str(caught.value)


@pytest.mark.parametrize("row", OTHER_STRING_ROWS, ids=[row.name for row in OTHER_STRING_ROWS])
def test_every_other_string_field_takes_deep_text_as_text(row):
    """Not JSON: read as text (or refused for what it is), never parsed; a row that starts carrying JSON is
    marked `json` in the table and joins the test above."""
    for tensors, parameters in spellings(row):
        try:
            parse(tensors, parameters)
        except ValueError as exc:
            assert "nests deeper" not in str(exc) and row.name in str(exc), exc


NESTED_STRINGS = {  # JSON inside sampling_parameters' strings, each parsed on its own
    "sampling_parameters.guided_decoding": {"guided_decoding": DEEP},
    "sampling_parameters.structured_outputs": {"structured_outputs": DEEP},
    "sampling_parameters.guided_decoding.json": {"guided_decoding": {"json": DEEP}},
}


@pytest.mark.parametrize("field", NESTED_STRINGS)
def test_json_inside_a_json_string_is_bounded_too(field):
    with pytest.raises(InvalidOption) as caught:
        parse({"sampling_parameters": s(json.dumps(NESTED_STRINGS[field]))})
    assert caught.value.field == field


def test_request_parameters_are_bounded():
    from tritongen.triton.request_limits import load_json

    with pytest.raises(InvalidOption) as caught:
        load_json("request parameters", DEEP, RequestLimits())
    assert caught.value.field == "request parameters"


def at_the_limit(name: str) -> str:
    """A value of the field nested exactly max_json_depth deep, valid apart from that."""
    limit = MAX_JSON_DEPTH
    return {
        "messages": json.dumps([{"role": "user", "content": "hi", "meta": json.loads(nested(limit - 2))}]),
        "sampling_parameters": json.dumps({"guided_decoding": {"json": schema(limit - 2)}}),
        "tools": json.dumps([{"type": "function", "function": {"name": "f", "parameters": schema(limit - 3)}}]),
        "chat_template_kwargs": json.dumps({"x": json.loads(nested(limit - 1))}),
        "speculative": json.dumps({"mode": "prompt_lookup"}),  # a flat object: its only valid shape
        "guided_decoding_guide": json.dumps(schema(limit)),
    }[name]


@pytest.mark.parametrize("row", JSON_ROWS, ids=[row.name for row in JSON_ROWS])
def test_every_json_field_at_the_limit_is_read(row):
    value = at_the_limit(row.name)
    assert deeper_than(value, MAX_JSON_DEPTH) is None
    assert deeper_than(value, MAX_JSON_DEPTH - 1) is not None or row.name == "speculative"
    parse(with_companions(row.name, value))


def test_a_guide_one_level_past_the_limit_is_refused():
    with pytest.raises(InvalidOption):
        parse(with_companions("guided_decoding_guide", json.dumps(schema(MAX_JSON_DEPTH + 1))))


# ---- the Dynamo worker ------------------------------------------------------------------------------------

def dynamo_request(guided: dict) -> dict:
    return {"token_ids": [1, 2], "sampling_options": {"guided_decoding": guided}, "stop_conditions": {},
            "output_options": {}}


def test_dynamo_guided_decoding_nested_too_deep_is_refused_before_it_is_serialized():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidOption) as caught:
        generator_inputs(dynamo_request({"json": deep}))
    assert caught.value.field == "guided_decoding" and "limit of 63 levels" in str(caught.value)
    inputs = generator_inputs(dynamo_request({"json": schema(MAX_JSON_DEPTH - 2)}))
    assert deeper_than(inputs["sampling_parameters"], MAX_JSON_DEPTH) is None  # what the generator then allows


# ---- the OpenAI API ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def api():
    """The API with no generator behind it: what is refused here never needed one."""
    with running(create_app(f"127.0.0.1:{free_port()}")) as url:
        yield url


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


BASE = {"/v1/chat/completions": (ChatCompletionRequest, '{"model": "generator", "messages": [{"role": "user", '
                                 '"content": "hi"}]'),
        "/v1/completions": (CompletionRequest, '{"model": "generator", "prompt": "hi"')}
BODY_FIELDS = [(path, name) for path, (model, _) in BASE.items() for name in model.model_fields]


@pytest.mark.parametrize("path, field", BODY_FIELDS, ids=[f"{p.rsplit('/', 1)[1]}-{f}" for p, f in BODY_FIELDS])
def test_every_body_field_nested_too_deep_is_a_400_naming_it(api, path, field):
    body = BASE[path][1] + f', "{field}": {DEEP}' + "}"
    status, answer = post(api + path, body.encode())
    assert status == 400, answer
    assert answer["error"]["param"] == field
    assert answer["error"]["message"] == f"{field} nests deeper than the limit of {MAX_JSON_DEPTH} levels"


def test_tool_call_arguments_nested_too_deep_are_a_400_naming_them(api):
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": DEEP}}
    body = {"model": "generator", "messages": [{"role": "user", "content": "hi"},
                                               {"role": "assistant", "tool_calls": [call]}]}
    status, answer = post(api + "/v1/chat/completions", json.dumps(body).encode())
    assert status == 400 and answer["error"]["param"] == "messages[1].tool_calls", answer


def test_a_body_field_at_the_limit_is_parsed(api):
    """A response_format nested exactly 64 deep gets past the bound and pydantic (then is refused only for the
    model it names, checked before any generation); one level deeper is refused."""
    def body(schema_depth: int, model: str) -> bytes:
        fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema(schema_depth)}}
        return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}],
                           "response_format": fmt}).encode()

    status, answer = post(api + "/v1/chat/completions", body(MAX_JSON_DEPTH - 2, "another"))
    assert status == 404 and answer["error"]["code"] == "model_not_found", answer
    status, answer = post(api + "/v1/chat/completions", body(MAX_JSON_DEPTH - 1, "another"))
    assert status == 400 and answer["error"]["param"] == "response_format", answer
