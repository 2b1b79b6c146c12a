"""Request parsing under hostile input, with hypothesis: every case is a result or a clear error naming the field.

The generators aim at what broke parsing before: JSON nested deeper than
1,000 levels, lone surrogates, integers of 5,000 digits and above 2**63,
NaN, inf and subnormal floats, oversize lists and strings, values of the
wrong type. A parsed request is generated (two tokens, on the tiny model),
so what only fails mid-generation (an EOS id outside the vocabulary, a
subnormal temperature, extreme penalties) fails here too. A sample of the
same cases goes through a real server.
"""

from __future__ import annotations

import json
import math
import queue
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2

from tritongen.engine.engine import Engine
from tritongen.engine.options import GenerateRequest
from tritongen.runtime.repository import read_config
from tritongen.triton.request_inputs import _SAMPLING_KEYS, RequestError, parse_request
from tritongen.triton.request_limits import RequestLimits

from conftest import REPOSITORY

INPUTS = {i.name: model_config_pb2.DataType.Name(i.data_type) for i in read_config(REPOSITORY / "generator").input}
# Every name an error may use for the field at fault: inputs, sampling keys, and the in-process option names.
FIELDS = (set(INPUTS) | _SAMPLING_KEYS | {"request parameters", "parameter", "stop word", "prompt", "eos_token_id",
                                         "max_new_tokens", "speculative", "top_p", "min_p", "repetition_penalty",
                                         "constraint", "context", "session"})
DEEP = "[" * 5000 + "]" * 5000
HUGE_INT = "9" * 5000
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, 2**64, -(2**63) - 1, 0, -1, 1, 2**31, 2**31 - 1, 49152, 320, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 5e-324, 1e-45, 1e-40, 1e-6, 1e38, -1e38, 3.4e38]),
)
TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\ud800", "a\udfffb", DEEP, HUGE_INT, "NaN", "Infinity", "-Infinity", "1e-320", "", " ",
                     "x" * 300, "é" * 200, "{}", "[]", "null"]),
)
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), NUMBERS, TEXT),
                           lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                   st.dictionaries(st.sampled_from(sorted(_SAMPLING_KEYS) + ["x"]),
                                                                   inner, max_size=6)),
                           max_leaves=20)


def json_text(value) -> str:
    return json.dumps(value, allow_nan=True)


RAW_JSON = st.one_of(
    JSON_VALUES.map(json_text),
    st.sampled_from(
        [
            DEEP,
            '{"a":' * 2000 + "1" + "}" * 2000,
            "[" + HUGE_INT + "]",
            '{"max_tokens": ' + HUGE_INT + "}",
            '{"temperature": NaN}',
            '{"temperature": 1e-320}',
            '{"stop": ["\\ud800"]}',
            '[{"role": "user", "content": "\\udc00"}]',
            '{"mode": "prompt_lookup", "ngram": 100000}',
            '{"seed": 18446744073709551616}',
            '{"stop": ' + json.dumps(["s"] * 1000) + "}",
            '{"stop_token_ids": ' + json.dumps(list(range(5000))) + "}",
            '{"guided_decoding": {"regex": "' + "a" * 200000 + '"}}',
            "not json",
            '"\\ud800"',
        ]
    ),
)
STRINGS = st.one_of(TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")), RAW_JSON.map(str.encode),
                    st.sampled_from([b"\xff\xfe", b"x" * (2 << 20), b"\x00"]))


def input_values(name: str, kind: str):
    """A value for one input: mostly its own type and shape, sometimes the wrong size."""
    size = st.one_of(st.just(1), st.integers(0, 3), st.just(5000 if name in ("input_ids", "stop_words") else 1))
    if kind == "TYPE_STRING":
        return size.flatmap(lambda n: st.lists(STRINGS, min_size=n, max_size=n)).map(
            lambda items: np.array(items, dtype=np.object_))
    if kind == "TYPE_BOOL":
        return size.flatmap(lambda n: st.lists(st.booleans(), min_size=n, max_size=n)).map(lambda v: np.array(v, bool))
    dtype = {"TYPE_INT32": np.int32, "TYPE_INT64": np.int64, "TYPE_UINT64": np.uint64, "TYPE_FP32": np.float32}[kind]
    if np.issubdtype(dtype, np.floating):
        values = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
    else:
        info = np.iinfo(dtype)
        values = st.one_of(
            st.integers(int(info.min), int(info.max)), st.sampled_from([int(info.min), int(info.max), 0])
        )
    return size.flatmap(lambda n: st.lists(values, min_size=n, max_size=n)).map(lambda v: np.array(v, dtype=dtype))


PROMPT = st.sampled_from(["text_input", "input_ids", "messages"])
REQUESTS = st.fixed_dictionaries({
    "prompt": PROMPT,
    "tensors": st.dictionaries(st.sampled_from(sorted(INPUTS)), st.just(None), max_size=8),
    "parameters": st.dictionaries(st.sampled_from(sorted(_SAMPLING_KEYS | {"priority", "session_id", "speculative",
                                                                          "unknown_key"})),
                                  st.one_of(NUMBERS, TEXT, st.booleans()), max_size=4),
})


@st.composite
def requests(draw):
    shape = draw(REQUESTS)
    names = set(shape["tensors"]) | {shape["prompt"]}
    tensors = {name: draw(input_values(name, INPUTS[name])) for name in sorted(names)}
    if shape["prompt"] == "messages" and draw(st.booleans()):
        tensors["messages"] = np.array([json.dumps([{"role": "user", "content": draw(TEXT)}]).encode(
            "utf-8", "surrogatepass")], dtype=np.object_)
    return tensors, shape["parameters"]


