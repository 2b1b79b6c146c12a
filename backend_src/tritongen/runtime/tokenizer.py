"""A model folder's tokenizer: tokenizer.json, its special tokens, EOS ids, BOS, chat template; streaming
detokenization.

What the folder's files say wins, as transformers reads them: every id of a
list-valued `eos_token_id` stops (generation_config.json, else
genai_config.json, else config.json, else the tokenizer config's
eos_token), and a text prompt gets a BOS when tokenizer_config.json's
`add_bos_token` says so (when it is silent, when tokenizer.json's
post-processor adds one). A rendered chat never gets one: its template
writes what it needs.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from .chat_template import ChatTemplate, template_source, with_tools_in_text
from .model_folder import read_json

_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


class TextTokenizer:
    def __init__(self, folder: Path):
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise ValueError(f"{folder}: no tokenizer.json (the model folder must carry its tokenizer)")
        self.json_text = path.read_text(encoding="utf-8")
        try:
            self.tokenizer = Tokenizer.from_str(self.json_text)
        except Exception as exc:  # noqa: BLE001 - the tokenizers library raises its own exception type
            raise ValueError(f"{path}: not a tokenizer the tokenizers library reads ({exc})") from None
        config = read_json(folder, "tokenizer_config.json")
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.special_tokens = {k: t for k in _SPECIAL_KEYS if (t := _token_text(config.get(k))) is not None}
        self.eos_token_ids = self._eos_ids(folder, config)
        self.eos_token_id: int = self.eos_token_ids[0]
        bos = self.special_tokens.get("bos_token")
        self.bos_token_id = self.tokenizer.token_to_id(bos) if bos else None
        adds_bos = self.bos_token_id is not None and self.tokenizer.encode("a").ids[:1] == [self.bos_token_id]
        self.add_bos = bool(config.get("add_bos_token", adds_bos)) and self.bos_token_id is not None
        source = template_source(folder, config)
        self.chat = ChatTemplate(source, self.special_tokens) if source else None

    def _eos_ids(self, folder: Path, config: dict) -> tuple[int, ...]:
        for name, value in (
                ("generation_config.json", read_json(folder, "generation_config.json").get("eos_token_id")),
                ("genai_config.json", read_json(folder, "genai_config.json").get("model", {}).get("eos_token_id")),
                ("config.json", read_json(folder, "config.json").get("eos_token_id"))):
            if value is not None:
                ids = _ids(value)
                if not ids:
                    raise ValueError(f"{folder / name}: eos_token_id must be an integer or a list of them")
                return tuple(dict.fromkeys(ids))
        eos = self.special_tokens.get("eos_token")
        eos_id = self.tokenizer.token_to_id(eos) if eos is not None else None
        if eos_id is not None:
            return (eos_id,)
        raise ValueError(f"{folder}: no EOS token id (looked for eos_token_id in generation_config.json, "
                         "genai_config.json and config.json, and eos_token in tokenizer_config.json)")

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """A text prompt's ids, with the model's BOS when its tokenizer config asks for one and `add_bos`."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if add_bos and self.add_bos:
            assert self.bos_token_id is not None  # add_bos is only set when there is a BOS id
            return [self.bos_token_id, *ids]
        return ids

    def word_sequences(self, words: list[str]) -> list[tuple[int, ...]]:
        """Words as vLLM's bad_words bans them: the ids of each as written and with a leading space (mid-sentence)."""
        out: list[tuple[int, ...]] = []
        for word in words:
            for variant in (word, " " + word.lstrip()):
                ids = tuple(self.encode(variant, add_bos=False))
                if ids and ids not in out:
                    out.append(ids)
        return out

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: list[dict], **kwargs) -> str:
        """The model's chat template with the assistant turn opened; `kwargs` reach the template (tools, ...)."""
        if self.chat is None:
            raise ValueError("this model has no chat template; send text_input or input_ids instead")
        tools = kwargs.get("tools")
        if not self.chat.renders_tools and (tools or any(m.get("tool_calls") for m in messages)):
            messages = with_tools_in_text(messages, tools)  # transformers would drop them: the model never sees them
        return self.chat.render(messages, add_generation_prompt=True, **kwargs)


class IncrementalDetokenizer:
    """A growing id list as text pieces, without lost spaces or split UTF-8: tokenizers' own DecodeStream,
    primed with the last prompt ids so the first piece decodes in context (it gave the same pieces as our
    earlier window decoder on every detokenizer test)."""

    def __init__(self, tokenizer: TextTokenizer, context_ids: list[int], skip_special_tokens: bool = True):
        self._tok = tokenizer.tokenizer
        self._stream = DecodeStream(ids=list(context_ids[-6:]), skip_special_tokens=skip_special_tokens)

    def add(self, token_id: int) -> str:
        return self._stream.step(self._tok, token_id) or ""
