"""tritongen installed from its wheel, away from any checkout, serves a model folder: the generator's Triton
model folder ships inside the package, and `python -m tritongen.serve --model` needs nothing else."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tritongen.serve import free_port

from conftest import FOREIGN, ROOT, foreign_folder
from triton_helpers import I32, I64, grpc_request, later, tree_digest

pytestmark = pytest.mark.server

FOLDER = FOREIGN / "tiny-genai-fp32"


def build_wheel(dest: Path) -> Path:
    """The wheel, built offline from a copy of the package sources (the checkout gets no build/ folder)."""
    source = dest / "source"
    shutil.copytree(ROOT / "backend_src", source / "backend_src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dest / "wheels"), str(source)], check=True, timeout=300)
    return next((dest / "wheels").glob("tritongen-*.whl"))


def test_installed_wheel_serves_a_model_folder(tmp_path):
    foreign_folder(FOLDER.name)
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"tritongen/triton/generator_model/config.pbtxt", "tritongen/triton/generator_model/1/model.py",
            "tritongen/triton/ensemble_model/config.pbtxt", "tritongen/triton/ensemble_model/1/README",
            "tritongen/triton/tensorrtllm_inputs_model/1/model.py",
            "tritongen/triton/tensorrtllm_outputs_model/1/model.py"} <= names
    venv = tmp_path / "venv"  # a fresh environment: the wheel installed, the test venv's packages as its deps
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.run([python, "-c", purelib], capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    # A plain path line: the dependencies' folder is searched, but its .pth files (the checkout's editable
    # install among them) are not processed.
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    where = tmp_path / "elsewhere"  # no model_repository here, no checkout above
    where.mkdir()
    found = subprocess.run([python, "-c", "import tritongen; print(tritongen.__file__)"], cwd=where,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found).is_relative_to(site), found

    before = tree_digest(FOLDER)
    grpc_port, log = free_port(), tmp_path / "server.log"
    cmd = [python, "-m", "tritongen.serve", "--model", str(FOLDER), "--grpc-port", str(grpc_port),
           "--http-port", str(free_port()), "--metrics-port", str(free_port()), "--log-file", str(log)]
    serve = subprocess.Popen(cmd, cwd=where, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert serve.stdout is not None
        ready = serve.stdout.readline()
        assert ready.startswith("tritonserver ready"), ready + serve.stdout.read()
        text = log.read_text(errors="replace")
        assert f"tritongen at {site / 'tritongen'}" in text, text[-2000:]
        server = types.SimpleNamespace(url_grpc=f"127.0.0.1:{grpc_port}")
        got = grpc_request(server, {"input_ids": I64(1, 2, 3, 4), "max_tokens": I32(5)})
        assert all(error is None for _, error in got), got
        assert sum(len(r.as_numpy("output_ids")) for r, _ in got) == 5
        # TensorRT-LLM's ensemble ships and loads beside it: its two Python steps run from the package too.
        got = grpc_request(server, {"text_input": np.array([[b"Hello"]], dtype=np.object_),
                                    "max_tokens": np.array([[3]], np.int32)}, model="ensemble")
        assert all(error is None for _, error in got) and got[-1][0].as_numpy("text_output").shape[0] == 1, got
    finally:
        serve.terminate()
        later(lambda: stopped_leaving_the_folder_as_it_was(serve, before))


def stopped_leaving_the_folder_as_it_was(serve: subprocess.Popen, before: list) -> None:
    assert serve.wait(timeout=90) == 0, "the installed package's server did not exit cleanly"
    assert tree_digest(FOLDER) == before, f"{FOLDER} changed while the installed package served it"
