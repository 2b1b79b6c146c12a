"""One system per process, driven over a pipe: load, then run one generation per request.

The orchestrator keeps every worker loaded and asks them in turn, one at a time, so all systems are
measured side by side under the same machine load, and an idle worker costs nothing.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback


def _serve(conn, kind: str, options: dict) -> None:
    from bench.systems import KINDS

    try:
        started = time.perf_counter()
        system = KINDS[kind](**options)
        conn.send(("ready", time.perf_counter() - started))
    except BaseException:  # noqa: BLE001 - reported to the orchestrator, which reports it loudly
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        message = conn.recv()
        if message[0] == "stop":
            break
        try:
            if message[0] == "call":  # ("call", method, args): run_streams, run_tiled, run_batch, margin_at
                conn.send(("ok", getattr(system, message[1])(*message[2])))
            else:
                conn.send(("ok", system.run(*message[1:])))
        except BaseException:  # noqa: BLE001
            conn.send(("error", traceback.format_exc()))
    close = getattr(system, "close", None)
    if close is not None:
        close()
    conn.send(("stopped", None))


class Worker:
    def __init__(self, name: str, kind: str, **options):
        self.name = name
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, kind, options), name=f"bench-{name}", daemon=True)
        self.process.start()
        self.error: str | None = None
        self.load_s: float | None = None

    def _receive(self, timeout: float):
        if not self.conn.poll(timeout):
            raise TimeoutError(f"{self.name}: no answer in {timeout:.0f}s")
        return self.conn.recv()

    def wait_ready(self, timeout: float = 300) -> bool:
        try:
            status, value = self._receive(timeout)
        except (TimeoutError, EOFError) as exc:
            status, value = "error", f"{type(exc).__name__}: {exc}"
        if status == "ready":
            self.load_s = value
            return True
        self.error = value
        return False

    def run(self, text: str, ids: list[int], n: int, timeout: float = 600) -> dict:
        self.conn.send(("run", text, ids, n))
        status, value = self._receive(timeout)
        if status != "ok":
            raise RuntimeError(f"{self.name} failed:\n{value}")
        return value

    def call(self, method: str, *args, timeout: float = 900) -> dict:
        self.conn.send(("call", method, args))
        status, value = self._receive(timeout)
        if status != "ok":
            raise RuntimeError(f"{self.name} failed:\n{value}")
        return value

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(("stop",))
                self._receive(30)
            except (OSError, EOFError, TimeoutError):
                pass
            self.process.join(10)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(5)
