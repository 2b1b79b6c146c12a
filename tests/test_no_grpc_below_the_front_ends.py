"""Below the front ends nothing loads gRPC or a Triton client: not the engine (it runs inside Triton's Python
backend, which has no use for either), not reading a config.pbtxt. Ruff's TID251 bans the imports it can
see in a file; this checks what importing every module actually loads, through every chain of imports."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPOSITORY

BELOW_THE_FRONT_ENDS = ["runtime", "kv", "speculative", "engine", "model_build"]
CLIENTS = ("grpc", "tritonclient.grpc", "tritonclient.http", "tritonclient.utils", "triton_python_backend_utils")
# The one module of tritonclient the engine uses: the schema of config.pbtxt, loaded on its own.
SCHEMA = "tritonclient.grpc.model_config_pb2"

IMPORT_ALL = """
import importlib, json, pkgutil, sys
from pathlib import Path
from tritongen.runtime.repository import onnx_path
for package in {packages!r}:
    module = importlib.import_module("tritongen." + package)
    for found in pkgutil.walk_packages(module.__path__, module.__name__ + "."):
        if not found.name.endswith(".__main__"):
            importlib.import_module(found.name)
onnx_path(Path({folder!r}))  # reads the folder's config.pbtxt
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after(code: str) -> list[str]:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


def test_the_engine_and_a_config_read_load_no_grpc_and_no_triton_client():
    modules = loaded_after(IMPORT_ALL.format(packages=BELOW_THE_FRONT_ENDS, folder=str(REPOSITORY / "target")))
    assert "tritongen.engine.engine" in modules and SCHEMA in modules  # the walk imported them
    clients = [m for m in modules if m != SCHEMA and any(m == c or m.startswith(c + ".") for c in CLIENTS)]
    assert clients == []


def test_a_front_end_importing_tritonclient_grpc_later_reuses_the_schema_module():
    code = ("import json, sys\nfrom tritongen.runtime.config_proto import model_config_pb2 as ours\n"
            "import tritonclient.grpc\nprint(json.dumps([tritonclient.grpc.model_config_pb2 is ours]))")
    assert loaded_after(code) == [True]
