"""Cancellation and client disconnects through the real tritonserver, and what they leave behind.

Which disconnects Triton 2.51 reports to the model (`sender.is_cancelled()`),
checked by the generator's `request cancelled after N tokens` log line and
by generation stopping early:
  - gRPC stream cancelled (`stop_stream(cancel_requests=True)`): reported
  - gRPC channel closed under a live stream: reported
  - gRPC client process killed (SIGKILL): reported
  - HTTP /generate_stream (SSE) socket closed, or reset, mid-stream: reported
  - HTTP /generate (one response) socket closed while it generates: NOT reported;
    the generation runs to max_tokens, then its pages are freed as usual
Each reported one stops within a few tokens and frees its pages; a cancelled session
turn drops its pin and frees the session id; a cancelled constrained
request frees its matcher. After 500 cancelled streams the pool, the
python backend's /dev/shm regions and the stub's resident memory are back
where they were after a warm-up.
"""

from __future__ import annotations

import gc
import json
import queue
import socket
import struct
import subprocess
import sys
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritongen.engine.engine import Engine
from tritongen.engine.options import GenerateConstraint, GenerateOptions, GenerateRequest
from tritongen.speculative.modes import SpeculativeMode

from triton_helpers import (
    NO_HEADS,
    cancelled_counts,
    generate,
    grpc_request,
    is_final,
    read_events,
    rss_kib,
    scrape,
    shm_bytes,
    small_repository,
    sse_socket,
    start_server,
    stop_server_later,
    stub_pid,
    tensor,
    text,
    wait_idle,
)

pytestmark = pytest.mark.server
PAGES = 256
LONG = {"text_input": "Tell me a long story about a dragon.", "max_tokens": 400, "ignore_eos": True, "stream": True}


def long_inputs(**extra) -> list:
    body = {**LONG, **extra}
    arrays = {"text_input": text(body.pop("text_input")), "max_tokens": np.array([body.pop("max_tokens")], np.int32)}
    for name, value in body.items():
        arrays[name] = np.array([value]) if isinstance(value, bool) else text(value)
    return [tensor(k, v) for k, v in arrays.items()]


@pytest.fixture(scope="module")
def server(target_folder, tmp_path_factory):
    root = tmp_path_factory.mktemp("cancellation")
    repository = small_repository(root / "repo", max_model_len="512", num_gpu_pages=str(PAGES), max_num_seqs="16",
                                  **NO_HEADS)
    srv = start_server(repository, root / "server.log")
    try:
        assert generate(srv, {"text_input": "Hello", "max_tokens": 2})[0] == 200
        srv.baseline = wait_idle(srv)
        yield srv
    finally:
        stop_server_later(srv)


class GrpcStream:
    """A streaming request whose responses are counted as they arrive."""

    def __init__(self, server, inputs, parameters=None):
        self.events: queue.Queue = queue.Queue()
        self.client = grpcclient.InferenceServerClient(server.url_grpc)
        self.client.start_stream(callback=lambda result, error: self.events.put((result, error)))
        self.client.async_stream_infer("generator", inputs, parameters=parameters)

    def take(self, n: int, timeout: float = 60) -> list:
        got = [self.events.get(timeout=timeout) for _ in range(n)]
        assert all(e is None for _, e in got), got
        return got


CHILD = """
import queue, sys, numpy as np, tritonclient.grpc as g
from tritonclient.utils import np_to_triton_dtype
def tensor(name, value):
    value = np.asarray(value)
    t = g.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t
events = queue.Queue()
client = g.InferenceServerClient(sys.argv[1])
client.start_stream(callback=lambda result, error: events.put((result, error)))
client.async_stream_infer("generator", [tensor("text_input", np.array([sys.argv[2].encode()], dtype=object)),
    tensor("max_tokens", np.array([400], np.int32)), tensor("ignore_eos", np.array([True])),
    tensor("stream", np.array([True]))])
for _ in range(3):
    assert events.get(timeout=60)[1] is None
print("streaming", flush=True)
sys.stdin.read()
"""


