"""Helpers of the tests that talk to a real tritonserver: a small copy of the repository, starting and stopping
a server, gRPC and HTTP requests, server-sent events, metrics, the python backend stub's memory and files."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype

from tritongen.serve import TritonServer, scrape_metrics

from conftest import REPOSITORY, build_tiny

NO_HEADS = {"draft_model": "", "mtp_head": "", "eagle3_head": "", "shared_kv_head": ""}


def small_repository(dest: Path, **params: str) -> Path:
    """A repository beside `dest`: the built model folders symlinked, `generator` copied with `params` set."""
    dest.mkdir(parents=True, exist_ok=True)
    for folder in REPOSITORY.iterdir():
        if folder.is_dir() and folder.name != "generator":
            (dest / folder.name).symlink_to(folder, target_is_directory=True)
    generator = dest / "generator"
    shutil.copytree(REPOSITORY / "generator", generator, ignore=shutil.ignore_patterns("__pycache__"))
    config = (generator / "config.pbtxt").read_text()
    for key, value in params.items():
        config, n = re.subn(r'(key: "%s", value: \{ string_value: ")[^"]*(")' % re.escape(key),
                            lambda m: m.group(1) + value + m.group(2), config)
        assert n == 1, f"generator config.pbtxt has no parameter {key}"
    (generator / "config.pbtxt").write_text(config)
    return dest


def tiny_repository(dest: Path, **params: str) -> Path:
    """As small_repository, serving the seeded tiny model: for tests of the server, not of SmolLM2's answers."""
    repository = small_repository(dest, **{**NO_HEADS, "target_model": "tiny", **params})
    build_tiny(repository / "tiny", "gqa")
    return repository


def start_server(repository: Path, log: Path, exit_timeout: int = 10) -> TritonServer:
    """A short exit timeout keeps a stuck shutdown from costing 30 s per module."""
    return TritonServer(repository, ["generator"], http_port=0, grpc_port=0, metrics_port=0, log_file=log,
                        extra_args=[f"--exit-timeout-secs={exit_timeout}"]).start()


def stop_server(server: TritonServer, timeout: float = 60) -> int | None:
    """SIGTERM the server; then make sure its python backend stub is gone too.

    When tritonserver 2.51 gives up at its exit timeout it may crash on the way out (signal 11) and
    leave the stub running, orphaned, with its /dev/shm region: kill that stub and remove the region.
    """
    try:
        stub = stub_pid(server)
        region = next((a for a in Path(f"/proc/{stub}/cmdline").read_bytes().decode().split("\0")
                       if a.startswith("triton_python_backend_shm_region")), None)
    except (AssertionError, OSError, TypeError):
        stub, region = None, None
    rc = server.stop(timeout)
    server.orphaned_stub = False
    if stub is not None:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{stub}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = Path(f"/proc/{stub}").exists()
        if alive and b"triton_python_backend_stub" in Path(f"/proc/{stub}/cmdline").read_bytes():
            server.orphaned_stub = True
            os.kill(stub, 9)
            if region:
                Path("/dev/shm", region).unlink(missing_ok=True)
    return rc


_stopper = ThreadPoolExecutor(thread_name_prefix="stop-tritonserver")
_stopping: list[Future] = []


def stop_server_later(server: TritonServer) -> None:
    """stop_server in the background: Triton's shutdown mostly waits (it polls once a second), and the next
    test need not wait with it. The session's end waits for every one (wait_for_stopped_servers)."""
    later(lambda: stop_server(server))


def later(check: Callable[[], object]) -> None:
    """A shutdown and what is checked after it, in the background; the session's end waits for it and
    raises what it raised."""
    _stopping.append(_stopper.submit(check))


def wait_for_stopped_servers(timeout: float = 120) -> None:
    """Raises what went wrong in a background stop, or TimeoutError for one still stopping."""
    for stopping in _stopping:
        stopping.result(timeout)
    _stopping.clear()


