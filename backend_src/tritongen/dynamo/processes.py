"""The cluster's child processes (nats-server, workers, the frontend), each started in a session of its own and
stopped by its PID.

Why sessions: a terminal's Ctrl-C reaches only the launcher, which then stops each child itself, in order
(the frontend before the workers it routes to); and a child that leaves helpers behind loses them with its
process group. Each child also gets SIGTERM when the launcher dies, so none outlives it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..serve import _die_with_parent, stop_process_group


class Process:
    def __init__(self, name: str, command: list[str], log_file: Path, env: dict[str, str] | None = None):
        self.name = name
        self.command = command
        self.log_file = Path(log_file)
        self.env = env
        self.process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was not started"
        return self.process.pid

    def start(self) -> Process:
        with open(self.log_file, "wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env, start_new_session=True,
                                            preexec_fn=_die_with_parent)
        return self

    def exit_code(self) -> int | None:
        """None while it runs (or before it started)."""
        return None if self.process is None else self.process.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, wait, SIGKILL if it hangs; then whatever is left of its process group. Returns the exit code."""
        return None if self.process is None else stop_process_group(self.process, timeout)
