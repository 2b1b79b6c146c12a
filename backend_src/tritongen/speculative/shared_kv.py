"""Shared-KV assistant: owns no KV; reads the target's KV of bound layers straight from its slots.

Each step builds inputs_embeds = concat(target_embedding(last token), hidden),
seeded from the target's last hidden state and then threaded through the
assistant's own projected_state. Each binding group feeds the assistant the
KV of the last target layer it lists, as upstream's proposer binds it (the
other listed layers name the group's span, they are not read).
"""

from __future__ import annotations

import numpy as np

from ..runtime.decoder import Decoder, KvBuffers
from .heads_runtime import open_head, raw_matrix
from .modes import SharedKvProposerConfig
from .proposer import Proposer, draw, proposal


class SharedKvProposer(Proposer):
    def __init__(self, config: SharedKvProposerConfig, target: Decoder, threads: int = 0, providers=None,
                 pin_threads: bool = False):
        if not isinstance(target, KvBuffers):
            raise ValueError("the shared-KV proposer needs the GroupQueryAttention target (slot KV buffers)")
        self.config = config
        self.slots: KvBuffers = target
        self.session = open_head(config.assistant_model, threads, providers, pin_threads)
        self.embedding = raw_matrix(config.input_embedding_weights, config.vocab_size, config.backbone_hidden_size)
        self.hidden_outputs = (config.target_hidden_output,)
        for group in config.shared_kv:
            for layer in group.target_layers:
                if not 0 <= layer < len(target.keys):
                    raise ValueError(f"shared-KV group '{group.name}' binds target layer {layer}, "
                                     f"but the target has {len(target.keys)} layers")
        self._check_kv_dtype(np.dtype(target.kv_dtype))

    def _check_kv_dtype(self, kv_dtype: np.dtype) -> None:
        """The assistant reads the target's KV as it is (no cast per step): an fp16 target needs an fp16 assistant."""
        wanted = {np.dtype(np.float32): "tensor(float)", np.dtype(np.float16): "tensor(float16)"}[kv_dtype]
        takes = {i.name: i.type for i in self.session.get_inputs()}
        for group in self.config.shared_kv:
            got = takes.get(f"shared_kv.{group.name}.key")
            if got != wanted:
                raise ValueError(f"the shared-KV assistant takes group '{group.name}' KV as {got}, but the target "
                                 f"keeps {kv_dtype} KV: use an assistant built for the target's KV dtype")

    def propose(self, seq, k: int):
        hidden = seq.hidden.get(self.config.target_hidden_output)
        if hidden is None:
            return None
        feeds = {"kv_length": np.array([seq.num_computed], np.int64)}
        for group in self.config.shared_kv:
            layer = group.target_layers[-1]
            row, host = slice(seq.slot, seq.slot + 1), self.slots.arrays.to_host
            feeds[f"shared_kv.{group.name}.key"] = host(self.slots.keys[layer][row])
            feeds[f"shared_kv.{group.name}.value"] = host(self.slots.values[layer][row])
        token, position = seq.tokens[-1], len(seq.tokens) - 1
        out, probs = [], []
        for j in range(k):
            embeds = np.concatenate([self.embedding[token], hidden]).astype(np.float32).reshape(1, 1, -1)
            logits, state = self.session.run(None, {**feeds, "inputs_embeds": embeds,
                                                    "position_ids": np.array([[position + j]], np.int64)})
            hidden = state[0, 0]
            token, q = draw(logits[0, 0], seq.sampler)
            out.append(token)
            if q is not None:
                probs.append(q)
        return proposal(out, probs)