def disconnect(kind: str, server) -> int:
    """Start a long generation, disconnect the way `kind` says once 3 responses arrived; pieces the client saw."""
    if kind.startswith("grpc"):
        if kind == "grpc_client_killed":
            child = subprocess.Popen([sys.executable, "-c", CHILD, server.url_grpc, LONG["text_input"]],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert child.stdout.readline().strip() == "streaming"
            child.kill()
            child.wait()
            return 3
        stream = GrpcStream(server, long_inputs())
        stream.take(3)
        if kind == "grpc_stream_cancelled":
            stream.client.stop_stream(cancel_requests=True)
        else:  # grpc_channel_closed: the connection goes away under a live stream, no cancel message first
            stream.client._channel.close()
        return 3
    sock = sse_socket(server, LONG)
    read_events(sock, 3)
    if kind == "http_sse_reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, not FIN
    sock.close()
    return 3


def wait_for_new_cancel(server, before: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = cancelled_counts(server)
        if len(counts) > before:
            return counts[-1]
        time.sleep(0.1)
    raise AssertionError("the generator never saw the cancellation (Triton did not report the disconnect)")


@pytest.mark.parametrize("kind", ["grpc_stream_cancelled", "grpc_channel_closed", "grpc_client_killed",
                                  "http_sse_closed", "http_sse_reset"])
def test_disconnect_is_reported_and_generation_stops(server, kind):
    before = len(cancelled_counts(server))
    t0 = time.monotonic()
    seen = disconnect(kind, server)
    generated = wait_for_new_cancel(server, before)
    elapsed = time.monotonic() - t0
    print(f"\n{kind}: client saw {seen} responses; generator stopped after {generated} tokens "
          f"(of 400), {elapsed:.1f}s after the request")
    assert generated < 60, f"generation went on for {generated} tokens after the disconnect"
    m = wait_idle(server)
    assert m["tritongen:kv_pages_used"] == server.baseline["tritongen:kv_pages_used"], m


def test_http_generate_disconnect_is_not_reported_and_runs_to_its_end(server):
    """Triton 2.51's HTTP front end notices a closed socket only when it writes to it; /generate writes once,
    at the end, so the generator is never told and finishes the request (bounded by max_tokens)."""
    before = len(cancelled_counts(server))
    done_before = wait_idle(server).get("tritongen:request_success_total", 0)
    sock = sse_socket(server, {**LONG, "stream": False, "max_tokens": 40}, path="/v2/models/generator/generate")
    deadline = time.monotonic() + 30
    while scrape(server)["tritongen:num_requests_running"] == 0:  # it is generating
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sock.close()
    m = wait_idle(server)
    while m.get("tritongen:request_success_total", 0) == done_before:  # counted when the result is sent
        assert time.monotonic() < deadline
        time.sleep(0.1)
        m = scrape(server)
    assert len(cancelled_counts(server)) == before, "this disconnect was reported after all: update the docstring"
    assert m["tritongen:kv_pages_used"] == server.baseline["tritongen:kv_pages_used"]


def test_cancelled_session_turn_releases_its_pin_and_session(server):
    base = wait_idle(server)["tritongen:kv_pages_used"]
    first = {"text_input": "My name is Ada and I like to", "max_tokens": 5, "session_id": "cancel-me",
             "exclude_input_in_output": True}
    status, body = generate(server, first)
    assert status == 200, body
    pinned = wait_idle(server)["tritongen:kv_pages_used"]
    assert pinned > base  # the finished turn keeps its KV for the next one
    before = len(cancelled_counts(server))
    stream = GrpcStream(server, long_inputs(text_input=first["text_input"] + json.loads(body)["text_output"],
                                            session_id="cancel-me"))
    stream.take(2)
    stream.client.stop_stream(cancel_requests=True)
    wait_for_new_cancel(server, before)
    assert wait_idle(server)["tritongen:kv_pages_used"] == base  # the pin went with the cancelled turn
    # The session id is free again (no "already has a request in flight"), and end_session closes it.
    status, body = generate(server, {"text_input": "Hi", "max_tokens": 2, "session_id": "cancel-me",
                                     "end_session": True})
    assert status == 200, body
    assert wait_idle(server)["tritongen:kv_pages_used"] == base


def test_cancelled_constrained_request_then_constraints_still_work(server):
    schema = json.dumps({"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"]})
    before = len(cancelled_counts(server))
    stream = GrpcStream(server, long_inputs(guided_decoding_guide_type="json_schema", guided_decoding_guide=schema))
    stream.take(2)
    stream.client.stop_stream(cancel_requests=True)
    assert wait_for_new_cancel(server, before) < 60
    got = grpc_request(server, {"text_input": text("Give me JSON with a color."),
                                "max_tokens": np.array([40], np.int32),
                                "guided_decoding_guide_type": text("json_schema"), "guided_decoding_guide": text(
                                    json.dumps({"type": "object", "properties": {"color": {"enum": ["red", "blue"]}},
                                                "required": ["color"], "additionalProperties": False})),
                                "exclude_input_in_output": np.array([True])})
    assert got[-1][1] is None, got
    assert json.loads(got[-1][0].as_numpy("text_output")[0].decode())["color"] in ("red", "blue")
    assert wait_idle(server)["tritongen:kv_pages_used"] == server.baseline["tritongen:kv_pages_used"]


def cancel_after_first_response(server, i: int) -> str | None:
    """One short stream, cancelled as soon as its first response arrives; None, or what went wrong."""
    inputs = [tensor("text_input", text(f"Count to ten, take {i}:")), tensor("max_tokens", np.array([64], np.int32)),
              tensor("ignore_eos", np.array([True])), tensor("stream", np.array([True]))]
    if i % 5 == 0:  # some constrained: their matchers must go too
        inputs += [tensor("guided_decoding_guide_type", text("regex")),
                   tensor("guided_decoding_guide", text("[a-z ]+"))]
    if i % 7 == 0:  # some in a session: no pin may stay behind
        inputs.append(tensor("session_id", text(f"wave-{i}")))
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    try:
        client.start_stream(callback=lambda result, error: events.put((result, error)))
        client.async_stream_infer("generator", inputs)
        result, error = events.get(timeout=120)
        if error is not None:
            return str(error)
        if is_final(result):
            return "finished before it could be cancelled"
        return None
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


def run_waves(server, count: int, wave: int, offset: int = 0) -> list[str]:
    """count cancelled streams, `wave` of them open at any time."""
    with ThreadPoolExecutor(wave) as pool:
        problems = list(pool.map(lambda i: cancel_after_first_response(server, offset + i), range(count)))
    return [p for p in problems if p is not None]


def test_500_cancelled_streams_leave_no_pages_shm_or_memory_behind(server):
    pids = [server.process.pid, stub_pid(server)]
    assert run_waves(server, 25, 25, offset=10_000) == []  # warm-up: Triton's and the stub's pools reach size
    wait_idle(server)
    gc_settle = time.monotonic() + 1
    while time.monotonic() < gc_settle:
        time.sleep(0.1)
    start = {"free": wait_idle(server)["tritongen:kv_pages_free"], "shm": shm_bytes(pids), "rss": rss_kib(pids[1]),
             "cancelled": len(cancelled_counts(server))}
    t0 = time.monotonic()
    problems = run_waves(server, 500, 25)
    elapsed = time.monotonic() - t0
    m = wait_idle(server)
    time.sleep(1)
    end = {"free": wait_idle(server)["tritongen:kv_pages_free"], "shm": shm_bytes(pids), "rss": rss_kib(pids[1]),
           "cancelled": len(cancelled_counts(server))}
    print(f"\n500 cancelled streams in {elapsed:.0f}s: pages free {start['free']:.0f} -> {end['free']:.0f} "
          f"(of {PAGES}), /dev/shm {start['shm']} -> {end['shm']} bytes, stub RSS {start['rss']} -> {end['rss']} KiB "
          f"({100 * (end['rss'] - start['rss']) / start['rss']:+.1f}%), cancellations logged "
          f"{end['cancelled'] - start['cancelled']}")
    assert problems == []
    assert end["cancelled"] - start["cancelled"] == 500
    assert end["free"] == start["free"] == PAGES, m
    assert end["shm"] == start["shm"]
    assert end["rss"] < start["rss"] * 1.05


# ---- in-process: what a cancelled request leaves in the engine ----------------------------------------------


def cancel_midway(engine, request: GenerateRequest, **kwargs) -> weakref.ref:
    """Stream a request, cancel it after its first token; a weak reference to its sequence."""
    stream = engine.stream(request, **kwargs)
    next(stream)
    with engine._wake:
        (seq,) = [s for s in engine._live.values() if s.prompt_ids == engine.prepare(request).prompt_ids]
        ref = weakref.ref(seq)
        del seq
    stream.close()  # closing the iterator cancels the request
    deadline = time.monotonic() + 30
    while ref() is not None and ref() in engine._live.values() and time.monotonic() < deadline:
        time.sleep(0.01)
    return ref


def test_cancelled_requests_release_pages_matchers_and_proposer_state(tiny_folder):
    engine = Engine(tiny_folder)
    try:
        refs = [
            cancel_midway(engine, GenerateRequest("abc abc abc plain", GenerateOptions(max_new_tokens=200,
                                                                                     stop_on_eos=False))),
            cancel_midway(engine, GenerateRequest("abc abc abc constrained", GenerateOptions(
                max_new_tokens=200, constraint=GenerateConstraint("regex", "[a-z ]+")))),
            cancel_midway(engine, GenerateRequest("abc abc abc speculative", GenerateOptions(
                max_new_tokens=200, stop_on_eos=False, speculative_mode=SpeculativeMode("prompt_lookup", ngram=1)))),
        ]
        engine.generate(GenerateRequest("Hi", GenerateOptions(max_new_tokens=2)))  # a step after them
        gc.collect()
        assert not engine._live and engine.scheduler.running == [] and engine.scheduler.waiting == []
        assert engine.pool.num_used() == 0
        assert [r() for r in refs] == [None] * 3, "a cancelled sequence (its matcher, its draft state) is still held"
    finally:
        engine.close()


def test_cancelled_session_turn_keeps_no_pin_in_process(tiny_folder):
    engine = Engine(tiny_folder)
    try:
        cancel_midway(engine, GenerateRequest("abc abc abc session", GenerateOptions(max_new_tokens=200,
                                                                                   stop_on_eos=False)),
                      session_id="s1")
        engine.generate(GenerateRequest("Hi", GenerateOptions(max_new_tokens=2)))
        assert not engine._sessions_in_flight
        assert not engine.kv.sessions, f"pinned after cancel: {list(engine.kv.sessions)}"
        assert engine.pool.num_used() == 0
    finally:
        engine.close()
