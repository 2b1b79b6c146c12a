"""The worker's command line: which Triton server and repository it fronts, and where in Dynamo it registers.

Every replica of one model must register under the same namespace, component and model path: Dynamo's KV router
scores the workers of one component, and a different model card path makes a second model of the same name.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

NAMESPACE = "tritongen"
COMPONENT = "generator"


@dataclass(frozen=True)
class WorkerOptions:
    repository: Path  # the Triton model repository the server serves (the generator's config.pbtxt)
    triton_url: str  # host:port of its gRPC endpoint
    metrics_url: str  # its Prometheus page
    model_path: Path | None  # the Hugging Face-style folder Dynamo's frontend reads; None: the served folder
    served_model_name: str
    ready_timeout: float = 300.0


def parser() -> argparse.ArgumentParser:
    env = os.environ
    ap = argparse.ArgumentParser(prog="python -m tritongen.dynamo",
                                 description="A Dynamo worker serving tritongen's generator through Triton")
    ap.add_argument("--model-repository", type=Path, required=True,
                    help="the repository the Triton server serves (the generator's config.pbtxt is read)")
    ap.add_argument("--triton-url", default="127.0.0.1:8001", help="the Triton server's gRPC endpoint, host:port")
    ap.add_argument("--metrics-url", default="http://127.0.0.1:8002/metrics", help="its Prometheus page (load)")
    ap.add_argument("--model-path", type=Path,
                    help="the folder with config.json and the tokenizer files that Dynamo's frontend reads "
                         "(default: the generator's target_model folder); the same for every replica")
    ap.add_argument("--served-model-name", default="generator", help="the model name clients send")
    ap.add_argument("--namespace", default=env.get("DYN_NAMESPACE", NAMESPACE))
    ap.add_argument("--component", default=COMPONENT)
    ap.add_argument("--discovery-backend", default=env.get("DYN_DISCOVERY_BACKEND", "file"),
                    help="Dynamo's discovery: file (folder from DYN_FILE_KV), etcd, kubernetes")
    ap.add_argument("--request-plane", default=env.get("DYN_REQUEST_PLANE", "tcp"))
    ap.add_argument("--event-plane", default=env.get("DYN_EVENT_PLANE"), help="nats or zmq (Dynamo's default)")
    ap.add_argument("--ready-timeout", type=float, default=300.0, help="seconds to wait for the generator")
    return ap


def worker_options(args: argparse.Namespace) -> WorkerOptions:
    return WorkerOptions(repository=args.model_repository, triton_url=args.triton_url, metrics_url=args.metrics_url,
                         model_path=args.model_path, served_model_name=args.served_model_name,
                         ready_timeout=args.ready_timeout)
