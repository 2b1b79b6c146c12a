"""The proposers an engine has, opened from its configuration, and which one (with what K) a request gets."""

from __future__ import annotations

from pathlib import Path

from ..runtime.decoder import Decoder
from ..runtime.model_folder import locate
from ..runtime.open_decoder import open_slot_decoder
from ..speculative.draft_model import DraftModelProposer
from ..speculative.eagle3 import Eagle3Proposer
from ..speculative.modes import SpeculativeMode
from ..speculative.mtp import MtpProposer
from ..speculative.prompt_lookup import PromptLookupProposer
from ..speculative.proposer import Proposer
from ..speculative.shared_kv import SharedKvProposer
from .options import EngineConfig, GenerateOptions, InvalidOption


class Speculation:
    def __init__(self, config: EngineConfig, target_decoder: Decoder, max_len: int, vocab_size: int):
        self.config = config
        self.proposers: dict[str, Proposer] = {"prompt_lookup": PromptLookupProposer()}
        runtime = (config.intra_op_threads, config.execution_providers or None, config.pin_threads)
        if config.draft_model is not None:
            draft = open_slot_decoder(locate(Path(config.draft_model)), config.scheduler.max_num_seqs, max_len,
                                      *runtime, allow_host_kv=config.allow_host_kv)
            if draft.shape.vocab_size != vocab_size:
                raise ValueError(f"draft model vocabulary {draft.shape.vocab_size} differs from the target's "
                                 f"{vocab_size}")
            self.proposers["draft_model"] = DraftModelProposer(draft)
        if config.mtp is not None:
            self.proposers["mtp"] = MtpProposer(config.mtp, *runtime)
        if config.eagle3 is not None:
            self.proposers["eagle3"] = Eagle3Proposer(config.eagle3, *runtime)
        if config.shared_kv is not None:
            self.proposers["shared_kv"] = SharedKvProposer(config.shared_kv, target_decoder, *runtime)

    @property
    def slot_listeners(self) -> list[Proposer]:
        """Proposers with per-slot state: the scheduler tells them when a sequence moves or leaves its slot."""
        return [p for p in self.proposers.values() if p.keeps_slot_state]

    def default_mode(self) -> SpeculativeMode:
        """The engine's mode; onnx-genai-engine 0.1.0-dev.2 config.rs: "For compatibility, a configured
        `draft_model` selects `DraftModel` when this remains `None`"."""
        mode = self.config.speculative_mode
        if mode.kind == "none" and self.config.draft_model is not None:
            return SpeculativeMode("draft_model")
        return mode

    def for_request(self, options: GenerateOptions) -> tuple[Proposer | None, SpeculativeMode | None, int]:
        """(proposer, mode, K): the request's own mode, else the engine default. K: the request's, else the
        mode's own configuration's (a head folder's num_speculative_tokens), else the engine's."""
        mode = options.speculative_mode or self.default_mode()
        if mode.kind == "none":
            return None, None, 0
        proposer = self.proposers.get(mode.kind)
        if proposer is None:
            raise InvalidOption("speculative_mode", f"speculative mode {mode.kind!r} is not configured on this "
                                f"engine (available: {', '.join(['none', *self.proposers])})")
        cfg = self.config
        head = {"mtp": cfg.mtp, "eagle3": cfg.eagle3, "shared_kv": cfg.shared_kv}.get(mode.kind)
        k = options.num_speculative_tokens or (head.num_speculative_tokens if head is not None else None)
        return proposer, mode, k or cfg.num_speculative_tokens
