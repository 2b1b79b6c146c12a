"""A stop of the real server ends the python backend stub cleanly: no SIGSEGV in its teardown.

The stub's exit status is read by tritonserver alone, so the crash is read where the kernel reports it: a
"segfault" line in dmesg naming the stub's pid. The model serves a request first, so response senders and
every metric have been made and used before the stop.
"""

from __future__ import annotations

import pytest

from triton_helpers import generate, kernel_log, start_server, stop_server, stub_crashes, stub_pid, tiny_repository

pytestmark = pytest.mark.server


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
    assert rc == 0 and not server.orphaned_stub
    assert not stub_crashes(pid), "the python backend stub crashed at stop"
