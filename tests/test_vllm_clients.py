"""Clients of Triton's vLLM backend, unchanged: the requests they send, field by field, through the real server;
and the vLLM sampling parameters we honour, in-process."""

from __future__ import annotations

import json
import queue

import jsonschema
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritongen.engine.options import GenerateOptions, GenerateRequest

from triton_helpers import tensor


def greedy(n: int, **kw) -> GenerateOptions:
    return GenerateOptions(max_new_tokens=n, stop_on_eos=False, **kw)


# ---- the sampling parameters, in-process --------------------------------------------------------------------

def test_logit_bias_moves_the_choice(tiny):
    plain = tiny.generate(GenerateRequest("Hello world", greedy(4))).token_ids
    forced = tiny.generate(GenerateRequest("Hello world", greedy(4, logit_bias={7: 100.0}))).token_ids
    banned = tiny.generate(GenerateRequest("Hello world", greedy(4, logit_bias={plain[0]: -100.0}))).token_ids
    assert forced == [7, 7, 7, 7] and banned[0] != plain[0]


def test_bad_words_are_never_generated(tiny):
    plain = tiny.generate(GenerateRequest("Hello world", greedy(8))).token_ids
    single = tiny.generate(GenerateRequest("Hello world", greedy(8, bad_words_ids=[(plain[0],)]))).token_ids
    assert plain[0] not in single
    pair = (plain[1], plain[2])
    out = tiny.generate(GenerateRequest("Hello world", greedy(8, bad_words_ids=[pair]))).token_ids
    assert all((a, b) != pair for a, b in zip(out, out[1:])) and out[:2] == plain[:2]


def test_special_tokens_and_stop_strings_in_the_text(tiny):
    eos = tiny.tokenizer.eos_token_id
    options = dict(logit_bias={eos: 100.0}, stop_on_eos=False)
    hidden = tiny.generate(GenerateRequest("Hi", GenerateOptions(max_new_tokens=2, **options)))
    shown = tiny.generate(
        GenerateRequest("Hi", GenerateOptions(max_new_tokens=2, skip_special_tokens=False, **options))
    )
    assert hidden.text == "" and shown.text == "<|im_end|><|im_end|>"
    plain = tiny.generate(GenerateRequest("Hello world", greedy(12))).text
    stop = plain[3:5]
    cut = tiny.generate(GenerateRequest("Hello world", greedy(12, stop_sequences=[stop]))).text
    kept = tiny.generate(GenerateRequest("Hello world", greedy(12, stop_sequences=[stop],
                                                                include_stop_str_in_output=True))).text
    assert kept == cut + stop and kept.endswith(stop) and not cut.endswith(stop)


# ---- through the real server -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(generator_server):
    return generator_server


def stream(server, inputs: list, outputs=None, parameters=None) -> list:
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    client.async_stream_infer("generator", inputs, outputs=outputs, parameters=parameters,
                              enable_empty_final_response=True)
    got = []
    while True:
        result, error = events.get(timeout=120)
        assert error is None, error
        got.append(result)
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    client.close()
    return [r for r in got if r.get_response().outputs]


def output_names(result) -> set[str]:
    return {o.name for o in result.get_response().outputs}


@pytest.mark.server
@pytest.mark.server
def test_the_vllm_backend_sample_client(server):
    """vllm_backend samples/client.py, `create_request`: text_input [1] BYTES, stream [1] BOOL, sampling_parameters
    [1] BYTES (its JSON, numbers as strings), exclude_input_in_output [1] BOOL, text_output requested, and the
    same sampling parameters again as request parameters."""
    sampling = {"temperature": "0.1", "top_p": "0.95", "max_tokens": "100"}
    inputs = [tensor("text_input", np.array(["Hello, my name is".encode("utf-8")], dtype=np.object_), "BYTES"),
              tensor("stream", np.array([True], dtype=bool), "BOOL"),
              tensor("sampling_parameters", np.array([json.dumps(sampling).encode("utf-8")], dtype=np.object_),
                     "BYTES"),
              tensor("exclude_input_in_output", np.array([True], dtype=bool), "BOOL")]
    got = stream(server, inputs, outputs=[grpcclient.InferRequestedOutput("text_output")], parameters=sampling)
    assert got and all(output_names(r) == {"text_output"} for r in got)
    text = "".join(r.as_numpy("text_output")[0].decode() for r in got)
    assert len(text) > 20


