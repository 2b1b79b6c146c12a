"""Which CPUs the compute threads run on: the engine thread on one, each onnxruntime worker on its own.

An onnxruntime call splits every operator across its intra-op threads, which spin while they wait
for each other. With as many of them as CPUs, the kernel sometimes runs two on one CPU while the
server's other threads (response sends, gRPC, the client on the same host) wake up around them, and
the whole call then runs at half speed until it moves them apart. Pinned, they never share a CPU.
Measured through Triton (bench/pin_threads.py, 16 streams, 2 shared cores): +7.7%, -1.5% and +1.7% in
three runs (+2.6% on average), 15 of 22 passes faster pinned: small beside this machine's noise.
"""

from __future__ import annotations

import functools
import os

import onnxruntime as ort


@functools.cache
def _cpus() -> list[int]:
    """The CPUs this process may use, read once: a pinned thread's own mask is a single CPU, and a session
    opened from it (a second engine, a model opened later) would otherwise get one intra-op thread."""
    return sorted(os.sched_getaffinity(0))


def session_options(intra_op_threads: int, pin: bool) -> ort.SessionOptions:
    """Options with `intra_op_threads` threads (0: one per CPU this process may use); with `pin`, the
    pool's workers are pinned to the CPUs after the first, which the calling thread keeps (pin_calling_thread)."""
    cpus = _cpus()
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads or len(cpus)
    if pin and 1 < options.intra_op_num_threads <= len(cpus):
        # onnxruntime numbers logical processors from 1; the calling thread is not in the list.
        workers = cpus[1:options.intra_op_num_threads]
        options.add_session_config_entry("session.intra_op_thread_affinities", ";".join(str(c + 1) for c in workers))
    return options


def pin_calling_thread() -> None:
    """Keep the calling thread (the one that runs the sessions) on the first CPU, off its workers' CPUs."""
    os.sched_setaffinity(0, {_cpus()[0]})
