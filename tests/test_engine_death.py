"""A dead engine thread: every request gets an error, and Triton reports the generator not ready."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest

from conftest import REPOSITORY
from tritongen.serve import TritonServer

pytestmark = pytest.mark.server


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v2/models/generator/ready", timeout=5) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False


def test_dead_engine_fails_requests_and_the_model_reports_not_ready(target_gqa_folder, tmp_path, monkeypatch):
    monkeypatch.setitem(os.environ, "TRITONGEN_FAULT_INJECTION", "1")
    server = TritonServer(REPOSITORY, ["generator"], http_port=0, grpc_port=0, metrics_port=0,
                          log_file=tmp_path / "server.log")
    with server:
        url = server.url_http + "/v2/models/generator/generate"
        assert ready(server.url_http)
        status, body = post(url, {"text_input": "Hello", "max_tokens": 400, "ignore_eos": True,
                                  "parameters": {"tritongen_fault": "engine_crash"}})
        assert status >= 400 and "injected engine fault" in body["error"]
        deadline = time.time() + 30
        while ready(server.url_http) and time.time() < deadline:
            time.sleep(0.2)
        assert not ready(server.url_http)
        status, body = post(url, {"text_input": "Hello", "max_tokens": 2})
        assert status >= 400  # refused at once, never a hang
        assert "engine thread died" in server.log_file.read_text(errors="replace")
