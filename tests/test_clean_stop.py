"""A stop of the real server ends the python backend stub cleanly: no SIGSEGV in its teardown.

The stub's exit status is read by tritonserver alone, so the crash is read where the kernel reports it: a
"segfault" line in dmesg naming the stub's pid. The model serves a stream first, so response senders and
every metric have been made and used before the stop.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from triton_helpers import generate, start_server, stop_server, stub_pid, tiny_repository

pytestmark = pytest.mark.server


def kernel_log() -> str | None:
    """dmesg's text, or None where this machine does not let us read it."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None


def test_stop_does_not_crash_the_stub(tmp_path):
    if kernel_log() is None:
        pytest.skip("dmesg is not readable here: the stub's crash cannot be seen")
    server = start_server(tiny_repository(tmp_path / "repo"), tmp_path / "server.log")
    try:
        pid = stub_pid(server)
        status, body = generate(server, {"text_input": "Hello", "max_tokens": 4, "ignore_eos": True})
        assert status == 200, body
    finally:
        rc = stop_server(server)
    time.sleep(0.5)  # the kernel's line is written as the stub dies; leave dmesg a moment
    crashes = [line for line in kernel_log().splitlines() if f"triton_python_b[{pid}]" in line]
    assert rc == 0 and not server.orphaned_stub
    assert not crashes, f"the python backend stub crashed at stop: {crashes}"
