"""Overload, faults and shutdown: every request is answered, nothing hangs, nothing leaks.

Through the real tritonserver (a generator with 4 batch slots, a 20-page
pool and a queue of 2):
  - a burst beyond batch + queue gets "overloaded" errors at once; clients
    that retry all complete, each with the text it gets alone;
  - a client cancelled while still queued frees its queue place;
  - a missing or corrupt model file fails the load with the reason in the log;
  - clients that stop reading (gRPC and SSE) do not slow the other streams;
  - SIGTERM with HTTP clients connected ends every stream with a final
    response or an error, never a hang;
  - SIGTERM with 16 gRPC streams (a server of its own with 16 slots and a
    disk tier) ends every stream with a final response (its tokens within
    the grace period, else "the server is stopping"), leaves no process and
    no half-written disk-tier file.
In-process (no server): an exception in one request's logits processor,
constraint matcher, proposer or verification call fails that request alone;
the rest of its batch finishes with the output it gets alone.
"""

from __future__ import annotations

import json
import queue
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, GenerateConstraint, GenerateOptions, GenerateRequest
from tritongen.serve import TritonServer
from tritongen.speculative.modes import SpeculativeMode
from tritongen.speculative.prompt_lookup import PromptLookupProposer
from tritongen.speculative.proposer import Proposal

from conftest import REPOSITORY
from triton_helpers import (
    NO_HEADS,
    cancelled_counts,
    generate,
    grpc_request,
    grpc_text,
    is_final,
    read_events,
    small_repository,
    sse_socket,
    start_server,
    stop_server,
    stop_server_later,
    stub_crashes,
    stub_pid,
    tensor,
    text,
    tiny_repository,
    wait_idle,
)

pytestmark = pytest.mark.server

SEQS, PAGES, QUEUE, PAGE = 4, 20, 2, 16
# 41-71-token prompts + 40 new tokens: 6-7 pages each, so 4 running sequences need more than 20 pages and
# the pool, not only the batch, runs out (the newest sequence is preempted and resumes later).
PROMPTS = [
    "Here is a list of fruits and their colors. Apple is red. Banana is yellow. Grape is purple. Orange is "
    "orange. Lime is green. Blueberry is blue. Cherry is red. Lemon is yellow. Plum is purple. Continue the list:",
    "The history of the bicycle begins in the early nineteenth century, when inventors in Germany and France "
    "built wooden machines pushed along by the feet. Later designs added pedals, chains and air tyres. Next,",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result\n\ndef",
]
NEW_TOKENS = 40


@pytest.fixture(scope="module")
def server(target_folder, tmp_path_factory):
    root = tmp_path_factory.mktemp("overload")
    repository = small_repository(root / "repo", max_model_len="256", num_gpu_pages=str(PAGES),
                                  max_num_seqs=str(SEQS), max_queue_len=str(QUEUE), **NO_HEADS)
    srv = start_server(repository, root / "server.log", exit_timeout=2)
    try:
        yield srv
    finally:
        stop_server_later(srv)


def request_body(prompt: str) -> dict:
    return {"text_input": prompt, "max_tokens": NEW_TOKENS, "ignore_eos": True, "exclude_input_in_output": True}


def grpc_inputs(body: dict) -> list:
    arrays = {}
    for name, value in body.items():
        if isinstance(value, bool):
            arrays[name] = np.array([value])
        elif isinstance(value, int):
            arrays[name] = np.array([value], np.int32)
        elif isinstance(value, str):
            arrays[name] = text(value)
        else:
            arrays[name] = np.asarray(value)
    return [tensor(k, v) for k, v in arrays.items()]


def one_request(server, prompt: str, via: str) -> tuple[str | None, str | None]:
    """(text, None) or (None, error message)."""
    body = request_body(prompt)
    if via == "http":
        status, out = generate(server, body, timeout=300)
        return (json.loads(out)["text_output"], None) if status == 200 else (None, f"HTTP {status}: {out}")
    got = grpc_request(server, grpc_inputs(body), timeout=300)
    error = got[-1][1]
    return (None, str(error)) if error is not None else (grpc_text(got), None)


