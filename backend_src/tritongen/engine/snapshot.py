"""What an observer (metrics, a dashboard) may read of a running engine: one typed record per call,
so that nothing outside the engine reaches into its scheduler, page pool or counters."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineSnapshot:
    running: int  # sequences in the running batch
    waiting: int  # queued and never admitted
    swapped: int  # preempted, waiting to resume
    pages_used: int
    pages_free: int  # free or holding reusable cached prefixes
    mask_seconds: float  # total time spent computing constraint masks
    drafted_tokens: int
    accepted_tokens: int
    verify_calls: int
    connector: dict[str, int] = field(default_factory=dict)  # KV connector events and fetched bytes, totals

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting or self.swapped)
