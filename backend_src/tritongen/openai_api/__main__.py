"""`python -m tritongen.openai_api`: serve the OpenAI API, optionally starting Triton too.

With --start-triton it launches the repository's tritonserver first (ports
from TRITON_HTTP_PORT / TRITON_GRPC_PORT / TRITON_METRICS_PORT, as `make
serve`), waits for the generator, and stops the server on exit — the one
command behind `make serve-openai`. The API's own port comes from OPENAI_API_PORT
(default 9000, as the image's) unless --port gives it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import uvicorn

from .app import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_GENERATIONS, create_app


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    ap = argparse.ArgumentParser(prog="python -m tritongen.openai_api", description=__doc__.split("\n")[0])
    ap.add_argument("--triton-url", default=None, help="Triton gRPC host:port (default localhost:8001, or the "
                                                       "started server's)")
    ap.add_argument("--model", default="generator", help="the Triton model to front, also the OpenAI model name")
    ap.add_argument("--host", default=env.get("OPENAI_API_HOST", "127.0.0.1"),
                    help="address the API binds to (default loopback; 0.0.0.0 for every interface)")
    ap.add_argument("--port", type=int, default=int(env.get("OPENAI_API_PORT") or 9000),
                    help="port the API listens on (default: OPENAI_API_PORT, else 9000)")
    ap.add_argument("--api-key", default=env.get("TRITONGEN_API_KEY") or None,
                    help="require 'Authorization: Bearer <key>' on /v1 routes (default: TRITONGEN_API_KEY; none)")
    ap.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                    help="largest request body accepted (413 beyond)")
    ap.add_argument("--max-generations", type=int, default=DEFAULT_MAX_GENERATIONS,
                    help="most generator requests one API request may start (prompts x n)")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--start-triton", action="store_true", help="start tritonserver on model_repository/ first")
    args = ap.parse_args(argv)

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt  # uvicorn re-raises the signal after its graceful exit; we then stop Triton

    signal.signal(signal.SIGTERM, on_sigterm)
    server = None
    if args.start_triton:
        from tritongen.serve import TritonServer

        server = TritonServer(models=[args.model], http_port=int(env.get("TRITON_HTTP_PORT", 8000)),
                              grpc_port=int(env.get("TRITON_GRPC_PORT", 8001)),
                              metrics_port=int(env.get("TRITON_METRICS_PORT", 8002)))
        print(f"starting tritonserver (grpc {server.grpc_port}, log {server.log_file}) ...", flush=True)
        try:
            server.start(300)
        except (RuntimeError, KeyboardInterrupt) as exc:
            server.stop()
            print(exc or "interrupted", file=sys.stderr)
            return 1 if isinstance(exc, RuntimeError) else 0
    triton_url = args.triton_url or (server.url_grpc if server else "localhost:8001")
    try:
        print(f"OpenAI API on http://{args.host}:{args.port}/v1 -> Triton {triton_url} model {args.model}",
              flush=True)
        if args.api_key is None and args.host not in ("127.0.0.1", "localhost", "::1"):
            print(f"warning: the API listens on {args.host} without an API key (--api-key or TRITONGEN_API_KEY)",
                  file=sys.stderr)
        app = create_app(triton_url, args.model, args.api_key, args.max_body_bytes, args.max_generations)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the shutdown short
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            server.stop()
            print("tritonserver stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
