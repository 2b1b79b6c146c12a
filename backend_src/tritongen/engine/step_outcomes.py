"""How a step ended the sequences it ended: one record per step instead of a list passed through every call.

A sequence keeps the first outcome it gets (a stop, a failure, a callback that
raised): whatever happens to it later in the same step does not overwrite it.
"""

from __future__ import annotations

from typing import Iterator

from .options import FinishReason
from .sequence import Sequence

Outcome = FinishReason | Exception


class StepOutcomes:
    def __init__(self) -> None:
        self._ended: dict[int, tuple[Sequence, Outcome]] = {}

    def end(self, seq: Sequence, outcome: Outcome) -> None:
        self._ended.setdefault(seq.request_id, (seq, outcome))

    def ended(self, seq: Sequence) -> bool:
        return seq.request_id in self._ended

    def __iter__(self) -> Iterator[tuple[Sequence, Outcome]]:
        return iter(list(self._ended.values()))
