"""Whether the KV the settings ask for fits in memory, told before it is allocated.

The page store is touched at load (so a first write mid-decode does not pay
for it) and the running batch's buffers fill as sequences grow: together
they must fit in the memory the machine has available, or the server would
be killed later, mid-request, instead of failing its load with the reason.
"""

from __future__ import annotations


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo; None where the kernel does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_kv_fits(pool_bytes: int, batch_bytes: int) -> str:
    """A line to log; ValueError naming the settings when the KV would not fit."""
    total = pool_bytes + batch_bytes
    line = (f"KV memory: page store {pool_bytes / 2**20:.0f} MiB (num_gpu_pages x page_size, kv_cache_dtype) + "
            f"running batch {batch_bytes / 2**20:.0f} MiB (max_num_seqs x max_model_len)")
    available = available_bytes()
    if available is not None and total > available:
        raise ValueError(f"{line} = {total / 2**30:.2f} GiB, more than the {available / 2**30:.2f} GiB available: "
                         "lower num_gpu_pages, max_num_seqs or max_model_len, or store pages as f16 or int8")
    return line
