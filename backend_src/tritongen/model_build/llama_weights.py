"""Llama-architecture weights in Hugging Face layout, the builder's one input.

Both the GGUF importer and the seeded tiny-model factory produce a
`LlamaWeights`, so every decoder variant is built by the same graph code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class LlamaSpec:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    rope_theta: float
    rms_eps: float
    max_position: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass
class LayerWeights:
    """One decoder layer; projection matrices are [out, in] like torch Linear."""

    attn_norm: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    o: np.ndarray
    ffn_norm: np.ndarray
    gate: np.ndarray
    up: np.ndarray
    down: np.ndarray


@dataclass
class LlamaWeights:
    spec: LlamaSpec
    embedding: np.ndarray  # [vocab, hidden], tied with the LM head
    layers: list[LayerWeights] = field(default_factory=list)
    final_norm: np.ndarray | None = None

    def keep_layers(self, indices: list[int]) -> "LlamaWeights":
        """A self-speculative draft: the same model with some layers removed."""
        from dataclasses import replace

        spec = replace(self.spec, num_layers=len(indices))
        return LlamaWeights(spec, self.embedding, [self.layers[i] for i in indices], self.final_norm)


def hidden_state_layers(num_layers: int) -> tuple[int, int, int]:
    """Low, middle and high layers whose outputs EAGLE-3 style heads read."""
    low = min(2, num_layers - 1)
    high = max(num_layers - 3, 0)
    return (low, num_layers // 2, high)
