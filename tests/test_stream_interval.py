"""stream_interval: streamed responses carry groups of tokens, the same tokens in the same order."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritongen.triton.generator_settings import parse_settings

from triton_helpers import NO_HEADS, small_repository, start_server, stop_server_later, tensor

pytestmark = pytest.mark.server
NEW_TOKENS = 23  # not a multiple of the interval: the last response holds the remainder


def streamed_ids(server, parameters=None) -> list[list[int]]:
    """output_ids of every response of one greedy streaming request, ignoring EOS."""
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    inputs = [tensor("text_input", np.array([b"Once upon a time"], dtype=object)),
              tensor("max_tokens", np.array([NEW_TOKENS], dtype=np.int32)),
              tensor("ignore_eos", np.array([True])), tensor("stream", np.array([True]))]
    client.async_stream_infer("generator", inputs, outputs=[grpcclient.InferRequestedOutput("output_ids")],
                              parameters=parameters)
    pieces = []
    try:
        while True:
            result, error = events.get(timeout=60)
            if error is not None:
                raise RuntimeError(error.message())
            pieces.append(result.as_numpy("output_ids").tolist())
            if result.get_response().parameters["triton_final_response"].bool_param:
                return pieces
    finally:
        client.stop_stream()


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_stream_interval_must_be_a_positive_integer(tmp_path, value):
    with pytest.raises(ValueError, match="stream_interval"):
        parse_settings({"stream_interval": value}, tmp_path)


def assert_grouped(pieces, interval):
    assert all(len(piece) >= interval for piece in pieces[:-1]) and len(pieces[-1]) <= interval
    assert len(pieces) <= NEW_TOKENS // interval + 1


def test_responses_hold_interval_tokens_and_the_same_output(generator_server, tmp_path):
    outputs = {1: streamed_ids(generator_server)}  # the shipped stream_interval, 1
    outputs["request 3"] = streamed_ids(generator_server, {"stream_interval": 3})  # a request's own overrides it
    with pytest.raises(RuntimeError, match="stream_interval must be at least 1, got 0"):
        streamed_ids(generator_server, {"stream_interval": 0})
    assert streamed_ids(generator_server) == outputs[1]  # the server goes on serving
    server = start_server(small_repository(tmp_path / "repo", stream_interval="4", **NO_HEADS), tmp_path / "log")
    try:
        outputs[4] = streamed_ids(server)
    finally:
        stop_server_later(server)
    one, four, three = outputs[1], outputs[4], outputs["request 3"]
    assert sum(one, []) == sum(four, []) == sum(three, []) and len(sum(four, [])) == NEW_TOKENS
    assert len(one) >= NEW_TOKENS - 2  # about a token per response (a piece without text waits for the next)
    assert_grouped(four, 4)
    assert_grouped(three, 3)