@pytest.mark.server
@pytest.mark.server
def test_the_triton_openai_frontend_with_backend_vllm(server):
    """Triton server python/openai/openai_frontend/engine/utils/triton.py, `_create_vllm_generate_request`:
    text_input, stream, exclude_input_in_output, sampling_parameters (the OpenAI request's fields as JSON, with
    max_tokens, logprobs and structured_outputs as a JSON string of vLLM's StructuredOutputsParams), and the
    BOOL inputs return_logprobs, return_num_input_tokens, return_num_output_tokens."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"], "additionalProperties": False}
    structured = {"json": schema, "regex": None, "choice": None, "grammar": None, "json_object": None,
                  "disable_fallback": False, "disable_any_whitespace": False, "disable_additional_properties": False,
                  "whitespace_pattern": None, "structural_tag": None}
    sampling = {"frequency_penalty": 0.0, "n": 1, "presence_penalty": 0.0, "temperature": 0.0, "top_p": 1.0,
                "seed": 7, "max_tokens": 40, "logprobs": 2, "structured_outputs": json.dumps(structured)}
    prompt = "<|im_start|>user\nDescribe a person called Ada, aged 36, as JSON.<|im_end|>\n<|im_start|>assistant\n"
    inputs = [tensor("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
              tensor("stream", np.array([False], dtype=bool), "BOOL"),
              tensor("exclude_input_in_output", np.array([True], dtype=bool), "BOOL"),
              tensor("sampling_parameters", np.array([json.dumps(sampling).encode()], dtype=np.object_), "BYTES"),
              tensor("return_logprobs", np.array([True], dtype=bool), "BOOL"),
              tensor("return_num_input_tokens", np.array([True], dtype=bool), "BOOL"),
              tensor("return_num_output_tokens", np.array([True], dtype=bool), "BOOL")]
    (response,) = stream(server, inputs)
    assert output_names(response) == {"text_output", "logprobs", "num_input_tokens", "num_output_tokens"}
    text = response.as_numpy("text_output")[0].decode()
    jsonschema.validate(json.loads(text), schema)
    per_token = json.loads(response.as_numpy("logprobs")[0])
    assert len(per_token) == int(response.as_numpy("num_output_tokens")[0]) > 0
    for entry in per_token:
        assert 1 <= len(entry) <= 3  # the chosen token and the (up to) 2 most likely, filtered ones not listed
        for token_id, info in entry.items():
            assert int(token_id) >= 0 and set(info) == {"logprob", "rank", "decoded_token"}
            assert info["logprob"] <= 0 and info["rank"] >= 1
    assert int(response.as_numpy("num_input_tokens")[0]) > 10


@pytest.mark.server
@pytest.mark.server
def test_return_finish_reason_and_cumulative_logprob_in_vllms_words(server):
    inputs = [tensor("text_input", np.array([b"Once upon a time"], dtype=np.object_), "BYTES"),
              tensor("stream", np.array([True], dtype=bool), "BOOL"),
              tensor("sampling_parameters", np.array([json.dumps({"max_tokens": 5, "logprobs": 0}).encode()],
                                                     dtype=np.object_), "BYTES"),
              tensor("return_finish_reason", np.array([True], dtype=bool), "BOOL"),
              tensor("return_cumulative_logprob", np.array([True], dtype=bool), "BOOL")]
    got = stream(server, inputs)
    assert all(output_names(r) == {"text_output", "finish_reason", "cumulative_logprob"} for r in got)
    reasons = [r.as_numpy("finish_reason")[0].decode() for r in got]
    assert reasons[-1] == "length" and all(x == "None" for x in reasons[:-1])
    totals = [float(r.as_numpy("cumulative_logprob")[0]) for r in got]
    assert all(b <= a for a, b in zip(totals, totals[1:])) and totals[-1] < 0
