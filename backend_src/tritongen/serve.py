"""Start the tritonserver bundled with nvidia-pytriton on a model repository.

Why this file exists: Triton normally runs in NGC's container. On a plain
machine we reuse the tritonserver binary, python backend and per-version
stubs that the ``nvidia-pytriton`` wheel ships.
Three things make that work, and this module does exactly those:

1. The python backend launches ``triton_python_backend_stub`` from its own
   backend folder. pytriton ships one stub per Python version elsewhere, so we
   copy the one for *this* interpreter into ``backends/python/``. Its RPATH,
   ``$ORIGIN/../../../../nvidia_pytriton.libs``, resolves from there too.
2. The stub embeds Python: ``libpython3.X.so.1.0`` must be the one of this
   interpreter (not a distribution copy of another patch release), so its
   ``LIBDIR`` goes first on ``LD_LIBRARY_PATH``; and the embedded interpreter
   locates its prefix by finding ``python3`` on ``PATH``, so the venv's
   ``bin`` goes first there and ``model.py`` imports the venv's packages.
3. Only the named models are loaded (``--model-control-mode=explicit``): the
   bundled server has no onnxruntime backend.

Every endpoint binds to loopback unless told otherwise, and the control APIs
answer only the operator (``lockdown.py``).

Use it as ``python -m tritongen.serve`` or via :class:`TritonServer`.
"""
from __future__ import annotations

import argparse
import ctypes
import filecmp
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from .triton.lockdown import (
    GRPC_OPERATOR_HEADER,
    LOOPBACK,
    OPERATOR_HEADER,
    OPERATOR_KEY_ENV,
    operator_key,
    server_args,
)

# The generator's model folder (config.pbtxt and 1/model.py) ships inside the package, so an installed
# tritongen serves a model folder without a checkout.
GENERATOR_MODEL = Path(__file__).resolve().parent / "triton" / "generator_model"
# TensorRT-LLM's `ensemble` over the generator, and its two Python steps: shipped the same way. Loading
# `ensemble` loads its steps too (Triton loads an ensemble's composing models with it).
ENSEMBLE_MODELS = {name: GENERATOR_MODEL.with_name(f"{name}_model")
                   for name in ("ensemble", "tensorrtllm_inputs", "tensorrtllm_outputs")}
# From a checkout, the repository `make models` fills; installed, ./model_repository.
_CHECKOUT_REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
DEFAULT_MODEL_REPOSITORY = _CHECKOUT_REPOSITORY if _CHECKOUT_REPOSITORY.is_dir() else Path("model_repository")
PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
METRICS_INTERVAL_MS = 200  # Triton's own CPU and memory gauges: a poll reads two /proc files