def named(message: str) -> bool:
    return any(name in message for name in FIELDS)


@pytest.fixture(scope="module")
def tiny_engine(tiny_folder):
    engine = Engine(tiny_folder)
    yield engine
    engine.close()


def outcome(engine: Engine, tensors: dict, parameters: dict) -> str | None:
    """None when the request ran; else the error, which must be the client's and name the field."""
    limits = RequestLimits(context=engine.max_len)
    try:
        parsed = parse_request(tensors, parameters, {"max_tokens": 2}, engine.tokenizer.render_chat, limits)
        options = parsed.request.options
        options.max_new_tokens = min(options.max_new_tokens, 2)
        result = engine.generate(GenerateRequest(parsed.request.prompt, options))
    except (RequestError, ValueError) as exc:
        assert named(str(exc)), f"error names no field: {exc}"
        return str(exc)
    for lp in result.logprobs or []:
        assert math.isfinite(lp.logprob) and all(math.isfinite(p) for _, p in lp.top), lp
    return None


@pytest.mark.slow
@settings(derandomize=True, database=None, max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(requests())
def test_parsing_hostile_requests_gives_a_result_or_a_named_error(tiny_engine, case):
    tensors, parameters = case
    outcome(tiny_engine, tensors, parameters)
    assert tiny_engine.alive


HOSTILE = [  # the findings, each by name
    {"messages": np.array([DEEP.encode()], np.object_)},
    {
        "text_input": np.array([b"Hi"], np.object_),
        "sampling_parameters": np.array([('{"max_tokens": ' + HUGE_INT + "}").encode()], np.object_),
    },
    {"messages": np.array([b'[{"role": "user", "content": "\\ud800"}]'], np.object_)},
    {
        "text_input": np.array([b"Hi"], np.object_),
        "end_id": np.array([99999], np.int32),
        "min_length": np.array([3], np.int32),
    },
    {"text_input": np.array([b"Hi"], np.object_), "temperature": np.array([1e-40], np.float32)},
    {
        "text_input": np.array([b"Hi"], np.object_),
        "temperature": np.array([0.5], np.float32),
        "repetition_penalty": np.array([3e38], np.float32),
        "return_log_probs": np.array([True]),
        "top_logprobs": np.array([5], np.int32),
    },
    {"text_input": np.array([b"Hi"], np.object_), "frequency_penalty": np.array([1e30], np.float32)},
    {"text_input": np.array([b"Hi"], np.object_), "stop_words": np.array([b"x"] * 5000, np.object_)},
    {
        "text_input": np.array([b"Hi"], np.object_),
        "speculative": np.array([b'{"mode": "prompt_lookup", "ngram": 100000}'], np.object_),
    },
    {"text_input": np.array([b"Hi"], np.object_), "session_id": np.array([b"s" * 100000], np.object_)},
]


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_each_finding_is_a_named_error_or_a_clean_result(tiny_engine, index):
    error = outcome(tiny_engine, HOSTILE[index], {})
    print(f"case {index}: {error}")
    assert tiny_engine.alive


def sendable(key: str, value) -> bool:
    """What gRPC request parameters can carry at all (the client refuses the rest before sending)."""
    if key in ("sequence_id", "sequence_start", "sequence_end", "priority", "binary_data_output"):
        return False  # names tritonclient reserves for its own use
    if isinstance(value, str):
        return value.isascii() or all(not 0xD800 <= ord(c) <= 0xDFFF for c in value)
    return isinstance(value, bool) or (isinstance(value, int) and -2**63 <= value < 2**63)


def grpc_inputs(tensors: dict) -> list:
    inputs = []
    for name, array in tensors.items():
        kind = INPUTS[name].removeprefix("TYPE_").replace("STRING", "BYTES")
        tensor = grpcclient.InferInput(name, list(array.shape), kind)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


@pytest.mark.server
@pytest.mark.server
def test_a_sample_of_hostile_requests_through_a_real_server(generator_server):
    """Forty drawn cases and the findings over gRPC: each ends with a result or an error a client can read."""
    cases = [(t, {}) for t in HOSTILE]

    @settings(derandomize=True, database=None, max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(requests())
    def collect(case):
        tensors, parameters = case
        cases.append((tensors, {k: v for k, v in parameters.items() if sendable(k, v)}))

    collect()
    server = generator_server  # shared: the hostile requests must leave it serving the other modules too
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    errors = []
    for i, (tensors, parameters) in enumerate(cases):
        client.async_stream_infer("generator", grpc_inputs(tensors), request_id=str(i), parameters=parameters or None,
                                  enable_empty_final_response=True)
        while True:
            result, error = events.get(timeout=120)
            if error is not None:
                errors.append(str(error))
                break
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    client.stop_stream()
    for message in errors:
        assert "Traceback" not in message and "internal error" not in message and ".py" not in message, message
    print(f"{len(cases)} cases, {len(errors)} errors; e.g. {errors[:3]}")
    client.close()
    assert server.is_ready()
    request = urllib.request.Request(server.url_http + "/v2/models/generator/generate", method="POST",
                                     data=json.dumps({"text_input": "Hi", "max_tokens": 2}).encode())
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.status == 200 and "text_output" in json.loads(r.read())
