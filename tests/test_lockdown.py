"""Clients reach the inference endpoints only: loading code, unloading models and mapping memory need the operator.

The payload is the one a hostile client would send: a model-repository load
whose `file:1/model.py` override runs its own code in the server (here it
only writes a marker file). Sent with the operator header it runs, which
shows the payload is live; without the header it never does.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tritongen.serve import TritonServer
from tritongen.triton.lockdown import OPERATOR_HEADER, OPERATOR_KEY_ENV, operator_key, server_args

from conftest import REPOSITORY
from triton_helpers import later, model_ready, tiny_repository

PAYLOAD = '''
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = json.loads(args["model_config"])["parameters"]["marker"]["string_value"]
        open(marker, "w").write("ran")

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[]) for _ in requests]
'''


def intruder_config(marker) -> str:
    return json.dumps({"name": "intruder", "backend": "python", "max_batch_size": 0,
                       "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
                       "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
                       "parameters": {"marker": {"string_value": str(marker)}}})


def post(url: str, body: dict, headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_operator_key_file_is_owner_only_and_env_key_wins(tmp_path, monkeypatch):
    monkeypatch.delenv(OPERATOR_KEY_ENV, raising=False)
    key, path = operator_key(tmp_path / "key")
    assert path.read_text().strip() == key and len(key) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key2, _ = operator_key(tmp_path / "key")
    assert key2 != key  # a new key at each start
    monkeypatch.setenv(OPERATOR_KEY_ENV, "from-the-environment")
    assert operator_key(tmp_path / "other") == ("from-the-environment", None)
    assert not (tmp_path / "other").exists()
    monkeypatch.setenv(OPERATOR_KEY_ENV, "a,b")
    with pytest.raises(ValueError, match=OPERATOR_KEY_ENV):
        operator_key()


def test_server_args_bind_loopback_and_guard_every_control_api():
    args = server_args("127.0.0.1", "k")
    assert {"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"} <= set(args)
    guarded = f"model-repository,shared-memory,trace,logging:{OPERATOR_HEADER}=k"
    assert f"--http-restricted-api={guarded}" in args and f"--grpc-restricted-protocol={guarded}" in args


@pytest.mark.server
def test_control_apis_refuse_clients_without_the_operator_header(tmp_path, monkeypatch):
    monkeypatch.delenv(OPERATOR_KEY_ENV, raising=False)
    marker = tmp_path / "intruder-ran"
    config = intruder_config(marker)
    code = PAYLOAD.encode()
    load_body = {"parameters": {"config": config, "file:1/model.py": base64.b64encode(code).decode()}}
    server = TritonServer(tiny_repository(tmp_path / "repo"), ["generator"], http_port=0, grpc_port=0, metrics_port=0,
                          log_file=tmp_path / "server.log", key_file=tmp_path / "operator.key").start()
    try:
        assert stat.S_IMODE(server.key_file.stat().st_mode) == 0o600
        repo = server.url_http + "/v2/repository"
        grpc = grpcclient.InferenceServerClient(server.url_grpc)

        # Without the header: every control call is refused, on both protocols.
        status, body = post(f"{repo}/models/intruder/load", load_body)
        assert status == 403 and "restricted" in body.lower(), (status, body)
        with pytest.raises(InferenceServerException, match="(?i)restricted|permission"):
            grpc.load_model("intruder", config=config, files={"file:1/model.py": code})
        status, body = post(f"{repo}/models/generator/unload", {})
        assert status == 403, (status, body)
        with pytest.raises(InferenceServerException, match="(?i)restricted|permission"):
            grpc.unload_model("generator")
        with pytest.raises(InferenceServerException, match="(?i)restricted|permission"):
            grpc.load_model("generator")
        status, _ = post(server.url_http + "/v2/systemsharedmemory/region/r/register",
                         {"key": "/tritongen-test", "offset": 0, "byte_size": 16})
        assert status == 403
        status, _ = post(f"{repo}/index", {})
        assert status == 403
        with pytest.raises(InferenceServerException, match="(?i)restricted|permission"):
            grpc.register_system_shared_memory("r", "/tritongen-test", 16)
        with pytest.raises(InferenceServerException, match="(?i)restricted"):  # the HTTP header is not gRPC's
            grpc.unload_model("generator", headers=server.operator_headers)
        assert not marker.exists()  # each load above was answered, refused, before this line
        assert model_ready(server)
        status, body = post(server.url_http + "/v2/models/generator/generate", {"text_input": "Hi", "max_tokens": 2})
        assert status == 200, body
        # A wrong key is no key.
        status, _ = post(f"{repo}/models/generator/unload", {}, {OPERATOR_HEADER: server.operator_key + "x"})
        assert status == 403 and model_ready(server)

        # With the header the same payload runs: the refusal above is the lockdown, not a broken payload.
        status, body = post(f"{repo}/models/intruder/load", load_body, server.operator_headers)
        assert status == 200, body
        assert marker.read_text() == "ran"
        grpc.unload_model("intruder", headers=server.operator_grpc_headers)
        # The operator unloads and reloads the generator.
        status, body = post(f"{repo}/models/generator/unload", {}, server.operator_headers)
        assert status == 200, body
        deadline = time.monotonic() + 60
        while model_ready(server) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not model_ready(server)
        grpc.load_model("generator", headers=server.operator_grpc_headers)
        assert model_ready(server)
        grpc.close()
    finally:
        later(lambda: stopped_without_its_key(server))
    assert os.environ.get(OPERATOR_KEY_ENV) is None


def stopped_without_its_key(server: TritonServer) -> None:
    server.stop()
    assert not server.key_file.exists(), "the operator key file outlived its server"


def test_docker_entrypoint_locks_the_image_down_like_serve(tmp_path, monkeypatch):
    """The image's entrypoint, run against a stand-in tritonserver that prints its arguments."""
    fake = tmp_path / "bin" / "tritonserver"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    entrypoint = REPOSITORY.parent / "docker" / "entrypoint.sh"
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", OPERATOR_KEY_ENV: "k3y", "MODEL_REPOSITORY": "/models"}
    out = subprocess.run([str(entrypoint), "--log-verbose=1"], env=env, capture_output=True, text=True, check=True)
    args = out.stdout.split("\n")[:-1]
    assert set(server_args("0.0.0.0", "k3y")) <= set(args)
    assert {"--model-repository=/models", "--model-control-mode=explicit", "--load-model=generator"} <= set(args)
    assert args[-1] == "--log-verbose=1"
