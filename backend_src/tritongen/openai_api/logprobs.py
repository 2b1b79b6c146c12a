"""The generator's per-token logprob entries -> OpenAI's two logprobs shapes.

Why two: chat completions use a list of {token, logprob, bytes, top_logprobs}
objects under `content`; legacy completions use parallel lists (tokens,
token_logprobs, top_logprobs as {token: logprob}, text_offset). Both are
built from the generator's JSON entries {"id", "text", "logprob", "top"}.
"""

from __future__ import annotations


def _token(entry: dict) -> dict:
    return {"token": entry["text"], "logprob": entry["logprob"], "bytes": list(entry["text"].encode("utf-8"))}


def chat_logprobs(entries: list[dict]) -> dict:
    return {"content": [{**_token(e), "top_logprobs": [_token(t) for t in e.get("top", [])]} for e in entries],
            "refusal": None}


def completion_logprobs(entries: list[dict], text_offset: int = 0) -> dict:
    """`text_offset` is where this run of tokens starts in the choice's text (streaming chunks)."""
    offsets = []
    for e in entries:
        offsets.append(text_offset)
        text_offset += len(e["text"])
    return {"tokens": [e["text"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["text"]: t["logprob"] for t in e.get("top", [])} for e in entries],
            "text_offset": offsets}
