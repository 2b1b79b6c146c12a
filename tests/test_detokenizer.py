"""IncrementalDetokenizer and TextTokenizer on the SmolLM2 tokenizer folder (no model run)."""
from pathlib import Path

import pytest

from tritongen.runtime.tokenizer import IncrementalDetokenizer, TextTokenizer

FOLDER = Path(__file__).resolve().parents[1] / "model_repository" / "target"

TEXTS = [
    "Hello, world! This is a test.",
    "  two leading spaces,   three inside,\ttab and trailing  ",
    "line one\nline two\n\n\nafter blank lines\r\n",
    "Café crème brûlée, naïve façade, Ångström, Ωμέγα",
    "中文分词测试，日本語のテキスト、한국어 문장",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and 🦀",
    "math ∑∫√ ≠ ≤ — “quotes” … \u00a0nbsp",
    "def f(x):\n    return x ** 2  # indented code\n",
]


@pytest.fixture(scope="module")
def tok():
    return TextTokenizer(FOLDER)


def stream(tok, ids, context=()):
    d = IncrementalDetokenizer(tok, list(context))
    pieces = [d.add(i) for i in ids]
    return pieces


@pytest.mark.parametrize("text", TEXTS)
def test_streaming_concatenates_to_the_original(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text  # the byte-level tokenizer round-trips
    pieces = stream(tok, ids)
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)  # never a half character


@pytest.mark.parametrize("text", TEXTS)
def test_streaming_after_a_prompt_context(tok, text):
    prompt = tok.encode("The prompt ends here:")
    ids = tok.encode(" " + text)
    assert "".join(stream(tok, ids, context=prompt)) == " " + text


def test_emoji_split_over_byte_tokens_is_held_until_complete(tok):
    text = "🦀"
    ids = tok.encode(text)
    assert len(ids) > 1  # the crab is several byte tokens in this vocabulary
    pieces = stream(tok, ids)
    assert pieces[:-1] == [""] * (len(ids) - 1) and pieces[-1] == text


def byte_tokens(tok, text):
    """One token per UTF-8 byte (GPT-2 byte-to-unicode alphabet), so every multi-byte character is split."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = iter(range(256, 512))
    alphabet = {b: chr(b) if b in printable else chr(next(extra)) for b in range(256)}
    return [tok.tokenizer.token_to_id(alphabet[b]) for b in text.encode("utf-8")]


@pytest.mark.parametrize("text", TEXTS[3:6])
def test_every_character_split_into_byte_tokens(tok, text):
    ids = byte_tokens(tok, text)
    assert None not in ids and tok.decode(ids) == text
    pieces = stream(tok, ids, context=tok.encode("ctx"))
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    assert sum(p == "" for p in pieces) == len(text.encode("utf-8")) - len(text)  # held until each char completes


def test_special_tokens_add_no_text(tok):
    ids = tok.encode("Hi") + [tok.eos_token_id] + tok.encode(" there")
    assert "".join(stream(tok, ids)) == "Hi there"


def test_tokenizer_settings(tok, target_folder):
    from tritongen.runtime.model_folder import locate

    assert tok.eos_token_ids == (2,) and not tok.add_bos and locate(target_folder).context_length == 8192
    assert tok.vocab_size >= 49152
    assert tok.decode([tok.eos_token_id]) == ""


def test_chat_rendering_has_chatml_markers_and_generation_prompt(tok):
    text = tok.render_chat([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi 😀"}])
    assert text.startswith("<|im_start|>system\nBe terse.<|im_end|>\n")
    assert "<|im_start|>user\nHi 😀<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert text.count("<|im_start|>") == 3 and text.count("<|im_end|>") == 2
    # the markers are single special tokens, not spelled out
    im_start = tok.encode("<|im_start|>")
    assert len(im_start) == 1 and tok.encode(text)[0] == im_start[0]


def test_chat_rendering_without_system_adds_the_model_default(tok):
    text = tok.render_chat([{"role": "user", "content": "hello"}])
    assert text.startswith("<|im_start|>system\n")
    assert text.index("<|im_start|>system") < text.index("<|im_start|>user\nhello<|im_end|>")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
