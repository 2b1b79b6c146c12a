"""perf_analyzer and genai-perf against the running generator, unchanged, exactly as bench/README.md
documents them. Each returns a summary dict; a failure keeps the command, what was sent and the error."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENAI_PERF = ROOT / ".venv-genai-perf" / "bin" / "genai-perf"
PA_INPUT = ROOT / "bench" / "perf_analyzer_input.json"


def client_env() -> dict:
    """perf_analyzer 2.51 (tritonclient[all] in .venv) first on PATH, with libcudart.so.12 loadable.

    genai-perf's own `perf_analyzer` dependency is an empty placeholder package; it runs whatever
    `perf_analyzer` binary PATH gives it.
    """
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), env.get("PATH", "")])
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    if spec is not None and spec.submodule_search_locations:
        cudart = Path(list(spec.submodule_search_locations)[0]) / "lib"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(cudart), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def perf_analyzer(grpc_url: str, work: Path, requests: int = 3) -> dict:
    export = work / "perf_analyzer_export.json"
    export.unlink(missing_ok=True)
    cmd = [str(Path(sys.prefix) / "bin" / "perf_analyzer"), "-m", "generator", "-u", grpc_url, "-i", "grpc",
           "--streaming", "--input-data", str(PA_INPUT), "--request-count", str(requests),
           "--profile-export-file", str(export)]
    summary = {"command": shlex.join(cmd)}
    run = subprocess.run(cmd, env=client_env(), capture_output=True, text=True, timeout=300)
    summary["rc"] = run.returncode
    if run.returncode != 0 or not export.is_file():
        summary["error"] = _tail(run.stdout + "\n" + run.stderr)
        return summary
    reqs = json.loads(export.read_text())["experiments"][0]["requests"]
    per_request = [len(r["response_timestamps"]) for r in reqs]
    first = sorted((r["response_timestamps"][0] - r["timestamp"]) / 1e6 for r in reqs)
    gaps = sorted((b - a) / 1e6 for r in reqs for a, b in zip(r["response_timestamps"], r["response_timestamps"][1:]))
    summary.update(requests=len(reqs), responses_per_request=per_request,
                   tokens_per_request=[sum(int(o.get("num_output_tokens", 0)) for o in r["response_outputs"])
                                       for r in reqs],
                   first_response_ms_p50=first[len(first) // 2],
                   response_gap_ms_p50=gaps[len(gaps) // 2] if gaps else None)
    return summary


def genai_perf_commands(grpc_url: str, http_url: str, tokenizer: Path, input_tokens: int, output_tokens: int,
                        requests: int, artifacts: Path) -> dict[str, list[str]]:
    common = ["profile", "-m", "generator", "--tokenizer", str(tokenizer),
              "--synthetic-input-tokens-mean", str(input_tokens), "--synthetic-input-tokens-stddev", "0",
              "--output-tokens-mean", str(output_tokens), "--concurrency", "1",
              "--request-count", str(requests), "--warmup-request-count", "0"]
    # No warm-up request: genai-perf's warm-up sends the first dataset prompt, which the first measured
    # request then repeats: a prefix-cache hit (prefix_cache_hit_len 80 of 95 seen), not a cold TTFT.
    # Each run its own --random-seed: the same seed gives the same synthetic prompts, which the generator's
    # prefix cache would then serve to the next run without a prefill (TTFT no longer cold).
    return {
        # The vLLM backend's tensors: text_input, stream, exclude_input_in_output, sampling_parameters JSON.
        "vllm, gRPC streaming": [*common, "--backend", "vllm", "--endpoint-type", "kserve", "--streaming",
                                 "-u", grpc_url, "--output-tokens-mean-deterministic",
                                 "--random-seed", "1", "--artifact-dir", str(artifacts / "vllm")],
        # TensorRT-LLM's: text_input, max_tokens, min_length, stream, exclude_input_in_output.
        "tensorrtllm, gRPC streaming": [*common, "--backend", "tensorrtllm", "--endpoint-type", "kserve",
                                        "--streaming", "-u", grpc_url, "--output-tokens-mean-deterministic",
                                        "--random-seed", "2", "--artifact-dir", str(artifacts / "tensorrtllm")],
        # The HTTP generate extension with server-sent events (genai-perf allows --backend only with kserve).
        "generate_stream, HTTP SSE": [*common, "--endpoint-type", "generate", "--endpoint",
                                      "v2/models/generator/generate_stream", "--streaming", "-u", http_url,
                                      "--extra-inputs", "ignore_eos:true", "--random-seed", "3",
                                      "--artifact-dir", str(artifacts / "http")],
    }


def genai_perf(name: str, args: list[str]) -> dict:
    artifacts = Path(args[args.index("--artifact-dir") + 1])
    summary = {"name": name, "command": shlex.join(["genai-perf", *args])}
    if not GENAI_PERF.is_file():
        summary["error"] = f"{GENAI_PERF} missing: run bench/genai-perf-setup.sh (make test and make bench do)"
        return summary
    run = subprocess.run([str(GENAI_PERF), *args], env=client_env(), capture_output=True, text=True, timeout=600)
    summary["rc"] = run.returncode
    sent = glob.glob(str(artifacts / "**" / "inputs.json"), recursive=True)
    if sent:  # what it sent, for the report when the generator rejects it
        data = json.loads(Path(sent[0]).read_text()).get("data", [])
        summary["sent"] = data[0] if data else None
    found = glob.glob(str(artifacts / "**" / "profile_export_genai_perf.json"), recursive=True)
    if run.returncode != 0 or not found:
        summary["error"] = _tail(run.stdout + "\n" + run.stderr, 40)
        return summary
    metrics = json.loads(Path(found[0]).read_text())
    for key in ("time_to_first_token", "inter_token_latency", "output_sequence_length", "input_sequence_length",
                "request_latency", "output_token_throughput_per_user"):
        if key in metrics:
            summary[key] = {k: metrics[key].get(k) for k in ("avg", "p50", "p99", "unit")}
    summary["request_count"] = metrics.get("request_count", {}).get("avg")
    return summary
