"""TensorRT-LLM's `ensemble` tensors to the generator's and back: what the ensemble's two Python steps compute.

TensorRT-LLM's Triton clients send one request per batch row (`[1, 1]` shapes) with its names
(`min_tokens`, `bad_words`, `beam_width`, ...) and read `text_output`, `cum_log_probs`,
`output_log_probs`. The generator keeps the vLLM backend's names and shapes, so these steps translate.
A TensorRT-LLM field the generator cannot honour is an error naming it, never dropped. No Triton
import: tensors arrive and leave as numpy arrays, batch dimension included.
"""

from __future__ import annotations

import json

import numpy as np

from .request_limits import RequestError

# TensorRT-LLM inputs passed to the generator input of the same name, unchanged.
PASSED = ("text_input", "max_tokens", "exclude_input_in_output", "end_id", "top_k", "top_p", "temperature",
          "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "random_seed", "return_log_probs",
          "stream", "guided_decoding_guide_type", "guided_decoding_guide")
# Inputs that take part only at one value: (the value that does nothing, why another cannot be served).
NEUTRAL = {
    "beam_width": (1, "beam search is not implemented; only 1 is served"),
    "num_return_sequences": (1, "one sequence per request is served; only 1"),
    "length_penalty": (1.0, "it applies to beam search, which is not implemented; only 1.0 is served"),
    "return_context_logits": (False, "logits are not returned"),
    "return_generation_logits": (False, "logits are not returned"),
    "return_perf_metrics": (False, "the per-request timing outputs are not returned"),
}
# Inputs served by no value: multimodal prompt tables, LoRA adapters, encoder-decoder prompts.
REFUSED = {
    "decoder_text_input": "encoder-decoder models are not served",
    "prompt_embedding_table": "prompt tuning tables are not served",
    "prompt_table_extra_id": "prompt tuning tables are not served",
    "prompt_vocab_size": "prompt tuning tables are not served",
    "lora_task_id": "LoRA adapters are not served",
    "lora_weights": "LoRA adapters are not served",
    "lora_config": "LoRA adapters are not served",
}
# pad_id, return_num_input_tokens and return_num_output_tokens are read by no step: one sequence per request
# is never padded, and every response holds num_input_tokens and num_output_tokens whether asked for or not.


def _scalar(name: str, array: np.ndarray):
    if array.size != 1:
        raise RequestError(f"{name} must hold one value per request, got shape {list(array.shape)}")
    value = array.reshape(-1)[0]
    return value.item() if isinstance(value, np.generic) else value


def _words(array: np.ndarray) -> list[str]:
    """A bad_words or stop_words row as TensorRT-LLM reads it: each string one word (or phrase), empty ones
    skipped (its clients send "" for none)."""
    words = [w.decode("utf-8", errors="replace") if isinstance(w, bytes) else str(w) for w in array.reshape(-1)]
    return [w for w in words if w]


def _refuse_unsupported(tensors: dict[str, np.ndarray]) -> None:
    for name, why in REFUSED.items():
        empty_prompt = name == "decoder_text_input" and name in tensors and not _words(tensors[name])
        if name in tensors and not empty_prompt:
            raise RequestError(f"{name} is not supported: {why}")
    for name, (neutral, why) in NEUTRAL.items():
        if name in tensors and _scalar(name, tensors[name]) != neutral:
            raise RequestError(f"{name} {_scalar(name, tensors[name])!r} is not supported: {why}")
    if _words(tensors.get("embedding_bias_words", np.array([]))) or tensors.get(
            "embedding_bias_weights", np.array([])).size:
        raise RequestError("embedding_bias_words and embedding_bias_weights are not supported: "
                           "no per-word logit bias")


def _min_length(tensors: dict[str, np.ndarray]) -> int | None:
    """min_tokens (TensorRT-LLM's name now) or min_length (its earlier name, which genai-perf sends)."""
    given = {name: _scalar(name, tensors[name]) for name in ("min_tokens", "min_length") if name in tensors}
    if len(set(given.values())) > 1:
        raise RequestError(f"min_tokens and min_length differ ({given['min_tokens']} vs {given['min_length']})")
    return next(iter(given.values()), None)


def generator_inputs(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The generator's inputs for one TensorRT-LLM request, each with the batch dimension of one row."""
    _refuse_unsupported(tensors)
    batch = {len(array) for array in tensors.values()}
    if batch != {1}:
        raise RequestError(f"one request per batch row: the batch dimension must be 1, got {sorted(batch)}")
    out = {name: tensors[name] for name in PASSED if name in tensors}
    min_length = _min_length(tensors)
    if min_length is not None:
        out["min_length"] = np.array([[min_length]], dtype=np.int32)
    stops = _words(tensors["stop_words"]) if "stop_words" in tensors else []
    if stops:
        out["stop_words"] = np.array([[w.encode("utf-8") for w in stops]], dtype=np.object_)
    bad = _words(tensors["bad_words"]) if "bad_words" in tensors else []
    if bad:
        out["sampling_parameters"] = np.array([[json.dumps({"bad_words": bad}).encode("utf-8")]], dtype=np.object_)
    return out


def _token_logprobs(entries: np.ndarray, count: int) -> list[float]:
    """The generator's per-token logprob JSON entries as numbers; zeros when no logprobs were asked for."""
    values = [json.loads(e)["logprob"] for e in entries.reshape(-1) if e]
    return values if values else [0.0] * count


def tensorrtllm_outputs(generated: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One generator response (batch dimension added) as TensorRT-LLM's outputs: beam 0 of row 0."""
    count = int(generated["num_output_tokens"].sum())
    logprobs = _token_logprobs(generated["logprobs"], count)

    def one(value, dtype) -> np.ndarray:
        return np.array([[value]], dtype=dtype)

    return {
        "text_output": generated["text_output"].reshape(1, -1),
        "cum_log_probs": one(float(generated["cumulative_logprob"].reshape(-1)[0]), np.float32),
        "output_log_probs": np.array([[logprobs]], dtype=np.float32),
        "batch_index": one(0, np.int32),
        "sequence_index": one(0, np.int32),
        "num_input_tokens": one(int(generated["num_input_tokens"].reshape(-1)[0]), np.int32),
        "num_output_tokens": one(count, np.int32),
        "total_draft_tokens": one(int(generated["total_draft_tokens"].reshape(-1)[0]), np.int32),
        "total_accepted_draft_tokens": one(int(generated["total_accepted_draft_tokens"].reshape(-1)[0]), np.int32),
    }
