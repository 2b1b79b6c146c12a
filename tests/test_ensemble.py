"""TensorRT-LLM's Triton clients, unchanged, against the `ensemble` model: the request their clients send
(`[1, 1]` shapes over gRPC streaming, scalars over the HTTP generate endpoint, genai-perf's
`--backend tensorrtllm`) gets the generator's own tokens, streamed as Triton's ensemble scheduler carries
the decoupled generator's responses; a field the generator cannot honour is an error naming it."""

from __future__ import annotations

import json
import queue
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from bench.clients import genai_perf
from tritongen.runtime.repository import read_config
from tritongen.runtime.tokenizer import TextTokenizer
from tritongen.serve import TritonServer
from tritongen.triton.request_limits import RequestError
from tritongen.triton.tensorrtllm_tensors import generator_inputs

from conftest import REPOSITORY
from triton_helpers import http_post, read_events, sse_socket, stop_server, tensor

QUESTION = "What is the capital of France?"  # client/demo.py's
MAX_TOKENS = 16


def rows(*values) -> np.ndarray:
    """One batch row, as TensorRT-LLM's clients send every input: shape [1, len(values)]."""
    if all(isinstance(v, str) for v in values):
        return np.array([[v.encode() for v in values]], dtype=np.object_)
    return np.array([values])


# ---- the configuration and the mapping, without a server -------------------------------------------------------

def test_every_generator_input_is_mapped_and_every_step_tensor_declared():
    """Triton refuses an ensemble that leaves a composing model's input unmapped: a new generator input must
    reach the ensemble's configuration too."""
    ensemble, inputs, outputs = (read_config(REPOSITORY / name)
                                 for name in ("ensemble", "tensorrtllm_inputs", "tensorrtllm_outputs"))
    generator = read_config(REPOSITORY / "generator")
    steps = {step.model_name: step for step in ensemble.ensemble_scheduling.step}
    assert set(steps["generator"].input_map) == {i.name for i in generator.input}
    assert {o.name for o in inputs.output} == {"gen_" + i.name for i in generator.input}
    assert set(steps["tensorrtllm_inputs"].input_map) == {i.name for i in inputs.input}
    assert [(i.name, i.data_type, list(i.dims)) for i in ensemble.input] == [
        (i.name, i.data_type, list(i.dims)) for i in inputs.input]
    assert [(o.name, o.data_type) for o in ensemble.output] == [(o.name, o.data_type) for o in outputs.output]
    assert set(steps["tensorrtllm_outputs"].input_map) == {i.name for i in outputs.input}


def test_the_mapping_names_each_field_it_cannot_serve():
    base = {"text_input": rows("Hi"), "max_tokens": rows(np.int32(4))}
    neutral = {"beam_width": rows(np.int32(1)), "pad_id": rows(np.int32(2)), "bad_words": rows(""),
               "stop_words": rows("", ""), "decoder_text_input": rows(""), "embedding_bias_words": rows(""),
               "embedding_bias_weights": np.zeros((1, 0), np.float32)}
    assert set(generator_inputs({**base, **neutral})) == {"text_input", "max_tokens"}
    with pytest.raises(RequestError, match="decoder_text_input"):
        generator_inputs({**base, "decoder_text_input": rows("Bonjour")})
    for field, value in [("beam_width", np.int32(2)), ("length_penalty", np.float32(0.5)),
                         ("num_return_sequences", np.int32(3)), ("return_generation_logits", True),
                         ("lora_task_id", np.uint64(1)), ("embedding_bias_words", "Paris")]:
        with pytest.raises(RequestError, match=field):
            generator_inputs({**base, field: rows(value)})
    with pytest.raises(RequestError, match="min_tokens and min_length"):
        generator_inputs({**base, "min_tokens": rows(np.int32(2)), "min_length": rows(np.int32(3))})
    mapped = generator_inputs({**base, "min_length": rows(np.int32(3)), "bad_words": rows("Paris", ""),
                               "stop_words": rows(".", "")})
    assert mapped["min_length"].tolist() == [[3]] and mapped["stop_words"].tolist() == [[b"."]]
    assert json.loads(mapped["sampling_parameters"][0, 0]) == {"bad_words": ["Paris"]}


