"""What can be checked of the image without a container engine: its Dockerfile lints clean, it installs exactly the
product's runtime closure (pinned as constraints.txt pins it, onnxruntime-gpu in place of onnxruntime, CuPy for the
KV in CUDA memory), and its entrypoint serves a MODEL= folder in place, locked down like the repository."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import tomllib
from google.protobuf import text_format
from packaging.requirements import Requirement
from tritonclient.grpc import model_config_pb2

from tritongen.serve import SPECULATIVE_FOLDERS, free_port
from tritongen.triton.lockdown import OPERATOR_KEY_ENV, server_args

ROOT = Path(__file__).resolve().parents[1]
# The image's interpreter: NGC's tritonserver 25.10 runs Python 3.12 on x86-64 Linux.
IMAGE_ENVIRONMENT = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                     "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                     "implementation_name": "cpython", "platform_python_implementation": "CPython"}


# What the image adds for CUDA that no development machine installs, with each wheel's Requires-Dist for Python
# 3.12 on x86-64 Linux, extras left out (as `pip install --dry-run --report` lists them): its closure is checked
# against these records, so a new CuPy pin needs its record here.
GPU_ONLY = {"cupy-cuda13x==13.6.0": ["numpy<2.6,>=1.22", "fastrlock>=0.5"], "fastrlock==0.8.4": []}


def runtime_closure() -> dict[str, str]:
    """tritongen's dependencies and its openai extra (from pyproject.toml: an installed tritongen's metadata lags
    behind it until the next install) and onnxruntime's, recursively, at the versions installed here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found: dict[str, str] = {}
    todo = [Requirement(r) for r in (*project["dependencies"], *project["optional-dependencies"]["openai"])]
    todo.append(Requirement("onnxruntime"))
    while todo:
        wanted = todo.pop()
        dist = importlib.metadata.distribution(wanted.name)
        assert wanted.specifier.contains(dist.version, prereleases=True), f"{wanted} but {dist.version} installed"
        found[canonical(wanted.name)] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            needed = req.marker is None or any(req.marker.evaluate({**IMAGE_ENVIRONMENT, "extra": e})
                                               for e in ("", *wanted.extras))
            if needed and (canonical(req.name) not in found or req.extras):
                todo.append(req)
    found["onnxruntime-gpu"] = found.pop("onnxruntime")
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_installs_exactly_the_runtime_closure_at_our_pins():
    lines = [ln for ln in (ROOT / "docker" / "requirements.txt").read_text().splitlines() if ln and ln[0] != "#"]
    pinned = dict(ln.split("==") for ln in lines)
    gpu_only = dict(pin.split("==") for pin in GPU_ONLY)
    assert pinned == {**runtime_closure(), **gpu_only}
    for requirement in (Requirement(line) for requires in GPU_ONLY.values() for line in requires):
        version = pinned.get(canonical(requirement.name))
        assert version is not None and requirement.specifier.contains(version), f"{requirement}: pinned {version}"
    constraints = {canonical(name): version for name, version in
                   (ln.split("==") for ln in (ROOT / "constraints.txt").read_text().splitlines() if "==" in ln)}
    onnxruntime = {"onnxruntime-gpu": "onnxruntime"}
    assert all(constraints[onnxruntime.get(name, name)] == version for name, version in pinned.items()
               if name not in gpu_only)
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
        assert "--load-model=ensemble" in args and (repository / "ensemble" / "config.pbtxt").is_file()
    finally:
        shutil.rmtree(repository)


def recording_server(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose tritonserver writes the arguments it was given to a file (not to stdout, which a
    background OpenAI API would hold open), and that file."""
    fake = tmp_path / "fake-bin" / "tritonserver"
    fake.parent.mkdir()
    record = tmp_path / "tritonserver-args"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    fake.chmod(0o755)
    path = os.pathsep.join([str(fake.parent), str(Path(sys.executable).parent), os.environ["PATH"]])
    return {"PATH": path, OPERATOR_KEY_ENV: "k3y"}, record


def served_repository(record: Path) -> Path:
    args = record.read_text().split("\n")
    return Path(next(a for a in args if a.startswith("--model-repository=")).split("=", 1)[1])


def test_entrypoint_gives_a_model_folder_the_speculative_folders_named(tiny_folder, tmp_path):
    env, record = recording_server(tmp_path)
    mtp = tmp_path / "heads" / "mtp_head"
    mtp.mkdir(parents=True)
    env.update(MODEL=str(tiny_folder), MTP_HEAD=str(mtp), EAGLE3_HEAD="")
    subprocess.run([str(ROOT / "docker" / "entrypoint.sh")], env=env, capture_output=True, check=True)
    repository = served_repository(record)
    try:
        config = text_format.Parse((repository / "generator" / "config.pbtxt").read_text(),
                                   model_config_pb2.ModelConfig())
        folders = {key: config.parameters[key].string_value for key in SPECULATIVE_FOLDERS}
        assert folders == {"draft_model": "", "mtp_head": str(mtp.resolve()), "eagle3_head": "", "shared_kv_head": ""}
    finally:
        shutil.rmtree(repository)


def listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses something listens on at `port` (from /proc/net/tcp: state 0A is LISTEN)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_entrypoint_starts_the_openai_api_beside_triton_on_loopback(tiny_folder, tmp_path):
    env, record = recording_server(tmp_path)
    port = free_port()
    env.update(MODEL=str(tiny_folder), OPENAI_API_PORT=str(port))
    process = subprocess.Popen([str(ROOT / "docker" / "entrypoint.sh")], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not listening_addresses(port):
            assert time.monotonic() < deadline, "the OpenAI API never listened"
            time.sleep(0.2)
        assert listening_addresses(port) == {"127.0.0.1"}
        with pytest.raises(urllib.error.HTTPError) as answer:  # no Triton behind it: 503, from the API itself
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30)
        assert answer.value.code == 503
        assert "--grpc-address=0.0.0.0" in record.read_text().split("\n")  # and tritonserver was started
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        shutil.rmtree(served_repository(record), ignore_errors=True)
