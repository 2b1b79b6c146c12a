"""Where the time goes with 16 concurrent streams: py-spy on the in-process engine and on Triton's Python stub.

Runs the part-2 16-stream setting (distinct prompts of --length tokens, --new-tokens each) once per target
under `py-spy record` (sampling, --nonblocking so the target is never paused), then prints, for the engine
thread, the share of samples per function (self and inclusive) and the top stacks. The same run without the
profiler is not slower by more than the sampling's CPU cost (one core for py-spy at --rate; the machine has 2,
so read shares, not speeds, from a profiled run).

    .venv/bin/python -m bench.investigations.profile_streams [--targets engine,triton] [--rate 100] [--native]

Writes the collapsed stacks to bench/results/raw/profile-<target>.txt (flamegraph.pl / speedscope input).
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.prompts import long_prompts
from bench.worker import Worker

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
PY_SPY = Path(sys.prefix) / "bin" / "py-spy"


def stub_pid(server_pid: int) -> int | None:
    """The generator's triton_python_backend_stub: a child of tritonserver."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server_pid and "triton_python_backend_stub" in cmd:
            return int(entry.name)
    return None


def record(pid: int, out: Path, rate: int, native: bool, run) -> float:
    cmd = [str(PY_SPY), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--threads",
           "--nonblocking", "--output", str(out)]
    if native:
        cmd.append("--native")
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # attached
    started = time.perf_counter()
    try:
        run()
    finally:
        elapsed = time.perf_counter() - started
        spy.send_signal(signal.SIGINT)
        _, err = spy.communicate(timeout=60)
    if not out.is_file():
        raise RuntimeError(f"py-spy wrote nothing: {err[-2000:]}")
    return elapsed


def analyse(path: Path, thread_hint: str, rate: int, elapsed: float, top: int = 25) -> str:
    """Shares of the busiest thread's samples (or the one whose stacks mention `thread_hint`)."""
    by_thread: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        by_thread[frames[0]][tuple(frames[1:])] += int(count)
    hinted = [t for t, c in by_thread.items() if any(thread_hint in ";".join(s) for s in c)]
    thread = max(hinted or by_thread, key=lambda t: sum(by_thread[t].values()))
    stacks = by_thread[thread]
    total = sum(stacks.values())
    all_samples = sum(sum(c.values()) for c in by_thread.values())
    self_time: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    for stack, count in stacks.items():
        if stack:
            self_time[stack[-1]] += count
        for frame in set(stack):
            inclusive[frame] += count
    lines = [f"thread {thread}: {total} of {all_samples} samples in the process ({100 * total / all_samples:.0f}%); "
             f"busy (not idle) {100 * total / (rate * elapsed):.0f}% of the run's wall time",
             "", "inclusive (function and what it calls):"]
    lines += [f"  {100 * c / total:5.1f}%  {f}" for f, c in inclusive.most_common(top)]
    lines += ["", "self (the frame itself):"]
    lines += [f"  {100 * c / total:5.1f}%  {f}" for f, c in self_time.most_common(top)]
    lines += ["", "other threads of the process (samples):"]
    lines += [f"  {sum(c.values()):6d}  {t}" for t, c in sorted(by_thread.items(), key=lambda kv: -sum(kv[1].values()))
              if t != thread][:8]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-repository", type=Path, default=ROOT / "model_repository")
    ap.add_argument("--targets", default="engine,triton")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--length", type=int, default=448)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--native", action="store_true", help="also sample native (C/C++) frames")
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "raw")
    args = ap.parse_args(argv)
    if not PY_SPY.is_file():
        print(f"{PY_SPY} missing: bench/setup.sh installs the bench extra (py-spy)", file=sys.stderr)
        return 1
    from tritongen.runtime.tokenizer import TextTokenizer
    from tritongen.serve import TritonServer

    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = TextTokenizer(args.model_repository / "target")
    # Far from the prompts make bench uses: a fresh prefix cache would not matter, but keep them apart.
    items = long_prompts(tokenizer, 2 * args.streams + 4, args.length, skip=200)
    warm = [(text, ids[:32]) for text, ids in items[args.streams:2 * args.streams]]
    items = items[:args.streams]
    targets = [t for t in args.targets.split(",") if t]
    report = []
    for target in targets:
        server = None
        if target == "engine":
            worker = Worker("engine", "engine", model_repository=str(args.model_repository))
        else:
            server = TritonServer(args.model_repository, ["generator"], http_port=0, grpc_port=0, metrics_port=0,
                                  log_file=BENCH / "work" / "tritonserver-profile.log")
            server.start(timeout=300)
            worker = Worker("triton", "triton", grpc_url=server.url_grpc)
        try:
            if not worker.wait_ready():
                raise RuntimeError(worker.error)
            worker.call("run_streams", warm, 4)
            pid = worker.pid if server is None else stub_pid(server.process.pid)
            out = args.out / f"profile-{target}.txt"
            print(f"[profile] {target}: py-spy on pid {pid}, {args.streams} streams ...", flush=True)
            load = os.getloadavg()[0]
            elapsed = record(pid, out, args.rate, args.native,
                             lambda: worker.call("run_streams", items, args.new_tokens))
            hint = "_step"  # the engine thread, in-process or inside the stub
            report.append(
                f"## {target} ({'worker process' if server is None else 'triton_python_backend_stub'} "
                f"pid {pid}), {elapsed:.1f}s run, load average {load:.1f}\n\n" + analyse(out, hint, args.rate, elapsed)
            )
        finally:
            worker.stop()
            if server is not None:
                server.stop()
    print("\n\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
