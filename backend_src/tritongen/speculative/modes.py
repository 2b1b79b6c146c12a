"""onnx-genai-engine's speculative types: SpeculativeMode and the head configurations, with its validation messages.

A request chooses a mode by name (with numeric knobs only); the files a
mode needs are configured once, on the engine, never per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MODES = ("none", "draft_model", "prompt_lookup", "mtp", "eagle3", "shared_kv")


@dataclass(frozen=True)
class SpeculativeMode:
    kind: str = "none"
    ngram: int = 3  # prompt_lookup: trailing tokens used as the lookup key
    max_tokens: int = 8  # prompt_lookup: longest copied continuation per step

    def validate(self) -> None:
        if self.kind not in MODES:
            raise ValueError(f"speculative mode must be one of {', '.join(MODES)}, got {self.kind!r}")
        if self.kind == "prompt_lookup":
            if self.ngram <= 0:
                raise ValueError("prompt-lookup ngram must be greater than zero")
            if self.max_tokens <= 0:
                raise ValueError("prompt-lookup max_tokens must be greater than zero")


@dataclass
class MtpConfig:
    head_model: Path
    target_hidden_output: str
    embedding_weights: Path  # raw little-endian f32 [vocab, hidden]
    lm_head_weights: Path  # raw little-endian f32 [hidden, vocab]
    vocab_size: int
    hidden_size: int
    kv_mode: str = "grow_cache"  # or "hidden_threaded"
    num_speculative_tokens: int = 4

    def validate(self) -> None:
        if not self.target_hidden_output:
            raise ValueError("MTP target_hidden_output must not be empty")
        if self.vocab_size == 0 or self.hidden_size == 0:
            raise ValueError("MTP vocab_size and hidden_size must be greater than zero")
        if self.num_speculative_tokens == 0:
            raise ValueError("MTP num_speculative_tokens must be greater than zero")
        if self.kv_mode not in ("grow_cache", "hidden_threaded"):
            raise ValueError(f"MTP kv_mode must be grow_cache or hidden_threaded, got {self.kv_mode!r}")


@dataclass
class Eagle3Config:
    head_model: Path
    target_hidden_outputs: list[str]  # low, middle, high
    embedding_weights: Path
    vocab_size: int
    hidden_size: int
    kv_mode: str = "grow_cache"
    num_speculative_tokens: int = 4

    def validate(self) -> None:
        if len(self.target_hidden_outputs) != 3 or any(not n for n in self.target_hidden_outputs):
            raise ValueError("EAGLE-3 target_hidden_outputs must contain exactly three non-empty "
                             "low/middle/high output names")
        if self.vocab_size == 0 or self.hidden_size == 0:
            raise ValueError("EAGLE-3 vocab_size and hidden_size must be greater than zero")
        if self.num_speculative_tokens == 0:
            raise ValueError("EAGLE-3 num_speculative_tokens must be greater than zero")
        if self.kv_mode not in ("grow_cache", "hidden_threaded"):
            raise ValueError(f"EAGLE-3 kv_mode must be grow_cache or hidden_threaded, got {self.kv_mode!r}")


@dataclass
class SharedKvBinding:
    name: str
    target_layers: list[int]


@dataclass
class SharedKvProposerConfig:
    assistant_model: Path
    target_hidden_output: str
    input_embedding_weights: Path
    backbone_hidden_size: int
    vocab_size: int
    num_speculative_tokens: int = 4
    shared_kv: list[SharedKvBinding] = field(default_factory=list)

    def validate(self) -> None:
        if not self.target_hidden_output:
            raise ValueError("shared-KV proposer target_hidden_output must not be empty")
        if self.backbone_hidden_size == 0 or self.vocab_size == 0:
            raise ValueError("shared-KV proposer backbone_hidden_size and vocab_size must be greater than zero")
        if self.num_speculative_tokens == 0:
            raise ValueError("shared-KV proposer num_speculative_tokens must be greater than zero")
        if not self.shared_kv:
            raise ValueError("shared-KV proposer requires at least one shared_kv binding group")
        for group in self.shared_kv:
            if not group.name:
                raise ValueError("shared-KV proposer shared_kv group name must not be empty")
            if not group.target_layers:
                raise ValueError(f"shared-KV proposer shared_kv group '{group.name}' must list at least one "
                                 "target layer")