# ---- through the real server -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(target_gqa_folder, tmp_path_factory):
    """The repository as `make models` leaves it, loading what `make serve` loads."""
    srv = TritonServer(REPOSITORY, None, http_port=0, grpc_port=0, metrics_port=0,
                       log_file=tmp_path_factory.mktemp("ensemble") / "server.log",
                       extra_args=["--exit-timeout-secs=10"]).start()
    try:
        yield srv
    finally:
        stop_server(srv)


@pytest.fixture(scope="module")
def prompt(target_gqa_folder) -> str:
    """The demo question as a TensorRT-LLM client sends it: the model's chat template applied, as text."""
    return TextTokenizer(target_gqa_folder).render_chat([{"role": "user", "content": QUESTION}])


def stream(server, model: str, inputs: dict) -> list:
    """Every response of one request on a gRPC stream: {output: array}, or the error's text."""
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    client.async_stream_infer(model, [tensor(k, v) for k, v in inputs.items()])
    got: list = []
    try:
        while True:
            result, error = events.get(timeout=120)
            if error is not None:
                return [*got, str(error)]
            response = result.get_response()
            got.append({o.name: result.as_numpy(o.name) for o in response.outputs})
            if response.parameters["triton_final_response"].bool_param:
                return got
    finally:
        client.stop_stream(cancel_requests=bool(got) and isinstance(got[-1], str))
        client.close()


def pieces(responses: list) -> list[tuple[str, int]]:
    """(text, tokens) of each ensemble response."""
    return [(r["text_output"].reshape(-1)[0].decode(), int(r["num_output_tokens"].sum())) for r in responses]


def generator_pieces(server, prompt: str, **extra) -> list[tuple[str, int]]:
    inputs = {"text_input": np.array([prompt.encode()], dtype=np.object_),
              "max_tokens": np.array([MAX_TOKENS], np.int32), "stream": np.array([True]), **extra}
    return [(r["text_output"][0].decode(), len(r["output_ids"])) for r in stream(server, "generator", inputs)]


def ensemble_request(prompt: str, **extra) -> dict:
    """What TensorRT-LLM's streaming clients send the ensemble: every input one batch row."""
    return {"text_input": rows(prompt), "max_tokens": rows(np.int32(MAX_TOKENS)), "stream": rows(True),
            "bad_words": rows(""), "stop_words": rows(""), **extra}


@pytest.mark.server
def test_grpc_streaming_answers_paris_with_the_generators_tokens(server, prompt):
    got = stream(server, "ensemble", ensemble_request(prompt))
    assert all(isinstance(r, dict) for r in got), got
    assert all(r["text_output"].shape[0] == 1 and r["batch_index"].tolist() == [[0]] for r in got)
    text = "".join(t for t, _ in pieces(got))
    assert "Paris" in text and len(got) > 3  # streamed: one response per new piece of text
    assert pieces(got) == generator_pieces(server, prompt)


@pytest.mark.server
def test_http_generate_with_scalars_and_generate_stream(server, prompt):
    """TensorRT-LLM's documented curl requests: JSON scalars, no batch dimension written."""
    body = {"text_input": prompt, "max_tokens": MAX_TOKENS, "bad_words": "", "stop_words": ""}
    status, reply = http_post(server, "/v2/models/ensemble/generate", body)
    assert status == 200, reply
    answer = "".join(t for t, _ in generator_pieces(server, prompt))
    assert json.loads(reply)["text_output"] == prompt + answer  # exclude_input_in_output false: prompt first
    sock = sse_socket(server, {**body, "stream": True, "exclude_input_in_output": True},
                      "/v2/models/ensemble/generate_stream")
    try:
        events = read_events(sock, 4).split(b"data:")[1:]
    finally:
        sock.close()
    texts = [json.loads(e.split(b"\n\n")[0])["text_output"] for e in events[:4]]
    assert "".join(texts) == answer[:len("".join(texts))] and all(texts[:3])


