"""`make serve-dynamo REPLICAS=N`: N Triton servers, one Dynamo worker each, and Dynamo's frontend with its KV
router in front, every socket on loopback.

Why these pieces: Dynamo's frontend owns HTTP, the chat template and tokenization, and its KV router sends each
request to the replica whose generator already holds the prompt's prefix, which it learns from the KV events each
generator publishes (relayed by its worker); Triton stays the serving runtime. Discovery is a folder
(`DYN_FILE_KV`) and the event plane a loopback nats-server, so neither etcd nor any other address is needed.
Run it with .venv's Python (it starts the Triton servers); the workers and the frontend run in .venv-dynamo.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..serve import DEFAULT_MODEL_REPOSITORY, TritonServer, folder_repository, free_port
from ..triton.lockdown import LOOPBACK
from .generator_config import generator_config
from .processes import Process
from .replica_repository import model_path, replica_repository
from .worker_args import COMPONENT, NAMESPACE

DYNAMO_VENV = Path(__file__).resolve().parents[3] / ".venv-dynamo"
# Replica i's ports from a base port: Triton http, grpc, metrics, the generator's KV events and their replay, the
# worker's system port (Dynamo's /health, /live and /metrics of the worker, its load among them).
PORTS_PER_REPLICA = 10


@dataclass
class ClusterOptions:
    replicas: int = 2
    repository: Path = DEFAULT_MODEL_REPOSITORY
    http_port: int = 8080  # the frontend's; 0: a free one
    base_port: int = 0  # replica i's ports are base + 10 i + 0..5; 0: free ones
    nats_port: int = 0
    router_mode: str = "kv"  # Dynamo's --router-mode: kv, round-robin, ...
    generator_params: dict[str, str] = field(default_factory=dict)  # config.pbtxt parameters for every replica
    served_model_name: str = "generator"
    venv: Path = DYNAMO_VENV


@dataclass
class Replica:
    server: TritonServer
    kv_events: str  # the generator's KV events socket
    system_port: int  # the worker's
    worker: Process | None = None

    url_worker_metrics = property(lambda self: f"http://{LOOPBACK}:{self.system_port}/metrics")


def _port(base: int, offset: int) -> int:
    return base + offset if base else free_port()


class Cluster:
    """Start with :meth:`start` (blocks until the frontend lists every worker), stop with :meth:`stop`."""

    def __init__(self, options: ClusterOptions):
        self.options = options
        self.workdir = Path(tempfile.mkdtemp(prefix="tritongen-dynamo-"))
        self.http_port = options.http_port or free_port()
        self.nats_port = options.nats_port or free_port()
        self.replicas: list[Replica] = []
        self.nats: Process | None = None
        self.frontend: Process | None = None
        # Starts and stops the servers in parallel. Its threads live as long as the cluster: a server gets SIGTERM
        # when the thread that started it ends (PR_SET_PDEATHSIG follows the thread, not the process).
        self._pool = ThreadPoolExecutor(max(1, options.replicas), thread_name_prefix="triton-replica")
        self._stopped = False
        self._folder_repository: Path | None = None  # made for a model folder served in place; removed at stop

    url = property(lambda self: f"http://{LOOPBACK}:{self.http_port}")

    def env(self) -> dict[str, str]:
        """Dynamo's settings for every process: file discovery, TCP requests, NATS events, all on loopback."""
        return {**os.environ, "DYN_DISCOVERY_BACKEND": "file", "DYN_FILE_KV": str(self.workdir / "discovery"),
                "DYN_REQUEST_PLANE": "tcp", "DYN_EVENT_PLANE": "nats",
                "NATS_SERVER": f"nats://{LOOPBACK}:{self.nats_port}", "DYN_TCP_RPC_HOST": LOOPBACK,
                "DYN_TCP_RESPONSE_STREAM_HOST": LOOPBACK, "DYN_SYSTEM_HOST": LOOPBACK,
                # The whole cluster stops together: no grace period for routers to forget a worker.
                "DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS": "0"}

    def start(self, timeout: float = 300.0) -> Cluster:
        """nats-server, the Triton servers (in parallel), a worker each, the frontend; RuntimeError on a failure."""
        if not (self.options.venv / "bin" / "python").exists():
            raise RuntimeError(f"no Dynamo environment at {self.options.venv}: run `make setup-dynamo`")
        try:
            self._start_nats()
            source = self._source_repository()
            self._start_servers(source, timeout)
            card = model_path(generator_config(self.replicas[0].server.model_repository).target_model.resolve(),
                              self.workdir / "model_card")
            for i, replica in enumerate(self.replicas):
                replica.worker = self._worker(i, replica, card).start()
            self.frontend = self._frontend().start()
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _source_repository(self) -> Path:
        repository = Path(self.options.repository)
        if (repository / "generator").is_dir():
            return repository
        self._folder_repository = folder_repository(repository)  # a model folder, served in place
        return self._folder_repository

    def _start_nats(self) -> None:
        self.nats = Process("nats-server", [_nats_server(), "-a", LOOPBACK, "-p", str(self.nats_port)],
                            self.workdir / "nats.log").start()
        _wait_port(self.nats_port, self.nats, 30)

    def _start_servers(self, source: Path, timeout: float) -> None:
        for i in range(self.options.replicas):
            base = self.options.base_port and self.options.base_port + PORTS_PER_REPLICA * i
            events, replay = _port(base, 3), _port(base, 4)
            params = {"pin_threads": "false",  # the replicas share the CPUs
                      "kv_events_endpoint": f"tcp://{LOOPBACK}:{events}",
                      "kv_events_replay_endpoint": f"tcp://{LOOPBACK}:{replay}", **self.options.generator_params}
            repository = replica_repository(source, self.workdir / f"replica{i}", params)
            server = TritonServer(repository, ["generator"], _port(base, 0), _port(base, 1), _port(base, 2),
                                  self.workdir / f"triton{i}.log", extra_args=["--exit-timeout-secs=10"],
                                  key_file=self.workdir / f"operator-key{i}")
            system = base + 5 if base else _free_port_below(2**15)  # Dynamo reads DYN_SYSTEM_PORT as an i16
            self.replicas.append(Replica(server, params["kv_events_endpoint"], system))
        list(self._pool.map(lambda r: r.server.start(timeout), self.replicas))

    def _worker(self, i: int, replica: Replica, card: Path) -> Process:
        server = replica.server
        command = [str(self.options.venv / "bin" / "python"), "-m", "tritongen.dynamo",
                   "--model-repository", str(server.model_repository), "--triton-url", server.url_grpc,
                   "--metrics-url", server.url_metrics, "--model-path", str(card),
                   "--served-model-name", self.options.served_model_name,
                   "--namespace", NAMESPACE, "--component", COMPONENT]
        env = {**self.env(), "DYN_SYSTEM_PORT": str(replica.system_port)}
        return Process(f"worker{i}", command, self.workdir / f"worker{i}.log", env)

    def _frontend(self) -> Process:
        command = [str(self.options.venv / "bin" / "python"), "-m", "dynamo.frontend",
                   "--http-host", LOOPBACK, "--http-port", str(self.http_port), "--namespace", NAMESPACE,
                   "--router-mode", self.options.router_mode, "--discovery-backend", "file",
                   "--request-plane", "tcp", "--event-plane", "nats"]
        return Process("frontend", command, self.workdir / "frontend.log", self.env())

    def processes(self) -> list[Process]:
        return [p for p in (self.nats, self.frontend, *(r.worker for r in self.replicas)) if p is not None]

    def _wait_ready(self, timeout: float) -> None:
        """Until the frontend lists the model and one `generate` instance per replica."""
        deadline = time.monotonic() + timeout
        while self.instances() < len(self.replicas) or not self._model_listed():
            for process in self.processes():
                if process.exit_code() is not None:
                    raise RuntimeError(f"{process.name} exited with code {process.exit_code()}; "
                                       f"log {process.log_file}:\n{process.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Dynamo frontend lists {self.instances()} of {len(self.replicas)} workers "
                                   f"after {timeout:.0f}s; logs in {self.workdir}")
            time.sleep(0.5)

    def _get(self, path: str) -> dict:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def instances(self) -> int:
        """Workers the frontend knows, by its /health."""
        return sum(1 for i in self._get("/health").get("instances", []) if i.get("endpoint") == "generate")

    def _model_listed(self) -> bool:
        return any(m.get("id") == self.options.served_model_name for m in self._get("/v1/models").get("data", []))

    def stop(self) -> None:
        """The frontend first, then the workers and the servers (in parallel), then nats-server; by PID. Once."""
        if self._stopped:
            return
        self._stopped = True
        if self.frontend is not None:
            self.frontend.stop()
        list(self._pool.map(lambda r: r.worker and r.worker.stop(), self.replicas))
        list(self._pool.map(lambda r: r.server.stop(), self.replicas))
        self._pool.shutdown()
        if self.nats is not None:
            self.nats.stop()
        if self._folder_repository is not None:
            shutil.rmtree(self._folder_repository, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _free_port_below(limit: int) -> int:
    """A port below `limit` free right now (the kernel's own picks lie above 32767 on Linux)."""
    rng = random.Random()
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((LOOPBACK, rng.randrange(10000, limit)))
            except OSError:
                continue
            return s.getsockname()[1]


def _nats_server() -> str:
    found = shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise RuntimeError("nats-server is not installed (scripts/dynamo/setup.sh installs Debian's)")
    return found


def _wait_port(port: int, process: Process, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((LOOPBACK, port), timeout=1).close()
            return
        except OSError:
            if process.exit_code() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{process.name} is not listening on {port}:\n{process.log_tail()}") from None
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    ap = argparse.ArgumentParser(prog="python -m tritongen.dynamo.cluster", description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=int(env.get("REPLICAS", 2)))
    ap.add_argument("--model-repository", type=Path, default=DEFAULT_MODEL_REPOSITORY,
                    help="a Triton model repository with a generator, or a model folder to serve in place")
    ap.add_argument("--http-port", type=int, default=int(env.get("DYNAMO_HTTP_PORT", 8080)),
                    help="the frontend's port (default 8080: Triton's own defaults are 8000-8002)")
    ap.add_argument("--base-port", type=int, default=int(env.get("DYNAMO_BASE_PORT", 8200)),
                    help=f"replica i: Triton http, grpc, metrics, KV events, replay, the worker's system port at "
                         f"base + {PORTS_PER_REPLICA} i + 0..5 (0: free ports)")
    ap.add_argument("--nats-port", type=int, default=int(env.get("DYNAMO_NATS_PORT", 4222)))
    ap.add_argument("--router-mode", default=env.get("DYNAMO_ROUTER_MODE", "kv"), help="kv, round-robin, ...")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a generator parameter for every replica (repeatable), e.g. num_gpu_pages=512")
    args = ap.parse_args(argv)
    params = dict(item.split("=", 1) for item in args.set)
    cluster = Cluster(ClusterOptions(args.replicas, args.model_repository, args.http_port, args.base_port,
                                     args.nats_port, args.router_mode, params))

    def on_signal(signum, _frame):
        raise KeyboardInterrupt  # unwinds start() or the wait below into the finally

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
        print(_banner(cluster), flush=True)
        while all(p.exit_code() is None for p in cluster.processes()):
            time.sleep(1)
        dead = next(p for p in cluster.processes() if p.exit_code() is not None)
        print(f"{dead.name} exited with code {dead.exit_code()}; log tail:\n{dead.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not interrupt the shutdown
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.stop()
        print("dynamo cluster stopped", file=sys.stderr)


def _banner(cluster: Cluster) -> str:
    lines = [f"dynamo frontend ready: {cluster.url}/v1 (model {cluster.options.served_model_name!r}, "
             f"router {cluster.options.router_mode}, {len(cluster.replicas)} replicas)"]
    for i, r in enumerate(cluster.replicas):
        lines.append(f"  replica {i}: triton grpc {r.server.url_grpc}, metrics {r.server.url_metrics}, "
                     f"KV events {r.kv_events}, worker {r.url_worker_metrics}")
    lines.append(f"  nats-server {LOOPBACK}:{cluster.nats_port}; logs and discovery in {cluster.workdir}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
