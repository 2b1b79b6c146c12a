"""One generator request over Triton gRPC streaming, token ids in and out, cancellable from outside.

Why streaming gRPC: the generator is a decoupled model, and cancelling the call is how Triton tells it that the
client went away: it stops at the next token and frees the request's KV pages. Dynamo reports a disconnect
through the worker's `abort`, while `stream` may be waiting for the next token, so a call can be cancelled by
its request id from outside the generator that reads it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype

from ..errors import EngineStopped, RequestFailed, TritongenError, from_wire
from ..request_fields import CLIENT_DTYPES

# The generator's input names -> numpy dtype (config.pbtxt's); lists become [-1] tensors.
INPUT_DTYPES = {name: triton_to_np_dtype(dtype) for name, dtype in CLIENT_DTYPES.items()}
# Only what the worker reads (the generator still detokenizes for its stop checks, but sends no text).
OUTPUTS = ("output_ids", "finish_reason", "num_input_tokens", "prefix_cache_hit_len", "logprobs")


class GeneratorError(Exception):
    """A generator error: `kind` is its type (errors.from_wire), the message its text without the code token."""

    def __init__(self, message: str, kind: type[TritongenError]):
        super().__init__(message)
        self.kind = kind


@dataclass
class Piece:
    """One generator response: the new token ids, and on the last one the finish reason."""

    token_ids: list[int]
    finish_reason: str  # "" until the last response; "cancelled" when cancelled from outside
    num_input_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV the generator reused
    logprobs: list[dict] = field(default_factory=list)  # {"id", "text", "logprob", "top": [...]}


def _tensor(name: str, value: Any) -> grpcclient.InferInput:
    values = value if isinstance(value, list) else [value]
    if INPUT_DTYPES[name] is np.object_:
        values = [v.encode("utf-8") for v in values]
    array = np.array(values, dtype=INPUT_DTYPES[name])
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def _scalar(result, name: str) -> int:
    array = result.as_numpy(name)
    return 0 if array is None else int(array.reshape(-1)[0])


def _piece(result) -> Piece:
    ids = result.as_numpy("output_ids")
    finish = result.as_numpy("finish_reason")
    logprobs = result.as_numpy("logprobs")
    return Piece(token_ids=[] if ids is None else [int(i) for i in ids.reshape(-1)],
                 finish_reason="" if finish is None or not finish.size else finish.reshape(-1)[0].decode(),
                 num_input_tokens=_scalar(result, "num_input_tokens"),
                 cached_tokens=_scalar(result, "prefix_cache_hit_len"),
                 logprobs=[] if logprobs is None else [json.loads(s) for s in logprobs.reshape(-1)])


class GeneratorStream:
    """Generator requests on one Triton server, through one shared aio gRPC channel."""

    def __init__(self, url: str, model: str = "generator"):
        self.url = url
        self.model = model
        self._client = grpcclient.InferenceServerClient(url)
        self._calls: dict[str, Any] = {}  # request id -> its open stream_infer call
        self._cancelled: set[str] = set()

    async def close(self) -> None:
        await self._client.close()

    async def wait_ready(self, timeout: float) -> None:
        """Until the generator answers ready; RuntimeError after `timeout` seconds."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                if await self._client.is_model_ready(self.model):
                    return
            except InferenceServerException:
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"the generator at {self.url} is not ready after {timeout:.0f}s")
            await asyncio.sleep(0.25)

    def cancel(self, request_id: str) -> None:
        """Cancel the open call of this request (Triton tells the generator); its stream then ends cancelled."""
        call = self._calls.get(request_id)
        if call is not None:
            self._cancelled.add(request_id)
            call.cancel()

    async def stream(self, inputs: dict[str, Any], request_id: str) -> AsyncGenerator[Piece, None]:
        """The generator's responses up to the final one; GeneratorError on an error.

        Leaving early (an exception, a cancelled task, `aclose()`) cancels the gRPC call too.
        """
        request = {"model_name": self.model, "inputs": [_tensor(k, v) for k, v in inputs.items()],
                   "outputs": [grpcclient.InferRequestedOutput(name) for name in OUTPUTS], "request_id": request_id}

        async def one_request():
            yield request

        call = self._client.stream_infer(one_request())
        self._calls[request_id] = call
        finished = False
        try:
            async for result, error in call:
                if error is not None:
                    raise await self._error(error.message())
                finished = result.get_response().parameters["triton_final_response"].bool_param
                yield _piece(result)
                if finished:
                    break
            else:
                raise GeneratorError("the generator closed the stream without a final response", RequestFailed)
            # Our request stream is closed, so Triton completes the RPC after the final response; cancelling here
            # instead races Triton's stream state.
            async for _ in call:
                pass
        except (asyncio.CancelledError, grpc.aio.AioRpcError) as exc:
            if request_id not in self._cancelled:
                raise _rpc_error(exc) if isinstance(exc, grpc.aio.AioRpcError) else exc
            yield Piece(token_ids=[], finish_reason="cancelled")
        finally:
            self._calls.pop(request_id, None)
            self._cancelled.discard(request_id)
            if not finished:
                call.cancel()

    async def _error(self, message: str) -> GeneratorError:
        """The generator's error by its code token; one without the token is Triton's own (the generator not
        loaded, or its stub gone): unavailable while the generator is not ready, else a failure."""
        if (tagged := from_wire(message)) is not None:
            return GeneratorError(tagged[1], tagged[0])
        try:
            ready = await self._client.is_model_ready(self.model)
        except InferenceServerException:
            ready = False
        return GeneratorError(message, RequestFailed if ready else EngineStopped)


def _rpc_error(exc: grpc.aio.AioRpcError) -> GeneratorError:
    detail = f"Triton gRPC stream failed: {exc.code().name}: {exc.details()}"
    return GeneratorError(detail, EngineStopped if exc.code() == grpc.StatusCode.UNAVAILABLE else RequestFailed)
