"""Every check of a request before it is queued: what needs the model (ids in the vocabulary, the prompt within
the context) and its constraint compiled. A refusal names the field, and nothing of the request has run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..runtime.tokenizer import TextTokenizer
from .constraints import ConstraintCompiler
from .options import GenerateRequest, InvalidOption

if TYPE_CHECKING:
    from llguidance import LLMatcher


def check_request(request: GenerateRequest, tokenizer: TextTokenizer, vocab: int, limit: int,
                  compiler: Callable[[], ConstraintCompiler]) -> tuple[list[int], int, LLMatcher | None]:
    """(prompt ids, context limit, the constraint's matcher or None); raises InvalidOption."""
    options = request.options
    options.validate()
    named = [("eos_token_id", [options.eos_token_id] if options.eos_token_id is not None else []),
             ("logit_bias", list(options.logit_bias)),
             ("stop_sequences", [t for stop in options.stop_sequences if not isinstance(stop, str) for t in stop])]
    for name, ids in named:
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise InvalidOption(name, f"{name} names token {bad}, outside the vocabulary [0, {vocab})")
    prompt = request.prompt
    ids = tokenizer.encode(prompt) if isinstance(prompt, str) else [int(i) for i in prompt]
    if not ids:
        raise InvalidOption("prompt", "prompt must not be empty")
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if bad is not None:
        raise InvalidOption("prompt", f"the prompt holds token {bad}, outside the vocabulary [0, {vocab})")
    if len(ids) >= limit:  # it fits the pool too: loading made sure the pool holds a full context
        raise InvalidOption("prompt", f"prompt has {len(ids)} tokens but the context holds {limit}: "
                            "no room for a new token")
    try:
        matcher = compiler().compile(options.constraint) if options.constraint else None
    except ValueError as exc:
        raise InvalidOption("constraint", str(exc)) from None
    return ids, limit, matcher