def tensor(name: str, value, dtype: str | None = None) -> grpcclient.InferInput:
    value = np.asarray(value)
    t = grpcclient.InferInput(name, list(value.shape), dtype or np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t


def I32(*values) -> np.ndarray:  # noqa: N802 - reads as a dtype in the request tables
    return np.array(values, np.int32)


def I64(*values) -> np.ndarray:  # noqa: N802
    return np.array(values, np.int64)


def F32(*values) -> np.ndarray:  # noqa: N802
    return np.array(values, np.float32)


def text(*values) -> np.ndarray:
    return np.array([v.encode() if isinstance(v, str) else v for v in values], dtype=object)


def is_final(result) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def grpc_request(server, inputs: dict | list, parameters: dict | None = None, timeout: float = 60,
                 model: str = "generator") -> list:
    """One request on its own gRPC stream; the (result, error) pairs up to the final response or an error."""
    if isinstance(inputs, dict):
        inputs = [tensor(k, v) for k, v in inputs.items()]
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url_grpc)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    graceful = False
    try:
        client.async_stream_infer(model, inputs, parameters=parameters)
        got = []
        while True:
            result, error = events.get(timeout=timeout)
            got.append((result, error))
            if error is not None or is_final(result):
                graceful = error is None
                return got
    finally:
        # Triton 2.51: cancelling a stream right after its final response sometimes leaves the model
        # impossible to unload (shutdown then waits --exit-timeout-secs), so a finished stream is closed
        # gracefully; but a graceful stop after a request Triton itself rejected (bad dtype or shape)
        # sometimes never returns, so after an error the stream is cancelled.
        client.stop_stream(cancel_requests=not graceful)
        client.close()


def grpc_text(got: list) -> str:
    return "".join(r.as_numpy("text_output")[0].decode() for r, _ in got)


def http_post(server, path: str, body, timeout: float = 60) -> tuple[int, str]:
    """POST a JSON body (dict) or raw bytes; (status, response text)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.url_http + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def generate(server, body, timeout: float = 60) -> tuple[int, str]:
    return http_post(server, "/v2/models/generator/generate", body, timeout)


def scrape(server) -> dict[str, float]:
    return scrape_metrics(server.url_metrics)


def wait_idle(server, timeout: float = 60) -> dict[str, float]:
    """Metrics once nothing runs or waits (the gauges are published when the engine goes idle)."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(server)
        if "tritongen:kv_pages_used" in m and m["tritongen:num_requests_running"] == 0 \
                and m["tritongen:num_requests_waiting"] == 0 and m["tritongen:num_requests_swapped"] == 0:
            return m
        assert time.monotonic() < deadline, f"engine still busy after {timeout}s: {m}"
        time.sleep(0.2)


def model_ready(server) -> bool:
    """The generator answers ready (a generator whose engine died unloads itself)."""
    try:
        with urllib.request.urlopen(server.url_http + "/v2/models/generator/ready", timeout=5) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False


def stub_pid(server) -> int:
    """The python backend stub that runs the generator: a child of the tritonserver process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"PPid:\t{server.process.pid}\n" in status and b"triton_python_backend_stub" in cmdline:
            return int(entry.name)
    raise AssertionError("no triton_python_backend_stub child of the server")


def kernel_log() -> str | None:
    """dmesg's text, or None where this machine does not let us read it."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None


def stub_crashes(pid: int) -> list[str] | None:
    """The kernel's segfault lines for the stub `pid` (its exit status is tritonserver's alone to read), or None
    where dmesg is not readable. The line is written as the stub dies: give it a moment after the stop."""
    time.sleep(0.5)
    log = kernel_log()
    return None if log is None else [line for line in log.splitlines() if f"triton_python_b[{pid}]" in line]


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))


def shm_bytes(pids: list[int]) -> int:
    """Bytes of the /dev/shm files these processes map: the python backend's regions (the machine is
    shared, so other servers' regions under /dev/shm are not counted)."""
    files = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
            if path.startswith("/dev/shm/"):
                files.add(path.replace(" (deleted)", ""))
    return sum(os.path.getsize(f) for f in files if os.path.exists(f))


def cancelled_counts(server) -> list[int]:
    """N of every `request cancelled after N tokens` line the generator logged."""
    found = re.findall(r"request cancelled after (\d+) tokens", server.log_file.read_text(errors="replace"))
    return [int(n) for n in found]


def sse_socket(server, body: dict, path="/v2/models/generator/generate_stream") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=60)
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % (path.encode(), len(data)) + data)
    return sock


def read_events(sock: socket.socket, n: int) -> bytes:
    got = b""
    while got.count(b"data:") < n:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {got!r}"
        got += chunk
    return got


def tree_digest(root: Path) -> list[tuple[str, int, int]]:
    """Every file's path, size and modification time: a server that writes into a folder it serves moves at
    least one of them, and hashing two gigabytes of weights before and after costs seconds of CPU."""
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in root.rglob("*") if p.is_file())
