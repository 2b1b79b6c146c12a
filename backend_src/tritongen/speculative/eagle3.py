"""EAGLE-3: the head fuses the target's low, middle and high hidden states of the last token,
then recycles its own hidden output for each further draft step.

grow_cache: the head's own KV grows across the k draft steps; hidden_threaded: every step starts from an
empty head cache and only the hidden state is threaded, as upstream's EAGLE-3 proposer does."""

from __future__ import annotations

import numpy as np

from .heads_runtime import empty_past, open_head, raw_matrix
from .modes import Eagle3Config
from .proposer import Proposer, draw, proposal


class Eagle3Proposer(Proposer):
    def __init__(self, config: Eagle3Config, threads: int = 0, providers=None, pin_threads: bool = False):
        self.config = config
        self.session = open_head(config.head_model, threads, providers, pin_threads)
        self.embedding = raw_matrix(config.embedding_weights, config.vocab_size, config.hidden_size)
        self.hidden_outputs = tuple(config.target_hidden_outputs)

    def propose(self, seq, k: int):
        if any(name not in seq.hidden for name in self.hidden_outputs):
            return None
        h = self.config.hidden_size
        target = np.concatenate([seq.hidden[n] for n in self.hidden_outputs]).reshape(1, 1, 3 * h).astype(np.float32)
        draft_hidden = np.zeros((1, 1, h), np.float32)
        empty = empty_past(self.session)
        key, value = empty
        grow = self.config.kv_mode == "grow_cache"
        token, position = seq.tokens[-1], len(seq.tokens) - 1
        out, probs = [], []
        for j in range(k):
            logits, hidden_out, present_key, present_value = self.session.run(None, {
                "target_hidden": target, "draft_hidden": draft_hidden,
                "use_target": np.array([1.0 if j == 0 else 0.0], np.float32),
                "inputs_embeds": np.asarray(self.embedding[token], np.float32).reshape(1, 1, -1),
                "attention_mask": np.ones((1, key.shape[2] + 1), np.int64),
                "position_ids": np.array([[position + j]], np.int64),
                "past_key_values.0.key": key, "past_key_values.0.value": value,
            })
            key, value = (present_key, present_value) if grow else empty
            draft_hidden = hidden_out
            token, q = draw(logits[0, 0], seq.sampler)
            out.append(token)
            if q is not None:
                probs.append(q)
        return proposal(out, probs)
