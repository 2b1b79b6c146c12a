"""Prompt lookup: copy what followed the most recent earlier occurrence of the last n tokens.

Cheap and strong when the output repeats the input (edits, extraction,
code rewriting): no model runs, the target verifies the copy.
"""

from __future__ import annotations

from .proposer import Proposal, Proposer


class PromptLookupProposer(Proposer):
    def propose(self, seq, k: int) -> Proposal | None:
        mode = seq.spec_mode
        n, tokens = mode.ngram, seq.tokens
        if len(tokens) <= n:
            return None
        key = tokens[-n:]
        limit = min(k, mode.max_tokens)
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start:start + n] == key:
                follow = tokens[start + n:start + n + limit]
                return Proposal(follow) if follow else None
        return None