def test_burst_beyond_batch_and_queue_is_refused_fast_and_retries_complete_correctly(server):
    tokens = [int(json.loads(generate(server, {"text_input": p, "max_tokens": 1})[1])["num_input_tokens"])
              for p in PROMPTS]
    assert SEQS * -(-(min(tokens) + NEW_TOKENS) // PAGE) > PAGES, "the pool must be the tighter limit"
    solo = {p: one_request(server, p, "http")[0] for p in PROMPTS}
    assert all(solo.values())
    clients = [(PROMPTS[i % 3], "grpc" if i % 2 else "http") for i in range(2 * (SEQS + QUEUE))]
    outcomes: list = []

    def client(prompt, via):
        refusals = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            out, error = one_request(server, prompt, via)
            if error is None:
                outcomes.append((prompt, via, out, refusals))
                return
            refusals.append((error, time.monotonic() - t0))
            time.sleep(0.3)  # a client's back-off before it retries
        outcomes.append((prompt, via, None, refusals))

    threads = [threading.Thread(target=client, args=c) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(outcomes) == len(clients), "a client hung"
    refusals = [r for *_, rs in outcomes for r in rs]
    print(f"\nburst of {len(clients)} (batch {SEQS}, queue {QUEUE}): refused on the first try "
          f"{sum(1 for *_, rs in outcomes if rs)}, refusals in all {len(refusals)}, slowest refusal "
          f"{max((t for _, t in refusals), default=0):.2f}s; e.g. {refusals[0][0] if refusals else None!r}")
    assert refusals, "the burst never hit the queue bound"
    for error, seconds in refusals:
        assert "overloaded" in error and "max_queue_len" in error, error
        # UNAVAILABLE over gRPC; Triton's HTTP generate endpoint answers 400 for every error a model sends
        assert error.startswith("HTTP 400") or not error.startswith("HTTP"), error
        assert seconds < 5, "an overloaded request must be refused at once, not queued"
    for prompt, via, out, _ in outcomes:
        assert out == solo[prompt], f"{via}: output under load differs from the solo run: {out!r}"
    assert wait_idle(server)["tritongen:kv_pages_used"] == 0


def test_a_burst_that_fits_batch_and_queue_is_all_accepted(server):
    results: list = []
    threads = [threading.Thread(target=lambda p=p: results.append(one_request(server, p, "grpc")))
               for p in (PROMPTS * 2)[:SEQS + QUEUE]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    errors = [e for _, e in results if e is not None]
    assert len(results) == SEQS + QUEUE and errors == [], errors


def long_stream(server, **extra) -> "Stream":
    return Stream(server, grpc_inputs({"text_input": "Tell me a long story.", "max_tokens": 60, "ignore_eos": True,
                                       "stream": True, **extra}))


class Stream:
    def __init__(self, server, inputs, on_response=None):
        self.events: queue.Queue = queue.Queue()
        self.client = grpcclient.InferenceServerClient(server.url_grpc)
        self.times: list[float] = []

        def callback(result, error):
            self.times.append(time.monotonic())
            if on_response is not None:
                on_response()
            self.events.put((result, error))

        self.client.start_stream(callback=callback)
        self.client.async_stream_infer("generator", inputs)

    def next(self, timeout=120):
        return self.events.get(timeout=timeout)

    def drain(self, timeout=120) -> tuple[list, str | None]:
        """Responses until the final one; and the error, if one ended the stream."""
        got = []
        while True:
            result, error = self.next(timeout)
            if error is not None:
                return got, str(error)
            got.append(result)
            if is_final(result):
                return got, None

    def close(self, cancel=True):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def test_client_cancelled_while_queued_frees_its_queue_place(server):
    running = []
    for _ in range(SEQS):  # one at a time, each running before the next arrives
        running.append(long_stream(server))
        assert running[-1].next()[1] is None
    queued = [long_stream(server) for _ in range(QUEUE)]
    time.sleep(0.5)
    got = grpc_request(server, grpc_inputs(request_body(PROMPTS[0])))
    assert got[-1][1] is not None and "overloaded" in str(got[-1][1])  # the queue is full
    before = len(cancelled_counts(server))
    for s in queued:
        s.close()  # gone while still waiting for a slot
    deadline = time.monotonic() + 10
    while len(cancelled_counts(server)) < before + QUEUE and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        got = grpc_request(server, grpc_inputs({**request_body(PROMPTS[0]), "max_tokens": 2}), timeout=120)
        assert got[-1][1] is None, f"a dead client still holds a queue place: {got[-1][1]}"
    finally:
        for s in running:
            s.close()
    wait_idle(server)


SLOW_TOKENS = 100  # 7 pages each: two slow readers and two ordinary streams fit the 20-page pool


def test_clients_that_stop_reading_do_not_stall_the_others(server):
    """A gRPC client whose callback blocks and an SSE client that never reads, both on responses of ~2 KB
    (20 top logprobs each), while two ordinary streams run beside them."""
    def ordinary():
        return Stream(server, grpc_inputs({"text_input": "Name some colors.", "max_tokens": 40, "ignore_eos": True,
                                           "stream": True}))

    def gaps(stream):
        return np.diff(stream.times)

    # Alone first: how long two ordinary streams take on this machine right now.
    t0 = time.monotonic()
    alone = [ordinary(), ordinary()]
    for s in alone:
        assert s.drain()[1] is None
    alone_time = time.monotonic() - t0
    for s in alone:
        s.close(cancel=False)

    release = threading.Event()
    slow_grpc = Stream(server, grpc_inputs({"text_input": "Tell me a long story.", "max_tokens": SLOW_TOKENS,
                                            "ignore_eos": True, "stream": True, "top_logprobs": 20}),
                       on_response=lambda: release.wait(300))
    slow_sse = sse_socket(server, {"text_input": "Tell me a long story.", "max_tokens": SLOW_TOKENS, "ignore_eos": True,
                                   "stream": True, "top_logprobs": 20})
    slow_sse.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    time.sleep(0.5)
    t0 = time.monotonic()
    others = [ordinary(), ordinary()]
    for s in others:
        got, error = s.drain(timeout=60)
        assert error is None and got[-1].as_numpy("finish_reason")[0] == b"max_tokens"
    beside_time = time.monotonic() - t0
    worst_gap = max(max(gaps(s)) for s in others)
    print(f"\ntwo ordinary streams: {alone_time:.1f}s alone, {beside_time:.1f}s beside two clients that "
          f"stopped reading; worst gap between their responses {worst_gap:.2f}s")
    assert beside_time < 3 * alone_time + 5
    assert worst_gap < 3.0
    # The generator finished the slow ones too (their responses wait in Triton), then both readers catch up.
    m = wait_idle(server, timeout=120)
    assert m["tritongen:kv_pages_used"] == 0
    release.set()
    got, error = slow_grpc.drain()
    assert error is None and sum(int(r.as_numpy("num_output_tokens")[0]) for r in got) == SLOW_TOKENS
    slow_grpc.close(cancel=False)
    # Reading again: a normal receive buffer, or the catch-up crawls at 4 KiB per delayed acknowledgement.
    slow_sse.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    slow_sse.settimeout(60)
    data = read_events(slow_sse, 1)
    while b'"finish_reason":"max_tokens"' not in data:
        chunk = slow_sse.recv(1 << 16)
        assert chunk, "SSE stream ended without its final event"
        data += chunk
    slow_sse.close()


def test_sigterm_with_requests_in_flight_ends_every_stream(server):
    """What Triton 2.51 does on SIGTERM: it waits --exit-timeout-secs (2 here) for HTTP connections, then
    for in-flight inferences, then gives up ("Exit timeout expired. Exiting immediately.") and closes every
    connection; the server reports the generator ready until that wait ends, so the generator cannot know
    to answer them.
    A request that finishes inside the window gets its final response; the others see the connection
    close: an error, never a hang."""
    streams = []
    for _ in range(2):  # 6 pages each; with the SSE stream and the short request below, 17 of the 20 pages
        streams.append(long_stream(server, max_tokens=90))
        assert streams[-1].next()[1] is None
    outcomes: dict = {}

    def http_client(name, body, path, started):
        sock = sse_socket(server, body, path)
        sock.settimeout(90)
        data = b""
        try:
            while chunk := sock.recv(1 << 16):
                data += chunk
                started.set()
        except OSError as exc:
            data += f"<{exc!r}>".encode()
        started.set()
        outcomes[name] = data.decode(errors="replace")

    sse_started, queued_started = threading.Event(), threading.Event()
    clients = [
        threading.Thread(target=http_client, args=("http_sse", {"text_input": "Hi there", "max_tokens": 90,
                                                                "ignore_eos": True, "stream": True},
                                                   "/v2/models/generator/generate_stream", sse_started)),
        threading.Thread(target=http_client, args=("http_generate_queued", {"text_input": "Hi there", "max_tokens": 90,
                                                                            "ignore_eos": True},
                                                   "/v2/models/generator/generate", queued_started)),
    ]
    clients[0].start()
    assert sse_started.wait(60)
    short = long_stream(server, max_tokens=6)  # the fourth slot: done well inside the exit timeout
    assert short.next()[1] is None
    clients[1].start()  # no slot left: it waits in the queue
    time.sleep(0.3)
    t0 = time.monotonic()
    rc = stop_server(server, timeout=15)  # exit timeout 2s; 2.51 sometimes hangs there instead of crashing
    stop_time = time.monotonic() - t0
    ends = {}
    for name, s in [("grpc_long_1", streams[0]), ("grpc_long_2", streams[1]), ("grpc_short", short)]:
        got, error = s.drain(timeout=60)
        ends[name] = f"error: {error}" if error else f"final: {got[-1].as_numpy('finish_reason')[0].decode()}"
        s.close(cancel=False)
    for t in clients:
        t.join(timeout=90)
    for name, out in outcomes.items():
        finals = [ln for ln in out.splitlines() if '"finish_reason":"' in ln and '"finish_reason":""' not in ln]
        reason = re.search(r'"finish_reason":"([^"]+)"', finals[-1]).group(1) if finals else None
        ends[name] = f"final: {reason}" if finals else (
            f"connection closed after {out.count('data:')} events" + (f", {out[:12]}" if out else ""))
    print(f"\nSIGTERM: tritonserver exited with {rc} after {stop_time:.1f}s"
          f"{' (its stub outlived it and was killed)' if server.orphaned_stub else ''}; {ends}")
    assert not any(t.is_alive() for t in clients), "an HTTP client hung"
    assert len(ends) == 5
    assert ends["grpc_short"] == "final: max_tokens"
    for name, end in ends.items():
        assert end.startswith("final: ") or end.startswith("error: ") or end.startswith("connection closed"), end



def test_sigterm_with_16_streams_ends_every_stream(tmp_path):
    """SIGTERM with 16 gRPC streams running: the generator sees the server stop and, its shutdown_grace_seconds
    being 0 here, ends every stream at once with "the server is stopping" (a stream that finishes inside the
    grace gets its final token response instead). The clients close their streams on that final response, as
    any does, so Triton can unload the model: tritonserver exits 0 well inside its exit timeout (10 s), its stub
    with it (no segfault in dmesg, where readable), and the disk tier, storing the prompts' chunks as they
    come, holds no half-written file."""
    repository = tiny_repository(tmp_path / "repo", max_model_len="1024", num_gpu_pages="1100", max_num_seqs="16",
                                 max_queue_len="16", shutdown_grace_seconds="0", kv_connector="local_tiered",
                                 kv_connector_chunk_size="16", kv_connector_disk_path=str(tmp_path / "kv"))
    server = start_server(repository, tmp_path / "server.log", exit_timeout=10)
    try:
        streams = [long_stream(server, text_input=f"Story {i}: " + "tell me a long story. " * 8, max_tokens=900)
                   for i in range(16)]
        for stream in streams:
            assert stream.next()[1] is None
        tritonserver, stub = server.process.pid, stub_pid(server)
    except BaseException:
        stop_server(server)
        raise
    t0 = time.monotonic()
    stopping = ThreadPoolExecutor(1).submit(stop_server, server, 30)
    ends = []
    for stream in streams:
        got, error = stream.drain(timeout=30)
        ends.append(f"error: {error}" if error else f"final: {got[-1].as_numpy('finish_reason')[0].decode()}")
        stream.close(cancel=False)
    rc = stopping.result(60)
    stop_time = time.monotonic() - t0
    print(f"\nSIGTERM: tritonserver exited with {rc} after {stop_time:.1f}s; {ends}")
    for end in ends:
        assert end.startswith("final: ") or "the server is stopping" in end, end
    assert rc == 0 and not server.orphaned_stub and stop_time < 10
    assert not Path(f"/proc/{tritonserver}").exists() and not Path(f"/proc/{stub}").exists()
    assert not stub_crashes(stub), "the python backend stub crashed at stop"
    stored = list((tmp_path / "kv").rglob("*"))
    assert [p for p in stored if p.is_file()], "the disk tier stored nothing: the test proves nothing"
    assert not [p for p in stored if p.name.endswith(".tmp")], stored


# ---- load errors ----------------------------------------------------------------------------------------------


def broken_target(repository, how: str) -> None:
    """Replace the symlinked target_gqa by a folder of symlinks whose model.onnx is missing or garbage."""
    link = repository / "target_gqa"
    link.unlink()
    (link / "1").mkdir(parents=True)
    source = REPOSITORY / "target_gqa"
    for item in source.iterdir():
        if item.is_file():
            (link / item.name).symlink_to(item)
    for item in (source / "1").iterdir():
        if item.name != "model.onnx":
            (link / "1" / item.name).symlink_to(item)
    if how == "corrupt":
        (link / "1" / "model.onnx").write_bytes(b"\x08\x07not an onnx model" + bytes(range(256)) * 16)


@pytest.mark.parametrize("how, reason", [
    ("missing", "target_gqa: no version folder holds model.onnx"),
    ("corrupt", "Protobuf parsing failed"),
])
def test_missing_or_corrupt_model_file_is_a_clear_load_error(target_folder, tmp_path, how, reason):
    repository = small_repository(tmp_path / "repo", **NO_HEADS)
    broken_target(repository, how)
    server = TritonServer(repository, ["generator"], http_port=0, grpc_port=0, metrics_port=0,
                          log_file=tmp_path / "server.log", key_file=tmp_path / "operator.key")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as failure:
        server.start()
    assert not server.key_file.exists(), "a failed start left the operator key behind"
    message = str(failure.value)
    print(f"\n{how} model.onnx: start failed after {time.monotonic() - t0:.1f}s: "
          f"{[ln for ln in message.splitlines() if reason in ln][:1]}")
    assert "exited with code" in message and reason in message, message
    assert "generator" in message


# ---- in-process: one request's exception fails it alone ----------------------------------------------------


class Boom(RuntimeError):
    pass


def raising(what: str):
    def fail(*args, **kwargs):
        raise Boom(f"injected {what} failure")
    return fail


class FailingProposer(PromptLookupProposer):
    def __init__(self, bad_draft: bool):
        self.bad_draft = bad_draft

    def propose(self, seq, k):
        if self.bad_draft:  # a draft token outside the vocabulary: the verification model call fails
            return Proposal([10**6])
        raise Boom("injected proposer failure")


class RaisingMatcher:
    """Stands in for one request's llguidance matcher and fails like a broken one would."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def consume_token(self, token):
        raise Boom("injected constraint failure")


HEALTHY = [
    ("greedy", "Hello world", GenerateOptions(max_new_tokens=16, stop_on_eos=False)),
    ("seeded", "The capital", GenerateOptions(max_new_tokens=16, stop_on_eos=False, greedy=False, temperature=0.8,
                                              seed=7)),
    ("constrained", "Answer:", GenerateOptions(max_new_tokens=16,
                                               constraint=GenerateConstraint("regex", "[a-z ]{1,40}"))),
    ("speculative", "abc abc abc abc", GenerateOptions(max_new_tokens=16, stop_on_eos=False,
                                                       speculative_mode=SpeculativeMode("prompt_lookup", ngram=1))),
]


def victims():
    """(name, request, how to break its sequence): the fault is put in at the victim's 3rd token, mid-batch."""
    def processor(seq):
        seq.sampler.process = raising("logits processor")

    def matcher(seq):
        seq.matcher = RaisingMatcher(seq.matcher)

    def proposer(seq):
        seq.proposer = FailingProposer(bad_draft=False)

    def verification(seq):
        seq.proposer = FailingProposer(bad_draft=True)

    spec = dict(max_new_tokens=16, stop_on_eos=False, speculative_mode=SpeculativeMode("prompt_lookup", ngram=1))
    return [
        ("processor", GenerateRequest("xyz", GenerateOptions(max_new_tokens=16, stop_on_eos=False,
                                                             repetition_penalty=1.2)), processor),
        ("matcher", GenerateRequest("Answer:", GenerateOptions(
            max_new_tokens=16, constraint=GenerateConstraint("regex", "[a-z ]{1,40}"))), matcher),
        ("proposer", GenerateRequest("abc abc abc abc", GenerateOptions(**spec)), proposer),
        ("verification", GenerateRequest("abc abc abc abc", GenerateOptions(**spec)), verification),
    ]


@pytest.mark.parametrize("victim", ["processor", "matcher", "proposer",
                                    "verification"])
def test_an_exception_in_one_request_fails_it_alone(tiny_folder, victim):
    engine = Engine(tiny_folder, EngineConfig(speculative_disable_by_batch_size=0))  # the victim speculates in a batch
    try:
        solo = {name: engine.generate(GenerateRequest(prompt, options)).token_ids for name, prompt, options in HEALTHY}
        name, request, breaker = next(v for v in victims() if v[0] == victim)
        outcomes: queue.Queue = queue.Queue()
        batches: list[set] = []
        engine.on_step = lambda e: batches.append({s.request_id for s in e.scheduler.running})
        with engine._wake:  # the engine thread takes the inbox only after every request is in and broken
            handles = {n: engine.submit(GenerateRequest(p, o), on_done=lambda r, e, n=n: outcomes.put((n, r, e)))
                       for n, p, o in HEALTHY}
            seen = []

            def on_token(token):  # runs on the engine thread, between steps' work for this request
                seen.append(token)
                if len(seen) == 3:
                    breaker(handle._seq)
            handle = engine.submit(request, on_token=on_token, on_done=lambda r, e: outcomes.put((name, r, e)))
        done = dict((n, (r, e)) for n, r, e in (outcomes.get(timeout=60) for _ in range(len(HEALTHY) + 1)))
        result, error = done.pop(name)
        assert result is None and error is not None, f"the broken request did not fail: {result}"
        # (a broken matcher already fails while the batch's masks are computed, before consume_token)
        expected = {"verification": "", "matcher": "LLMatcher"}.get(victim, "injected")
        assert expected in str(error), error
        for n, (r, e) in done.items():
            assert e is None, f"{n} failed with the {victim} fault: {e!r}"
            assert r.token_ids == solo[n], f"{n}'s output changed"
        everyone = {h.request_id for h in handles.values()} | {handle.request_id}
        assert any(everyone <= batch for batch in batches), "the requests did not share a batch"
        assert engine.alive and not engine._live and engine.pool.num_used() == 0
        assert engine.generate(GenerateRequest("Hello world", HEALTHY[0][2])).token_ids == solo["greedy"]
    finally:
        engine.close()
