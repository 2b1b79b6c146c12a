"""Logits processors in onnx-genai-engine's order, the sampler, and logprobs.

Order: repetition, frequency, presence, stop (min_length bans EOS),
[constraint], temperature, top-k, top-p, min-p. Each request owns its
random generator, so a seeded request draws the same tokens whatever else
shares the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .options import GenerateOptions, TokenLogprob

NEG_INF = np.float32(-np.inf)
_FLT_MAX = np.finfo(np.float32).max
# Below this a temperature samples greedily (as vLLM): dividing logits by it would overflow.
MIN_TEMPERATURE = 1e-5
# Top-p looks at this many best candidates first and sorts the full row only
# when they do not cover the requested mass.
_TOP_P_CANDIDATES = 512


@dataclass
class TokenChoice:
    token_id: int
    logprob: TokenLogprob | None


class RequestSampler:
    """Per-request sampling state: options, token counts, random generator."""

    def __init__(self, options: GenerateOptions, prompt_ids: list[int], vocab_size: int,
                 eos_token_ids: tuple[int, ...] = ()):
        self.options = options
        self.vocab_size = vocab_size
        self.eos_token_ids = list(eos_token_ids)  # banned until min_length; empty: no EOS to ban
        self.greedy = options.greedy or options.temperature < MIN_TEMPERATURE
        self.rng = np.random.Generator(np.random.PCG64(options.seed)) if not self.greedy else None
        # config.rs of onnx-genai-engine 0.1.0-dev.2: "Repetition penalty ... Values <= 1 disable it".
        self.repetition_penalty = options.repetition_penalty if options.repetition_penalty > 1.0 else None
        self.uses_penalties = (
            self.repetition_penalty is not None or options.frequency_penalty != 0.0 or options.presence_penalty != 0.0
            or bool(options.logit_bias) or bool(options.bad_words_ids)
        )
        self.bias_ids = np.array([i for i in options.logit_bias if 0 <= i < vocab_size], np.int64)
        self.bias = np.array([options.logit_bias[i] for i in self.bias_ids.tolist()], np.float32)
        self.generated: list[int] = []  # the output so far, for bad words
        # Both are set exactly when uses_penalties is.
        self.seen: np.ndarray | None = None
        self.output_counts: np.ndarray | None = None
        if self.uses_penalties:
            self.seen = np.zeros(vocab_size, dtype=bool)
            self.seen[[i for i in prompt_ids if 0 <= i < vocab_size]] = True
            self.output_counts = np.zeros(vocab_size, dtype=np.int32)
        self.num_generated = 0

    def plain_greedy(self) -> bool:
        """Argmax of the raw logits is the answer: the batch can take it in one vectorised call."""
        o = self.options
        return (self.greedy and not self.uses_penalties and o.top_logprobs is None and o.constraint is None
                and (self.num_generated >= o.min_length or not self.eos_token_ids))

    def record(self, token_id: int) -> None:
        self.num_generated += 1
        if self.options.bad_words_ids:
            self.generated.append(token_id)
        if self.uses_penalties and 0 <= token_id < self.vocab_size:
            assert self.seen is not None and self.output_counts is not None
            self.seen[token_id] = True
            self.output_counts[token_id] += 1

    def process(self, logits: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
        """One row of logits [V] through the processor chain; returns a new array.

        `allowed` is the constraint's mask (boolean [V]), applied after stop handling.
        """
        o = self.options
        x = logits.astype(np.float32, copy=True)
        if self.repetition_penalty is not None:
            seen = x[self.seen]
            x[self.seen] = np.where(seen > 0, seen / self.repetition_penalty, seen * self.repetition_penalty)
        if o.frequency_penalty != 0.0:  # a penalty: uses_penalties, so the counts exist
            assert self.output_counts is not None
            x -= o.frequency_penalty * self.output_counts
        if o.presence_penalty != 0.0:
            assert self.output_counts is not None
            x -= o.presence_penalty * (self.output_counts > 0)
        if self.bias_ids.size:
            x[self.bias_ids] += self.bias
        if self.uses_penalties:  # extreme penalties overflow: they rank tokens, they do not mask them
            np.clip(x, -_FLT_MAX, _FLT_MAX, out=x)
        for word in o.bad_words_ids:  # a word's last token is banned where the output ends with the rest of it
            if len(word) == 1 or tuple(self.generated[-(len(word) - 1):]) == word[:-1]:
                if 0 <= word[-1] < x.shape[0]:
                    x[word[-1]] = NEG_INF
        if self.num_generated < o.min_length and self.eos_token_ids:
            x[self.eos_token_ids] = NEG_INF
        if allowed is not None:
            constrained = np.where(allowed[: x.shape[0]], x, NEG_INF)
            # min_length may ban the only token the constraint allows (EOS of a complete value):
            # the constraint wins, so there is always a token to choose.
            x = constrained if np.isfinite(constrained).any() else np.where(allowed[: x.shape[0]], logits, NEG_INF)
        # Greedy leaves the logits unscaled (a temperature of 0 is no temperature). The filters below do not move
        # the argmax, so a greedy row skips them unless it reports logprobs, which must be those of the final
        # distribution (filtered tokens are not listed).
        if self.greedy and o.top_logprobs is None:
            return x
        x = x.astype(np.float64) if self.greedy else x.astype(np.float64) / o.temperature
        if 0 < o.top_k < x.shape[0]:
            kth = np.partition(x, -o.top_k)[-o.top_k]
            x[x < kth] = NEG_INF
        if o.top_p < 1.0:
            _top_p_filter(x, o.top_p)
        if o.min_p > 0.0:
            peak = x.max()
            x[x < peak + np.log(o.min_p)] = NEG_INF
        return x

    def choose(self, logits: np.ndarray, allowed: np.ndarray | None = None) -> TokenChoice:
        x = self.process(logits, allowed)
        if self.greedy:
            token = int(np.argmax(x))
        else:
            assert self.rng is not None  # every non-greedy request has one
            probs = _softmax(x)
            token = int(np.searchsorted(np.cumsum(probs), self.rng.random() * probs.sum(), side="right"))
            token = min(token, x.shape[0] - 1)
            while not np.isfinite(x[token]):  # rounding at the end of the cumsum
                token -= 1
        self.record(token)
        return TokenChoice(token, self._logprob(x, token) if self.options.top_logprobs is not None else None)

    def verify(self, logits: np.ndarray, allowed: np.ndarray | None, draft: int,
               draft_probs: np.ndarray | None) -> TokenChoice:
        """The target's token at a drafted position.

        Greedy: the argmax, as without speculation. Sampling: keep the draft
        token with probability min(1, p/q), else draw from the normalised
        residual max(0, p - q), so outputs follow the target distribution p
        whatever the draft proposed (q is one-hot for deterministic drafts).
        """
        if self.greedy:
            return self.choose(logits, allowed)
        x = self.process(logits, allowed)
        assert self.rng is not None  # every non-greedy request has one
        p = _softmax(x)
        q = draft_probs if draft_probs is not None else np.eye(1, p.shape[0], draft, dtype=np.float64)[0]
        if q[draft] > 0 and self.rng.random() < min(1.0, p[draft] / q[draft]):
            token = draft
        else:
            residual = np.maximum(p - q, 0.0)
            weights = residual if residual.sum() > 0 else p
            token = int(np.searchsorted(np.cumsum(weights), self.rng.random() * weights.sum(), side="right"))
            token = min(token, p.shape[0] - 1)
            while weights[token] <= 0:
                token -= 1
        self.record(token)
        return TokenChoice(token, self._logprob(x, token) if self.options.top_logprobs is not None else None)

    def _logprob(self, x: np.ndarray, token: int) -> TokenLogprob:
        shifted = x.astype(np.float64) - x.max()  # finite for every finite logit, however far apart
        logp = shifted - np.log(np.exp(shifted).sum())
        k = self.options.top_logprobs
        top = []
        if k:
            best = np.argpartition(-logp, k - 1)[:k] if k < logp.shape[0] else np.arange(logp.shape[0])
            best = best[np.argsort(-logp[best], kind="stable")]
            top = [(int(i), float(logp[i])) for i in best if np.isfinite(logp[i])]
        if token not in (i for i, _ in top):
            top.append((token, float(logp[token])))
        return TokenLogprob(token, float(logp[token]), top, 1 + int((logp > logp[token]).sum()))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _top_p_filter(x: np.ndarray, top_p: float) -> None:
    """Keep the smallest set of best tokens whose probability reaches top_p (in place)."""
    probs = _softmax(x)
    n = min(_TOP_P_CANDIDATES, x.shape[0])
    cand = np.argpartition(-probs, n - 1)[:n] if n < x.shape[0] else np.arange(x.shape[0])
    cand = cand[np.argsort(-probs[cand], kind="stable")]
    cum = np.cumsum(probs[cand])
    if cum[-1] < top_p and n < x.shape[0]:
        cand = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[cand])
    keep = int(np.searchsorted(cum, top_p, side="left")) + 1
    mask = np.ones(x.shape[0], dtype=bool)
    mask[cand[:keep]] = False
    x[mask] = NEG_INF
