"""Ways of doing the same work, timed in alternating order: a machine whose speed drifts (a shared host)
slows each of them alike, and the ratio of their medians is what is left."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def alternate(cases: dict[str, Callable[[], object]], passes: int, calls: int = 1,
              before: Callable[[str], None] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each case, one value per pass; the order flips every pass and pass 0 only warms
    up. `before(name)`, untimed, prepares a case's pass."""
    names = list(cases)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for p in range(passes + 1):
        for name in (names if p % 2 else names[::-1]):
            if before is not None:
                before(name)
            start = time.perf_counter()
            for _ in range(calls):
                cases[name]()
            if p:
                seconds[name].append((time.perf_counter() - start) / calls)
    return seconds


def compare(seconds: dict[str, list[float]], base: str, other: str) -> tuple[float, int]:
    """The ratio of `other`'s median time to `base`'s, and in how many passes `other` was the slower."""
    ratio = statistics.median(seconds[other]) / statistics.median(seconds[base])
    return ratio, sum(a < b for a, b in zip(seconds[base], seconds[other]))