def _site_dir() -> Path:
    """site-packages holding pytriton; found without importing pytriton (slow, pulls in its client)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("nvidia-pytriton is not installed in this interpreter")
    return Path(list(spec.submodule_search_locations)[0]).parent


def triton_dir() -> Path:
    return _site_dir() / "pytriton" / "tritonserver"


def backend_dir() -> Path:
    """The folder passed as --backend-directory (holds python/ with the stub once installed)."""
    return triton_dir() / "backends"


def libs_dir() -> Path:
    return _site_dir() / "nvidia_pytriton.libs"


def install_stub() -> Path:
    """Copy this interpreter's python-backend stub into backends/python/; idempotent.

    Copies to a temporary name then renames, so concurrent starts (parallel
    tests) never see a half-written executable.
    """
    src = triton_dir() / "python_backend_stubs" / PY_VERSION / "triton_python_backend_stub"
    dst = backend_dir() / "python" / "triton_python_backend_stub"
    if not src.is_file():
        raise RuntimeError(f"pytriton ships no python backend stub for Python {PY_VERSION}: {src}")
    if dst.is_file() and os.access(dst, os.X_OK) and filecmp.cmp(src, dst, shallow=False):
        return dst
    tmp = dst.with_name(f"{dst.name}.{os.getpid()}.tmp")
    shutil.copy2(src, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dst)
    return dst


def server_env(base: dict | None = None) -> dict:
    """Environment for tritonserver: venv bin first on PATH, our libpython and pytriton libs loadable."""
    env = dict(os.environ if base is None else base)
    venv_bin = Path(sys.prefix) / "bin"  # sys.prefix is the venv; do not resolve the python symlink
    env["PATH"] = os.pathsep.join([str(venv_bin), env.get("PATH", os.defpath)])
    libs = [sysconfig.get_config_var("LIBDIR") or "", str(libs_dir()), env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in libs if p)
    env.pop("PYTHONHOME", None)  # would override the prefix the stub finds via PATH
    return env


def free_port() -> int:
    """A port free right now (the kernel's pick); tiny race window, fine for tests and dev."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the launching process dies, so no server outlives a killed test run."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def stop_process_group(p: subprocess.Popen, timeout: float) -> int | None:
    """SIGTERM a child started in a session of its own, wait, SIGKILL if it hangs, then SIGKILL whatever is left
    of its process group. Returns the exit code."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return p.returncode


SPECULATIVE_FOLDERS = ("draft_model", "mtp_head", "eagle3_head", "shared_kv_head")


def folder_repository(model: Path, variant: str = "", speculative: dict[str, Path] | None = None) -> Path:
    """A temporary repository whose generator serves the model folder at `model` in place (read, never written).

    The model-based speculative modes are off unless `speculative` names their folders.
    """
    model = Path(model).resolve()
    if not model.is_dir():
        raise RuntimeError(f"model folder not found: {model}")
    repository = Path(tempfile.mkdtemp(prefix="tritongen-repository-"))
    shutil.copytree(GENERATOR_MODEL, repository / "generator", ignore=shutil.ignore_patterns("__pycache__"))
    for name, source in ENSEMBLE_MODELS.items():
        shutil.copytree(source, repository / name, ignore=shutil.ignore_patterns("__pycache__"))
    path = repository / "generator" / "config.pbtxt"
    config = text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())
    config.parameters["target_model"].string_value = str(model)
    config.parameters["model_variant"].string_value = variant
    for key in SPECULATIVE_FOLDERS:
        folder = (speculative or {}).get(key)
        config.parameters[key].string_value = str(Path(folder).resolve()) if folder else ""
    path.write_text(text_format.MessageToString(config), encoding="utf-8")
    return repository


def default_models(repository: str | os.PathLike) -> list[str]:
    """What a server loads unless told: the generator, and TensorRT-LLM's `ensemble` where the repository has it."""
    return ["generator", "ensemble"] if (Path(repository) / "ensemble" / "config.pbtxt").is_file() else ["generator"]


def scrape_metrics(url: str) -> dict[str, float]:
    """The tritongen: families of the generator's Prometheus page, each summed over its labels."""
    with urllib.request.urlopen(url, timeout=10) as r:
        lines = r.read().decode().splitlines()
    values: dict[str, float] = {}
    for line in lines:
        if line.startswith("tritongen:"):
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{")[0]
            values[name] = values.get(name, 0.0) + float(value)
    return values


class TritonServer:
    """One tritonserver process on a model repository, loading only ``models`` (None: :func:`default_models`).

    Ports of 0 are replaced by free ones. Output goes to ``log_file`` (a temp
    file if None); errors quote its tail. Every endpoint listens on ``host``;
    the control APIs need :attr:`operator_headers`, whose key is written to
    ``key_file`` (a new temp file if None) unless the environment gives it.
    Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    def __init__(self, model_repository: str | os.PathLike = DEFAULT_MODEL_REPOSITORY,
                 models: list[str] | tuple[str, ...] | None = None, http_port: int = 8000,
                 grpc_port: int = 8001, metrics_port: int = 8002,
                 log_file: str | os.PathLike | None = None, extra_args: list[str] | tuple[str, ...] = (),
                 host: str = LOOPBACK, key_file: str | os.PathLike | None = None):
        self.model_repository = Path(model_repository).resolve()
        self.models = list(models) if models is not None else default_models(self.model_repository)
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()
        self.metrics_port = metrics_port or free_port()
        if log_file is None:
            fd, log_file = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(fd)
        self.log_file = Path(log_file)
        self.extra_args = list(extra_args)
        self.host = host
        self.key_file = Path(key_file) if key_file is not None else None
        self.operator_key = ""
        self.process: subprocess.Popen | None = None

    # Where a local client reaches it: the bound address, or loopback when it listens on every interface.
    client_host = property(lambda self: LOOPBACK if self.host in ("0.0.0.0", "::", "") else self.host)
    url_http = property(lambda self: f"http://{self.client_host}:{self.http_port}")
    url_grpc = property(lambda self: f"{self.client_host}:{self.grpc_port}")  # tritonclient.grpc wants host:port
    url_metrics = property(lambda self: f"http://{self.client_host}:{self.metrics_port}/metrics")
    operator_headers = property(lambda self: {OPERATOR_HEADER: self.operator_key})  # HTTP
    operator_grpc_headers = property(lambda self: {GRPC_OPERATOR_HEADER: self.operator_key})

    def command(self) -> list[str]:
        cmd = [str(triton_dir() / "bin" / "tritonserver"),
               f"--model-repository={self.model_repository}",
               "--model-control-mode=explicit",
               # Every config is complete; auto-completing it would start each python model's stub twice.
               "--disable-auto-complete-config",
               f"--backend-directory={backend_dir()}",
               f"--http-port={self.http_port}",
               f"--grpc-port={self.grpc_port}",
               f"--metrics-port={self.metrics_port}",
               # Triton's metrics thread sleeps half this between polls and the exit joins it: the default
               # 2000 ms adds up to a second (half on average) to every stop.
               f"--metrics-interval-ms={METRICS_INTERVAL_MS}",
               *server_args(self.host, self.operator_key)]
        cmd += [f"--load-model={m}" for m in self.models]
        return cmd + self.extra_args

    def log_tail(self, lines: int = 30) -> str:
        """Last log lines, minus Triton's very wide startup tables (they push the actual error out)."""
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join([ln for ln in text if ln.strip() and ln[:1] not in "+|"][-lines:])

    def _ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.url_http + path, timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def is_ready(self) -> bool:
        return self._ok("/v2/health/ready") and all(self._ok(f"/v2/models/{m}/ready") for m in self.models)

    def start(self, timeout: float = 120.0) -> "TritonServer":
        """Launch and block until the server and every model are ready, or raise RuntimeError."""
        if not self.model_repository.is_dir():
            raise RuntimeError(f"model repository not found: {self.model_repository}")
        install_stub()
        self.operator_key, self.key_file = operator_key(self.key_file)
        with open(self.log_file, "wb") as log:  # one run per file: error tails stay unambiguous
            # New session: a terminal Ctrl-C reaches only us; we then SIGTERM the server ourselves.
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=server_env(),
                                            start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            rc = self.process.poll()
            if rc is not None:
                self.stop()  # its stub and the key file go with it
                raise RuntimeError(f"tritonserver exited with code {rc} before ready; "
                                   f"log {self.log_file}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tritonserver not ready after {timeout:.0f}s (models {self.models}); "
                                   f"log {self.log_file}:\n{self.log_tail()}")
            time.sleep(0.25)
        return self

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (Triton's graceful shutdown), wait, SIGKILL if it hangs. Returns the exit code.

        tritonserver 2.51 may crash at its exit timeout and leave the python backend stub running: the stub is in
        the server's process group (its own session), so whatever is left of that group is ended too.
        """
        p = self.process
        if p is None:
            return None
        stop_process_group(p, timeout)
        if self.key_file is not None:
            self.key_file.unlink(missing_ok=True)  # the key dies with the server
        return p.returncode

    def __enter__(self) -> "TritonServer":
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    env = os.environ
    ap = argparse.ArgumentParser(prog="python -m tritongen.serve", description=__doc__.split("\n")[0])
    ap.add_argument("--model-repository", type=Path, default=DEFAULT_MODEL_REPOSITORY,
                    help="serve this Triton model repository (default: the checkout's, else ./model_repository)")
    ap.add_argument("--model", type=Path,
                    help="serve this model folder in place (ours, onnxruntime-genai's, Optimum's or the hub layout)")
    ap.add_argument("--model-variant", default="", help="with the hub layout: onnx/model_<variant>.onnx")
    for key in SPECULATIVE_FOLDERS:
        ap.add_argument(f"--{key.replace('_', '-')}", type=Path, help=f"with --model: the {key} folder (else off)")
    ap.add_argument("--load-model", action="append", dest="models",
                    help="model to load (repeatable; default: generator, and ensemble where the repository has it)")
    ap.add_argument("--http-port", type=int, default=int(env.get("TRITON_HTTP_PORT", 8000)))
    ap.add_argument("--grpc-port", type=int, default=int(env.get("TRITON_GRPC_PORT", 8001)))
    ap.add_argument("--metrics-port", type=int, default=int(env.get("TRITON_METRICS_PORT", 8002)))
    ap.add_argument("--host", default=env.get("TRITON_HOST", LOOPBACK),
                    help="address every endpoint binds to (default: loopback; 0.0.0.0 for every interface)")
    ap.add_argument("--operator-key-file", type=Path, help="where a generated operator key is written, owner-only "
                    f"(default: a new temp file; unused when {OPERATOR_KEY_ENV} is set)")
    ap.add_argument("--log-file", type=Path, help="server log (default: a temp file)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for readiness")
    ap.add_argument("--install-stub-only", action="store_true",
                    help="copy the python backend stub into place and exit (used by make setup)")
    args = ap.parse_args(argv)

    if args.install_stub_only:
        print(install_stub())
        return 0

    repository = args.model_repository
    if args.model is not None:
        speculative = {key: getattr(args, key) for key in SPECULATIVE_FOLDERS if getattr(args, key)}
        repository = folder_repository(args.model, args.model_variant, speculative)
    server = TritonServer(repository, args.models, args.http_port,
                          args.grpc_port, args.metrics_port, args.log_file, host=args.host,
                          key_file=args.operator_key_file)
    stopping = False

    def on_signal(signum, _frame):
        nonlocal stopping
        stopping = True
        raise KeyboardInterrupt  # unwinds start() or the wait below into the finally

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start(args.timeout)
        print(f"tritonserver ready: models {server.models}\n  http    {server.url_http}\n"
              f"  grpc    {server.url_grpc}\n  metrics {server.url_metrics}\n  log     {server.log_file}\n"
              f"  control APIs need the header {OPERATOR_HEADER} (gRPC: {GRPC_OPERATOR_HEADER}), "
              + (f"key in {server.key_file}" if server.key_file else f"key from {OPERATOR_KEY_ENV}"),
              flush=True)
        assert server.process is not None  # start() launched it (or raised)
        rc = server.process.wait()
        print(f"tritonserver exited with code {rc}; log tail:\n{server.log_tail()}", file=sys.stderr)
        return rc or 1
    except KeyboardInterrupt:
        return 0
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not interrupt the shutdown
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.stop()
        if args.model is not None:
            shutil.rmtree(repository, ignore_errors=True)
        if stopping:
            print("tritonserver stopped", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
