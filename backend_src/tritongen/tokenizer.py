"""Tokenizer folder (tokenizer.json + settings), chat rendering, streaming detokenization."""

from __future__ import annotations

import json
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer


class TextTokenizer:
    def __init__(self, folder: Path):
        folder = Path(folder)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
        self.eos_token_id: int = generation["eos_token_id"]
        self.max_position: int = generation["max_position_embeddings"]
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.json_text = (folder / "tokenizer.json").read_text(encoding="utf-8")
        template = config.get("chat_template")
        self._template = None
        if template:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.filters["tojson"] = lambda x, indent=None: json.dumps(x, indent=indent, ensure_ascii=False)
            env.globals["raise_exception"] = _raise_template_error
            self._template = env.from_string(template)
        self._special = {"bos_token": config.get("bos_token"), "eos_token": config.get("eos_token")}

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def render_chat(self, messages: list[dict]) -> str:
        """The model's chat template with the assistant turn opened (add_generation_prompt)."""
        if self._template is None:
            raise ValueError("this model has no chat template; send text_input or input_ids instead")
        return self._template.render(messages=messages, add_generation_prompt=True, **self._special)


def _raise_template_error(message: str):
    raise ValueError(f"chat template: {message}")


class IncrementalDetokenizer:
    """Turns a growing id list into text pieces without losing spaces or splitting UTF-8.

    Decoding a lone token drops context (leading spaces of some tokenizers)
    and may end inside a multi-byte character; so we decode a short window
    of recent ids and release only the text that is stable.
    """

    def __init__(self, tokenizer: TextTokenizer, context_ids: list[int]):
        self._tok = tokenizer
        self.ids = list(context_ids[-6:])
        self._window_start = 0  # first id of the decode window
        self._read = len(self.ids)  # ids before this are already released as text

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        done = self._tok.decode(self.ids[self._window_start:self._read])
        full = self._tok.decode(self.ids[self._window_start:])
        if len(full) <= len(done) or full.endswith("\ufffd"):
            return ""
        piece = full[len(done):]
        self._window_start, self._read = self._read, len(self.ids)
        return piece
