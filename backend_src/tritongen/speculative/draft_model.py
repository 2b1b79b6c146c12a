"""DraftModel: a smaller decoder with the target's vocabulary proposes k tokens autoregressively.

The draft keeps its own KV in slots that mirror the target's: row r of the
draft belongs to the sequence in the target's row r. It catches up on the
tokens it has not seen (a new prompt, or what the target accepted) within
the step's spare token budget, the row decoding plainly until it has,
then drafts k tokens, and after verification keeps only the KV of accepted
tokens.
"""

from __future__ import annotations

import numpy as np

from ..runtime.decoder import Decoder
from .proposer import Proposal, Proposer, draw, proposal

CATCH_UP_CHUNK = 256


class DraftModelProposer(Proposer):
    keeps_slot_state = True

    def __init__(self, decoder: Decoder):
        self.decoder = decoder  # over the draft model
        self.computed = [0] * decoder.max_slots  # tokens whose draft KV is valid, per slot
        self._base = [0] * decoder.max_slots

    def behind(self, seq) -> int:
        return len(seq.tokens) - 1 - self.computed[seq.slot]

    def catch_up(self, seq, max_tokens: int) -> None:
        """Feed the draft the tokens it has not seen, in chunks, within the step's token budget."""
        slot, tokens = seq.slot, seq.tokens
        n = self.computed[slot]
        target = min(len(tokens) - 1, n + max_tokens)
        while n < target:
            chunk = tokens[n:min(target, n + CATCH_UP_CHUNK)]
            self.decoder.prefill(slot, np.array([chunk], np.int64), n)
            n += len(chunk)
        self.computed[slot] = n

    def propose(self, seq, k: int) -> Proposal | None:
        """The engine calls it once `behind` is 0."""
        slot, tokens = seq.slot, seq.tokens
        n = self.computed[slot]
        self._base[slot] = len(tokens)
        out, probs, token = [], [], tokens[-1]
        for j in range(k):
            logits, _ = self.decoder.prefill(slot, np.array([[token]], np.int64), n + j)
            token, q = draw(logits[0, -1], seq.sampler)
            out.append(token)
            if q is not None:
                probs.append(q)
        self.computed[slot] = n + k
        return proposal(out, probs)

    def accepted(self, seq, num_accepted: int, num_proposed: int) -> None:
        if seq.slot is not None:
            self.computed[seq.slot] = self._base[seq.slot] + min(num_accepted, num_proposed - 1)

    def move(self, src: int, dst: int, length: int) -> None:
        self.decoder.move(src, dst, self.computed[src])
        self.computed[dst], self._base[dst] = self.computed[src], self._base[src]

    def release(self, slot: int) -> None:
        self.computed[slot] = 0
