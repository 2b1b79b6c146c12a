"""The generator settings a Dynamo worker registers, read from the `config.pbtxt` of the repository it serves.

Why from the file: Dynamo's router needs the engine's block size, page count and batch limits before the first
request, and those are the generator's own parameters, which Triton's model metadata does not carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2


@dataclass(frozen=True)
class GeneratorConfig:
    page_size: int  # tokens per KV page: Dynamo's KV block size
    num_gpu_pages: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    max_model_len: int | None
    target_model: Path  # the model folder the generator serves
    kv_events_endpoint: str  # the engine's ZMQ PUB socket; empty: no KV events
    kv_events_topic: str


def read_config(repository: Path, model: str = "generator") -> model_config_pb2.ModelConfig:
    path = Path(repository) / model / "config.pbtxt"
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def generator_config(repository: Path, model: str = "generator") -> GeneratorConfig:
    """A parameter the file leaves out is None (Dynamo then uses its own default), except the page size."""
    params = {key: value.string_value.strip() for key, value in read_config(repository, model).parameters.items()}
    if not params.get("page_size"):
        raise ValueError(f"{repository}/{model}/config.pbtxt has no page_size: the KV router needs the page size")

    def number(key: str) -> int | None:
        return int(params[key]) if params.get(key) else None

    return GeneratorConfig(
        page_size=int(params["page_size"]), num_gpu_pages=number("num_gpu_pages"),
        max_num_seqs=number("max_num_seqs"), max_num_batched_tokens=number("max_num_batched_tokens"),
        max_model_len=number("max_model_len"),
        # As the generator resolves it: a folder of the repository, or an absolute path.
        target_model=Path(repository).resolve() / (params.get("target_model") or "target_gqa"),
        kv_events_endpoint=params.get("kv_events_endpoint", ""), kv_events_topic=params.get("kv_events_topic", ""))
