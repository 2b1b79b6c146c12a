"""When a request ends, and which generated text may be released so far.

A stop string may match anywhere in the generated text, across token
boundaries; text that could still turn into a stop match is held back,
so a stream never shows part of a stop string. This differs on purpose
from onnx-genai-engine, which matches a stop string only at a token
boundary: a stop that ends inside a token is caught here too.
"""

from __future__ import annotations

from .options import FinishReason, GenerateOptions


class StopChecker:
    def __init__(self, options: GenerateOptions, eos_token_ids: tuple[int, ...], prompt_len: int, context_limit: int):
        self.options = options
        self.eos_token_ids = eos_token_ids  # any of them ends the request
        self.prompt_len = prompt_len
        self.context_limit = context_limit
        self.stop_texts = [(i, s) for i, s in enumerate(options.stop_sequences) if isinstance(s, str)]
        self.stop_tokens = [(i, tuple(s)) for i, s in enumerate(options.stop_sequences) if not isinstance(s, str)]
        self.stop_texts_by_index = dict(self.stop_texts)
        self.text = ""  # generated text so far, cut at a stop match once found
        self.released = 0  # characters of self.text already handed out
        self.token_ids: list[int] = []

    def add(self, token_id: int, piece: str) -> tuple[str, FinishReason | None]:
        """Record one token and its new text; return (text to release now, finish reason or None)."""
        self.token_ids.append(token_id)
        n = len(self.token_ids)
        stops_allowed = n >= self.options.min_length
        if self.options.stop_on_eos and token_id in self.eos_token_ids and stops_allowed:
            return self._release_all(), FinishReason.EOS_TOKEN
        old_len = len(self.text)
        self.text += piece
        if stops_allowed:
            reason = self._match_stop(old_len)
            if reason is not None:
                return self._release_all(), reason
        if n >= self.options.max_new_tokens:
            return self._release_all(), FinishReason.MAX_TOKENS
        if self.prompt_len + n >= self.context_limit:
            return self._release_all(), FinishReason.LENGTH
        return self._release_safe(), None

    def _match_stop(self, old_len: int) -> FinishReason | None:
        """Only a match that ends in the newest piece counts (older text was already checked)."""
        best = None  # (position, index)
        for index, stop in self.stop_texts:
            pos = self.text.find(stop, max(self.released, old_len - len(stop) + 1))
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, index)
        if best is not None:
            kept = len(self.stop_texts_by_index[best[1]]) if self.options.include_stop_str_in_output else 0
            self.text = self.text[: best[0] + kept]
            return FinishReason.stop_sequence(best[1])
        for index, seq in self.stop_tokens:
            if len(self.token_ids) >= len(seq) and tuple(self.token_ids[-len(seq):]) == seq:
                return FinishReason.stop_sequence(index)
        return None

    def _release_all(self) -> str:
        piece = self.text[self.released:]
        self.released = len(self.text)
        return piece

    def _release_safe(self) -> str:
        """Release text except a tail that is a prefix of some stop string."""
        hold = 0
        for _, stop in self.stop_texts:
            for k in range(min(len(stop) - 1, len(self.text)), hold, -1):
                if self.text.endswith(stop[:k]):
                    hold = k
                    break
        end = max(self.released, len(self.text) - hold)
        piece = self.text[self.released:end]
        self.released = end
        return piece
