"""What every proposer gives the verifier, and what the engine tells it back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Proposal:
    tokens: list[int]
    # Draft probabilities [len(tokens), vocab] for lossless speculative sampling;
    # None means the tokens were proposed deterministically (a one-hot draft).
    probs: np.ndarray | None = None


def draw(logits: np.ndarray, sampler) -> tuple[int, np.ndarray | None]:
    """A draft token from draft logits: argmax when greedy, else a sample with its distribution q."""
    row = logits.astype(np.float64)
    if sampler.greedy:
        return int(np.argmax(row)), None
    q = np.exp((row - row.max()) / sampler.options.temperature)
    q /= q.sum()
    return int(min(np.searchsorted(np.cumsum(q), sampler.rng.random(), side="right"), q.shape[0] - 1)), q


def proposal(tokens: list[int], probs: list) -> Proposal:
    return Proposal(tokens, np.stack(probs) if probs else None)


class Proposer:
    """Base: stateless proposers need only `propose`; ones with per-slot state override the rest."""

    hidden_outputs: tuple[str, ...] = ()  # target outputs this proposer reads (seq.hidden)
    keeps_slot_state = False  # True: the scheduler tells it of slot moves and releases

    def behind(self, seq) -> int:
        """Tokens this proposer must compute before it can propose for `seq` (a draft model's catch-up)."""
        return 0

    def catch_up(self, seq, max_tokens: int) -> None:
        """Compute up to `max_tokens` of what `behind` counts; the engine spends the step's spare budget here."""

    def propose(self, seq, k: int) -> Proposal | None:
        raise NotImplementedError

    def accepted(self, seq, num_accepted: int, num_proposed: int) -> None:
        """The verifier kept `num_accepted` of the proposed tokens; roll back the rest."""

    def move(self, src: int, dst: int, length: int) -> None:
        """A sequence moved from slot src to dst (the batch stays contiguous)."""

    def release(self, slot: int) -> None:
        """The sequence in `slot` left the running batch."""
