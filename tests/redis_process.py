"""A real redis-server for the redis connector's tests: on a free loopback port, nothing persisted, stopped by PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisProcess:
    def __init__(self, folder: Path, port: int | None = None):
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed: run `make setup` (scripts/setup.sh installs it)"
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / f"redis-{self.port}.log"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(folder), "--logfile", str(self.log), "--maxmemory", "1gb",
             "--maxmemory-policy", "allkeys-lru"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.client = redis.Redis(port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                assert self.process.poll() is None and time.monotonic() < deadline, self.log.read_text()[-2000:]
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: the way a crash or an OOM kill looks to its clients."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def pause(self) -> None:
        """SIGSTOP: a Redis that accepts connections and never answers."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One redis-server per test module, stopped by its PID at the end."""
    process = RedisProcess(tmp_path_factory.mktemp("redis"))
    yield process
    process.stop()


@pytest.fixture
def redis_url(server):
    """The module's server, emptied for each test."""
    server.client.flushall()
    return server.url
