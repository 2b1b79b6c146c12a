"""perf_analyzer drives the decoupled generator over gRPC streaming, unchanged.

Runs the documented command from bench/README.md (same input-data JSON)
against a real tritonserver on free ports and reads perf_analyzer's profile
export: every request must have produced several streamed responses whose
token counts add up to max_tokens, each holding every output it asked for.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tritongen.runtime.repository import read_config

from conftest import REPOSITORY, ROOT

pytestmark = pytest.mark.server
INPUT_DATA = ROOT / "bench" / "perf_analyzer_input.json"
REQUESTS = 3


def perf_analyzer_env() -> dict:
    """perf_analyzer 2.51 links libcudart.so.12 (from nvidia-cuda-runtime-cu12) and libb64.so.0d (Debian)."""
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    assert spec is not None and spec.submodule_search_locations, "nvidia-cuda-runtime-cu12 missing: run `make setup`"
    cudart = Path(list(spec.submodule_search_locations)[0]) / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(cudart), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def test_perf_analyzer_streams_several_responses_per_request(generator_server, tmp_path):
    binary = Path(sys.prefix) / "bin" / "perf_analyzer"
    assert binary.is_file(), "perf_analyzer missing: tritonclient[all] installs it (`make setup`)"
    data = json.loads(INPUT_DATA.read_text())["data"][0]
    max_tokens = data["max_tokens"][0]
    export = tmp_path / "export.json"
    cmd = [str(binary), "-m", "generator", "-u", generator_server.url_grpc, "-i", "grpc", "--streaming",
           "--input-data", str(INPUT_DATA), "--request-count", str(REQUESTS), "--profile-export-file", str(export)]
    run = subprocess.run(cmd, env=perf_analyzer_env(), capture_output=True, text=True, timeout=120)
    output = f"perf_analyzer ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert run.returncode == 0, output
    assert "Response Throughput" in run.stdout
    # perf_analyzer writes its export only when every value is valid JSON (a NaN stops it and leaves the file
    # empty, exit code 0); it records an output a response left out from stale memory.
    assert export.stat().st_size > 0, f"empty profile export\n{output}"

    requests = json.loads(export.read_text())["experiments"][0]["requests"]
    declared = {o.name for o in read_config(REPOSITORY / "generator").output}
    assert len(requests) >= REQUESTS
    for request in requests:
        outputs = request["response_outputs"]
        assert len(request["response_timestamps"]) == len(outputs) > 1
        assert sum(int(o["num_output_tokens"]) for o in outputs) == max_tokens
        assert [o["finish_reason"] for o in outputs[:-1]] == [""] * (len(outputs) - 1)
        assert outputs[-1]["finish_reason"] == "max_tokens"
        assert "".join(o["text_output"] for o in outputs).strip()
        # Every response holds every output perf_analyzer asked for (all of them): none made up from stale memory.
        assert all(set(o) == declared for o in outputs), [sorted(set(o) ^ declared) for o in outputs]
        assert {(o["cumulative_logprob"], o["logprobs"]) for o in outputs} == {(0.0, "")}  # no logprobs asked for
        assert len({o["num_input_tokens"] for o in outputs}) == 1
        assert {o["total_draft_tokens"] for o in outputs} == {o["total_accepted_draft_tokens"] for o in outputs} == {0}
        assert all(0 <= o["prefix_cache_hit_len"] <= o["num_input_tokens"] for o in outputs)
