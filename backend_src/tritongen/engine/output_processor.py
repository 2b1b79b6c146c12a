"""From a chosen token to what the caller sees: the constraint's consent, detokenized text, stop checks, callbacks.

This runs on the engine thread, inside the step that chose the token. Doing
it there rather than on a thread of its own keeps one owner for each
sequence's state: the stop decision is made before the next step schedules
the sequence again, so a stopped sequence never decodes one token too many
and its pages are freed at once. Detokenizing a token and matching the stop
strings cost microseconds beside a model call; the callbacks only hand events
to the caller's own queue or thread.
"""

from __future__ import annotations

import time

from .options import FinishReason, GenerateToken
from .sampling import TokenChoice
from .sequence import Sequence
from .step_outcomes import StepOutcomes


def emit(seq: Sequence, choice: TokenChoice, step: int, outcomes: StepOutcomes) -> None:
    """Append a sampled token and tell the caller; the sequence ends in `outcomes` if the token finishes it."""
    token = choice.token_id
    if seq.matcher is not None and not seq.matcher.consume_token(token):
        outcomes.end(seq, RuntimeError(f"constraint rejected token {token}: {seq.matcher.get_error()}"))
        return
    seq.tokens.append(token)
    now = time.monotonic()
    if seq.first_token_at is None:
        seq.first_token_at, seq.first_token_step = now, step
    seq.token_times.append(now)
    text, reason = seq.stopper.add(token, seq.detok.add(token))
    if reason is None and seq.matcher is not None and seq.matcher.is_stopped() and token in seq.stopper.eos_token_ids:
        reason = FinishReason.EOS_TOKEN  # the constraint is complete: min_length cannot ask for more
    if seq.logprobs is not None:
        # The list exists only when the request asked for top_logprobs, and then its sampler reports them.
        assert choice.logprob is not None
        seq.logprobs.append(choice.logprob)
    try:
        if seq.on_token is not None:
            seq.on_token(GenerateToken(token, text, reason, choice.logprob))
    except Exception as exc:  # noqa: BLE001 - the caller's callback fails its own request only
        outcomes.end(seq, exc)
        return
    if reason is not None:
        outcomes.end(seq, reason)


def deliver_done(seq: Sequence, result, error: BaseException | None) -> None:
    """The request's last event; a callback that raises must not stop the engine."""
    if seq.on_done is None:
        return
    try:
        seq.on_done(result, error)
    except Exception:  # noqa: BLE001
        pass