@pytest.mark.server
def test_stop_words_and_bad_words_in_tensorrtllm_shapes(server, prompt):
    plain = "".join(t for t, _ in pieces(stream(server, "ensemble", ensemble_request(prompt))))
    stopped = stream(server, "ensemble", ensemble_request(prompt, stop_words=rows("Paris", "")))
    banned = stream(server, "ensemble", ensemble_request(prompt, bad_words=rows("Paris", "")))
    assert "".join(t for t, _ in pieces(stopped)) == plain[:plain.index("Paris")]  # the stop itself left out
    banned_text = "".join(t for t, _ in pieces(banned))
    assert "Paris" not in banned_text and banned_text != plain


@pytest.mark.server
def test_log_probs_per_token(server, prompt):
    got = stream(server, "ensemble", ensemble_request(prompt, return_log_probs=rows(True)))
    per_token = [float(v) for r in got for v in r["output_log_probs"].reshape(-1)]
    assert len(per_token) == sum(n for _, n in pieces(got)) and all(v <= 0 for v in per_token)
    assert float(got[-1]["cum_log_probs"].reshape(-1)[0]) == pytest.approx(sum(per_token), rel=1e-4, abs=1e-4)


@pytest.mark.server
@pytest.mark.parametrize("field, value", [("beam_width", np.int32(2)), ("length_penalty", np.float32(2.0)),
                                          ("return_context_logits", True)])
def test_an_unsupported_field_is_an_error_naming_it(server, prompt, field, value):
    got = stream(server, "ensemble", ensemble_request(prompt, **{field: rows(value)}))
    assert len(got) == 1 and isinstance(got[0], str) and field in got[0], got
    status, reply = http_post(server, "/v2/models/ensemble/generate",
                              {"text_input": prompt, "max_tokens": MAX_TOKENS, field: value.item()
                               if isinstance(value, np.generic) else value})
    assert status == 400 and field in json.loads(reply)["error"], reply


@pytest.mark.server
def test_a_guide_nested_past_the_depth_bound_is_an_error_naming_it(server, prompt):
    """The step passes the guide on; the generator refuses it before anything parses it."""
    guide = {"guided_decoding_guide_type": rows("json_schema"), "guided_decoding_guide": rows("[" * 100_000)}
    got = stream(server, "ensemble", ensemble_request(prompt, **guide))
    assert len(got) == 1 and isinstance(got[0], str) and "guided_decoding_guide nests deeper" in got[0], got


@pytest.mark.server
def test_model_control_stays_with_the_operator(server):
    """Loading the ensemble opens no door: a client still cannot unload it or its generator."""
    for model in ("ensemble", "generator", "tensorrtllm_inputs"):
        status, reply = http_post(server, f"/v2/repository/models/{model}/unload", {})
        assert status == 403, (model, status, reply)
    with urllib.request.urlopen(server.url_http + "/v2/models/ensemble/ready", timeout=5) as r:
        assert r.status == 200


@pytest.mark.server
def test_genai_perf_profiles_the_ensemble_as_tensorrtllm(server, target_gqa_folder, tmp_path):
    """genai-perf's TensorRT-LLM payload: text_input, max_tokens, min_length (deterministic output length),
    stream, exclude_input_in_output; three requests."""
    output_tokens = 8
    summary = genai_perf("tensorrtllm ensemble", [
        "profile", "-m", "ensemble", "--backend", "tensorrtllm", "--endpoint-type", "kserve", "--streaming",
        "-u", server.url_grpc, "--tokenizer", str(target_gqa_folder), "--synthetic-input-tokens-mean", "32",
        "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(output_tokens),
        "--output-tokens-mean-deterministic", "--concurrency", "1", "--request-count", "3",
        "--warmup-request-count", "0", "--random-seed", "5", "--artifact-dir", str(tmp_path / "artifacts")])
    assert "error" not in summary, summary
    assert summary["request_count"] == 3, summary
    assert summary["output_sequence_length"]["avg"] == output_tokens, summary
