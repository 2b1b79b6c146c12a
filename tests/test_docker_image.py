"""What can be checked of the image without a container engine: its Dockerfile lints clean, it installs exactly the
product's runtime closure (pinned as constraints.txt pins it, onnxruntime-gpu in place of onnxruntime), and its
entrypoint serves a MODEL= folder in place, locked down like the repository."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from google.protobuf import text_format
from packaging.requirements import Requirement
from tritonclient.grpc import model_config_pb2

from tritongen.triton.lockdown import OPERATOR_KEY_ENV, server_args

ROOT = Path(__file__).resolve().parents[1]
# The image's interpreter: NGC's tritonserver 25.10 runs Python 3.12 on x86-64 Linux.
IMAGE_ENVIRONMENT = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                     "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                     "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def runtime_closure() -> dict[str, str]:
    """tritongen's dependencies (no extras) and onnxruntime's, recursively, at the versions installed here."""
    found: dict[str, str] = {}
    todo = [("tritongen", ()), ("onnxruntime", ())]
    while todo:
        name, extras = todo.pop()
        dist = importlib.metadata.distribution(name)
        found[canonical(name)] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            wanted = req.marker is None or any(req.marker.evaluate({**IMAGE_ENVIRONMENT, "extra": e})
                                               for e in ("", *extras))
            if wanted and (canonical(req.name) not in found or req.extras):
                todo.append((req.name, tuple(req.extras)))
    del found["tritongen"]
    found["onnxruntime-gpu"] = found.pop("onnxruntime")
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_installs_exactly_the_runtime_closure_at_our_pins():
    lines = [ln for ln in (ROOT / "docker" / "requirements.txt").read_text().splitlines() if ln and ln[0] != "#"]
    pinned = dict(ln.split("==") for ln in lines)
    assert pinned == runtime_closure()
    constraints = {canonical(name): version for name, version in
                   (ln.split("==") for ln in (ROOT / "constraints.txt").read_text().splitlines() if "==" in ln)}
    onnxruntime = {"onnxruntime-gpu": "onnxruntime"}
    assert all(constraints[onnxruntime.get(name, name)] == version for name, version in pinned.items())
    for dev in ("pytest", "ruff", "mypy", "torch", "matplotlib", "nvidia-pytriton"):
        assert dev not in pinned


def test_dockerfile_lints_clean():
    hadolint = Path(sys.executable).parent / "hadolint"
    out = subprocess.run([str(hadolint), str(ROOT / "docker" / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_entrypoint_serves_a_model_folder_in_place_locked_down(tiny_folder, tmp_path):
    fake = tmp_path / "bin" / "tritonserver"  # prints the arguments it was given
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    path = os.pathsep.join([str(fake.parent), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {"PATH": path, OPERATOR_KEY_ENV: "k3y", "MODEL": str(tiny_folder)}
    entrypoint = ROOT / "docker" / "entrypoint.sh"
    args = subprocess.run([str(entrypoint)], env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    assert set(server_args("0.0.0.0", "k3y")) <= set(args)
    repository = Path(next(a for a in args if a.startswith("--model-repository=")).split("=", 1)[1])
    try:
        config = text_format.Parse((repository / "generator" / "config.pbtxt").read_text(),
                                   model_config_pb2.ModelConfig())
        assert config.parameters["target_model"].string_value == str(tiny_folder)
        assert (repository / "generator" / "1" / "model.py").is_file()
    finally:
        shutil.rmtree(repository)
