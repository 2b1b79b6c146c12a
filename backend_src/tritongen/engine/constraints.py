"""Constrained decoding over llguidance: JSON, JSON Schema, regex and Lark, one matcher per request.

The tokenizer bridge is built once from the model's tokenizer.json text.
Masks for a whole batch are computed by llguidance's executor, which
drops the GIL, so the engine runs it on a helper thread while the model
runs and applies the masks when the logits arrive.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypedDict

import numpy as np
from llguidance import LLExecutor, LLMatcher, LLParserLimits, LLTokenizer, grammar_from
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask_par

from .options import GenerateConstraint


class ParserLimits(TypedDict, total=False):
    """LLParserLimits' keyword arguments."""

    max_items_in_row: int
    initial_lexer_fuel: int
    step_lexer_fuel: int
    step_max_items: int
    max_lexer_states: int
    max_grammar_size: int
    precompute_large_lexemes: bool
    verbose_errors: bool


# What one grammar may cost, in llguidance's own units: compiling (lexer fuel ~50k/ms, grammar symbols),
# each token's mask (fuel ~14k/ms, Earley items ~20k/ms) and memory (lexer states, 1-2 kB each). Errors
# stay terse: verbose ones would echo parser state back to the client.
LIMITS = ParserLimits(max_items_in_row=2000, initial_lexer_fuel=1_000_000, step_lexer_fuel=200_000,
                      step_max_items=50_000, max_lexer_states=50_000, max_grammar_size=100_000, verbose_errors=False)

_ANY_JSON = {"anyOf": [{"type": "object"}, {"type": "array"}, {"type": "string"}, {"type": "number"},
                       {"type": "boolean"}, {"type": "null"}]}


class ConstraintCompiler:
    def __init__(self, tokenizer_json: str, vocab_size: int, eos_token_id: int):
        self.tokenizer = LLTokenizer(tokenizer_json, n_vocab=vocab_size, eos_token=eos_token_id)
        self.vocab_size = vocab_size

    def compile(self, constraint: GenerateConstraint) -> LLMatcher:
        """A fresh matcher; ValueError naming the problem when the constraint does not compile."""
        try:
            if constraint.kind == "json":
                grammar = grammar_from("json_schema", json.dumps(_ANY_JSON))
            elif constraint.kind == "json_schema":
                json.loads(constraint.text)
                grammar = grammar_from("json_schema", constraint.text)
            elif constraint.kind == "regex":
                grammar = grammar_from("regex", constraint.text)
            elif constraint.kind == "lark":
                grammar = grammar_from("lark", constraint.text)
            else:  # GenerateConstraint admits no other kind
                raise ValueError(f"unknown constraint kind {constraint.kind!r}")
        except (ValueError, TypeError) as exc:
            raise ValueError(f"invalid {constraint.kind} constraint: {exc}") from None
        matcher = LLMatcher(self.tokenizer, grammar, log_level=0, limits=LLParserLimits(**LIMITS))
        if matcher.is_error():
            raise ValueError(f"invalid {constraint.kind} constraint: {matcher.get_error().strip()}")
        return matcher


class MaskComputer:
    """Computes a batch's masks on a background thread; `result()` waits for them."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self._executor = LLExecutor()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tritongen-masks")
        self._lock = threading.Lock()
        self.seconds = 0.0  # total time spent computing masks (metrics)

    def start(self, matchers: list[LLMatcher]) -> Future:
        def compute() -> np.ndarray:
            t0 = time.perf_counter()
            masks = allocate_token_bitmask(len(matchers), self.vocab_size)
            fill_next_token_bitmask_par(self._executor, [(m, i) for i, m in enumerate(matchers)], masks)
            with self._lock:
                self.seconds += time.perf_counter() - t0
            return masks

        return self._thread.submit(compute)

    def close(self) -> None:
        self._thread.shutdown(wait=False)


def allowed_tokens(mask_row: np.ndarray, vocab_size: int) -> np.ndarray:
    """Bitmask row (int32 words, bit i of the vocabulary) -> boolean [vocab]."""
    return np.unpackbits(mask_row.view(np.uint8), bitorder="little")[:vocab_size].astype(bool)
