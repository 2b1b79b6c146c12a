"""`make demo`: start Triton on the repository, stream one chat answer, stop the server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tritongen.serve import TritonServer

QUESTION = "What is the capital of France?"


def main() -> int:
    ports = {k: int(os.environ.get(f"TRITON_{k.upper()}_PORT", default))
             for k, default in (("http", 8000), ("grpc", 8001), ("metrics", 8002))}
    print(f"starting tritonserver (http {ports['http']}, grpc {ports['grpc']}) ...", flush=True)
    with TritonServer(http_port=ports["http"], grpc_port=ports["grpc"], metrics_port=ports["metrics"]) as server:
        print(f"user: {QUESTION}\nassistant: ", end="", flush=True)
        client = Path(__file__).with_name("generate.py")
        rc = subprocess.call([sys.executable, str(client), "--chat", QUESTION, "--url", server.url_grpc])
    print("tritonserver stopped")
    return rc


if __name__ == "__main__":
    sys.exit(main())
