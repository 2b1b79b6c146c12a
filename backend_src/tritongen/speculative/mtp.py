"""MTP: a head fed the target's last hidden state and the next token's embedding drafts k tokens.

grow_cache: the head's own KV grows across the k draft steps;
hidden_threaded: no KV, only the hidden state is threaded step to step.
Logits use the target's LM head, read from a raw f32 [hidden, vocab] file.
"""

from __future__ import annotations

import numpy as np

from .heads_runtime import empty_past, open_head, raw_matrix
from .modes import MtpConfig
from .proposer import Proposer, draw, proposal


class MtpProposer(Proposer):
    def __init__(self, config: MtpConfig, threads: int = 0, providers=None, pin_threads: bool = False):
        self.config = config
        self.session = open_head(config.head_model, threads, providers, pin_threads)
        self.embedding = raw_matrix(config.embedding_weights, config.vocab_size, config.hidden_size)
        self.lm_head = raw_matrix(config.lm_head_weights, config.hidden_size, config.vocab_size)
        self.hidden_outputs = (config.target_hidden_output,)

    def propose(self, seq, k: int):
        hidden = seq.hidden.get(self.config.target_hidden_output)
        if hidden is None:
            return None
        grow = self.config.kv_mode == "grow_cache"
        key, value = empty_past(self.session)
        token, position = seq.tokens[-1], len(seq.tokens) - 1
        out, probs = [], []
        for j in range(k):
            past_len = key.shape[2]
            hidden_out, present_k, present_v = self.session.run(None, {
                "hidden_states": hidden.reshape(1, 1, -1).astype(np.float32),
                "inputs_embeds": np.asarray(self.embedding[token], np.float32).reshape(1, 1, -1),
                "attention_mask": np.ones((1, past_len + 1), np.int64),
                "position_ids": np.array([[position + j]], np.int64),
                "past_key_values.0.key": key, "past_key_values.0.value": value,
            })
            if grow:
                key, value = present_k, present_v
            hidden = hidden_out[0, 0]
            token, q = draw(hidden @ self.lm_head, seq.sampler)
            out.append(token)
            if q is not None:
                probs.append(q)
        return proposal(out, probs)
