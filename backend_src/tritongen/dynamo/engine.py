"""tritongen's generator as a Dynamo `LLMEngine`: Dynamo's worker runtime drives it, Triton serves the model.

Why Dynamo's unified backend (`dynamo.common.backend`): its Worker registers the model (token ids in, chat and
completions), serves the endpoint, watches for disconnects (then calls `abort`), relays the engine's own KV
events from a ZMQ source, and publishes the load snapshots it is handed; this class only says what to register
and turns one request into one generator stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from dynamo.common.backend.engine import EngineConfig, LLMEngine, LlmRegistration
from dynamo.common.backend.publisher import ZmqSource
from dynamo.common.backend.worker import WorkerConfig
from dynamo.common.utils.token_ids import normalize_request_token_ids
from dynamo.llm import ModelInput
from dynamo.llm.exceptions import HttpError, InvalidArgument

from ..errors import EngineOverloaded, EngineStopped, InvalidOption, SessionBusy
from .generator_config import GeneratorConfig, generator_config
from .load_relay import relay_load
from .request_inputs import generator_inputs
from .triton_stream import GeneratorError, GeneratorStream, Piece
from .worker_args import WorkerOptions, parser, worker_options

log = logging.getLogger(__name__)
# The generator's finish reasons -> Dynamo's (which the frontend maps to OpenAI's).
FINISH_REASONS = {"max_tokens": "length", "length": "length", "eos_token": "stop", "cancelled": "cancelled"}


class TritongenEngine(LLMEngine):
    def __init__(self, options: WorkerOptions):
        self.options = options
        self.config: GeneratorConfig = generator_config(options.repository)
        self.model_path = options.model_path or self.config.target_model
        self.triton: GeneratorStream | None = None
        self._load: asyncio.Task | None = None
        self._publisher: Any = None

    @classmethod
    async def from_args(cls, argv: list[str] | None = None) -> tuple[TritongenEngine, WorkerConfig]:
        """The engine and where the Worker registers it: token ids in (the frontend tokenizes), chat and completions."""
        args = parser().parse_args(argv)
        engine = cls(worker_options(args))
        config = WorkerConfig(namespace=args.namespace, component=args.component, endpoint="generate",
                              model_name=str(engine.model_path), served_model_name=args.served_model_name,
                              model_input=ModelInput.Tokens, endpoint_types="chat,completions",
                              discovery_backend=args.discovery_backend, request_plane=args.request_plane,
                              event_plane=args.event_plane)
        return engine, config

    async def start(self, worker_id: int) -> EngineConfig:
        del worker_id
        self.triton = GeneratorStream(self.options.triton_url)
        await self.triton.wait_ready(self.options.ready_timeout)
        self._load = asyncio.get_running_loop().create_task(self._relay_load())
        config = self.config
        return EngineConfig(
            model=str(self.model_path), served_model_name=self.options.served_model_name,
            llm=LlmRegistration(context_length=self._context_length(), kv_cache_block_size=config.page_size,
                                total_kv_blocks=config.num_gpu_pages, max_num_seqs=config.max_num_seqs,
                                max_num_batched_tokens=config.max_num_batched_tokens))

    def _context_length(self) -> int | None:
        """The generator's cap, within the model's own context (as the engine bounds a sequence)."""
        card = self.model_path / "config.json"
        own = json.loads(card.read_text(encoding="utf-8")).get("max_position_embeddings") if card.is_file() else None
        lengths = [n for n in (self.config.max_model_len, own) if n]
        return min(lengths) if lengths else None

    async def kv_event_sources(self) -> list[ZmqSource]:
        """The generator's own KV events, relayed by Dynamo from its ZMQ PUB socket; none when it publishes none."""
        if not self.config.kv_events_endpoint:
            log.warning("the generator publishes no KV events (kv_events_endpoint is empty): "
                        "the KV router can only guess which prefixes this replica holds")
            return []
        return [ZmqSource(endpoint=self.config.kv_events_endpoint, topic=self.config.kv_events_topic)]

    def component_metrics_dp_ranks(self) -> list[int]:
        return [0]

    def attach_snapshot_publisher(self, publisher: Any) -> None:
        self._publisher = publisher

    async def _relay_load(self) -> None:
        while self._publisher is None:  # the Worker hands it over after start()
            await asyncio.sleep(0.1)
        await relay_load(self.options.metrics_url, self.config.num_gpu_pages or 0, self._publisher)

    async def generate(self, request, context):
        """One generator stream; each response's new token ids as one chunk, the last with finish and usage."""
        assert self.triton is not None, "generate() before start()"
        normalize_request_token_ids(request)
        try:
            inputs = generator_inputs(request)
        except (ValueError, TypeError) as exc:
            raise InvalidArgument(str(exc)) from None
        completion = 0
        try:
            async for piece in self.triton.stream(inputs, context.id()):
                completion += len(piece.token_ids)
                yield _chunk(piece, len(inputs["input_ids"]), completion)
        except GeneratorError as exc:
            raise _dynamo_error(exc) from None

    async def abort(self, context) -> None:
        if self.triton is not None:
            self.triton.cancel(context.id())

    async def cleanup(self) -> None:
        if self._load is not None:
            self._load.cancel()
            self._load = None
        if self.triton is not None:
            await self.triton.close()
            self.triton = None


def _chunk(piece: Piece, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    chunk: dict[str, Any] = {"token_ids": piece.token_ids, "index": 0}
    if piece.logprobs:
        chunk["log_probs"] = [p["logprob"] for p in piece.logprobs]
        chunk["top_logprobs"] = [[{"rank": rank, "token_id": t["id"], "token": t["text"], "logprob": t["logprob"]}
                                  for rank, t in enumerate(p["top"], 1)] for p in piece.logprobs]
    if piece.finish_reason:
        chunk["finish_reason"] = FINISH_REASONS.get(piece.finish_reason, "stop")  # stop_sequence:N is a stop
        chunk["completion_usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                     "total_tokens": prompt_tokens + completion_tokens,
                                     "prompt_tokens_details": {"cached_tokens": piece.cached_tokens}}
    return chunk


def _dynamo_error(exc: GeneratorError) -> Exception:
    """As tritongen's OpenAI API answers: 400 and 409 for the request's fault, 429 overloaded, 503 not serving,
    else 500."""
    if exc.kind is InvalidOption:
        return InvalidArgument(str(exc))
    if exc.kind is SessionBusy:
        return HttpError(409, str(exc))
    if exc.kind is EngineOverloaded:
        return HttpError(429, "the generator is overloaded; retry later")
    if exc.kind is EngineStopped:
        log.warning("generator unavailable: %s", exc)
        return HttpError(503, "the generator is unavailable; retry later")
    log.error("generator failed: %s", exc)
    return RuntimeError("the generator failed to complete the request")
