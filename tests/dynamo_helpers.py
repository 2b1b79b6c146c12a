"""Helpers of the tests that run tritongen behind NVIDIA Dynamo: the cluster launcher's processes, OpenAI requests to
Dynamo's frontend, which replica served a request (read off the generators' own counters), listening sockets."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tritongen.dynamo.cluster import DYNAMO_VENV, Cluster
from tritongen.serve import scrape_metrics

# Skipped only where the Dynamo environment is absent (`make test` builds it first).
needs_dynamo = pytest.mark.skipif(not (DYNAMO_VENV / "bin" / "python").exists(),
                                  reason="no .venv-dynamo: run `make setup-dynamo` (make test builds it)")


def post(cluster: Cluster, path: str, body: dict, timeout: float = 120) -> dict:
    request = urllib.request.Request(cluster.url + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{path} answered {e.code}: {e.read().decode()}") from None


def finished(cluster: Cluster) -> list[float]:
    """Requests each replica's generator has finished (tritongen:request_success_total over its reasons)."""
    return [scrape_metrics(r.server.url_metrics).get("tritongen:request_success_total", 0.0)
            for r in cluster.replicas]


def served_by(cluster: Cluster, before: list[float], timeout: float = 30) -> int:
    """The replica whose generator finished the one request sent since `before` (requests go one at a time)."""
    deadline = time.monotonic() + timeout
    while True:
        grown = [i for i, (now, then) in enumerate(zip(finished(cluster), before)) if now > then]
        if len(grown) == 1:
            return grown[0]
        assert len(grown) == 0 and time.monotonic() < deadline, f"replicas {grown} finished requests"
        time.sleep(0.05)


def scrape_prometheus(url: str) -> dict[str, float]:
    """Every family of a Prometheus page, summed over its labels."""
    with urllib.request.urlopen(url, timeout=10) as r:
        lines = r.read().decode().splitlines()
    values: dict[str, float] = {}
    for line in lines:
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{")[0]
            values[name] = values.get(name, 0.0) + float(value)
    return values


def descendants(pids: list[int]) -> list[int]:
    """`pids` and every process below them (the Triton servers' python backend stubs)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found = list(pids)
    for pid in found:
        found += [child for child, parent in parents.items() if parent == pid and child not in found]
    return found


def listening(pids: list[int]) -> dict[int, list[str]]:
    """pid -> the local addresses of its listening TCP and UDP sockets, as `ss` reports them."""
    out = subprocess.run(["ss", "-ltunpH"], capture_output=True, text=True, check=True).stdout
    sockets: dict[int, list[str]] = {pid: [] for pid in pids}
    for line in out.splitlines():
        fields = line.split()
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in sockets:
                sockets[pid].append(fields[4])
    return sockets
