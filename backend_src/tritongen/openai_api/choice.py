"""One choice's result as generator pieces arrive: text, counts, logprobs, finish reason.

Why: usage and finish_reason are assembled the same way for chat and
completions, streaming or not; the endpoints only format what this holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .generator_client import Piece

# The generator's finish reasons -> OpenAI's. `stop_sequence:N` carries the stop's index.
_FINISH = {"max_tokens": "length", "length": "length", "eos_token": "stop", "cancelled": "stop"}


def openai_finish_reason(reason: str) -> str | None:
    if not reason:
        return None
    return "stop" if reason.startswith("stop_sequence") else _FINISH.get(reason, "stop")


@dataclass
class Choice:
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: list[dict] = field(default_factory=list)
    finish_reason: str | None = None

    def add(self, piece: Piece) -> None:
        self.text += piece.text
        self.prompt_tokens = piece.num_input_tokens or self.prompt_tokens
        self.completion_tokens += piece.num_output_tokens
        self.logprobs += piece.logprobs
        self.finish_reason = openai_finish_reason(piece.finish_reason) or self.finish_reason


def usage(choices: list[Choice], prompts: list[list[Choice]] | None = None) -> dict:
    """Prompt tokens count once per prompt (not once per choice), as OpenAI counts them with n > 1."""
    groups = prompts if prompts is not None else [choices]
    prompt_tokens = sum(group[0].prompt_tokens for group in groups if group)
    completion_tokens = sum(c.completion_tokens for c in choices)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
