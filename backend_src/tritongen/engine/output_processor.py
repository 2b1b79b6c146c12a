"""From a step's update to what the callers see: their token events and, for the requests that ended, the last one.

This runs on the engine thread, at the end of the step whose update took the
tokens. Doing it there rather than on a thread of its own keeps one owner for
each sequence's state: the stop decision was made before the next step
schedules the sequence again, so a stopped sequence never decodes one token
too many and its pages are freed at once. The callbacks only hand events to
the caller's own queue or thread; a callback that raises ends its own request
(at once if the step ended it anyway, else at the next step's start).
"""

from __future__ import annotations

from typing import Callable

from .options import FinishReason
from .sequence import Sequence
from .step_records import StepUpdate


class OutputProcessor:
    def __init__(self, forget: Callable[[Sequence], None]):
        self.forget = forget  # the engine stops tracking a finished request (before its last event)

    def process(self, update: StepUpdate) -> None:
        for seq, token in update.tokens:
            if seq.on_token is None or seq.callback_error is not None:
                continue
            try:
                seq.on_token(token)
            except Exception as exc:  # noqa: BLE001 - the caller's callback fails its own request only
                seq.callback_error = exc
        for seq, outcome in update.finished:
            self.forget(seq)
            error = seq.callback_error or (outcome if isinstance(outcome, Exception) else None)
            if error is None:
                assert isinstance(outcome, FinishReason)  # what is not an error is how the request finished
                deliver_done(seq, seq.result(outcome), None)
            else:
                deliver_done(seq, None, error)


def deliver_done(seq: Sequence, result, error: BaseException | None) -> None:
    """The request's last event; a callback that raises must not stop the engine."""
    if seq.on_done is None:
        return
    try:
        seq.on_done(result, error)
    except Exception:  # noqa: BLE001
        pass
