"""One generator request over Triton gRPC streaming, as an async stream of pieces.

Why streaming gRPC even for non-streaming OpenAI requests: the generator is a
decoupled model, and cancelling the gRPC call is how Triton tells it that a
client went away — it then stops at the next token and frees the request's
KV pages. Every stream opened here is cancelled when its consumer stops early.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype

from ..errors import EngineStopped, RequestFailed, from_wire
from ..request_fields import CLIENT_DTYPES
from .errors import OpenAIError, from_generator, unavailable

# The generator's input names -> numpy dtype (config.pbtxt's); lists become [-1] tensors.
INPUT_DTYPES = {name: triton_to_np_dtype(dtype) for name, dtype in CLIENT_DTYPES.items()}


@dataclass
class Piece:
    """One generator response: new text and ids, and on the last one the finish reason."""

    text: str
    token_ids: list[int]
    finish_reason: str  # "" until the last response
    num_input_tokens: int
    num_output_tokens: int
    logprobs: list[dict] = field(default_factory=list)  # {"id", "text", "logprob", "top": [...]}


def _tensor(name: str, value: Any) -> grpcclient.InferInput:
    dtype = INPUT_DTYPES[name]
    values = value if isinstance(value, list) else [value]
    if dtype is np.object_:
        values = [v.encode("utf-8") for v in values]
    array = np.array(values, dtype=dtype)
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def _strings(result, name: str) -> list[str]:
    array = result.as_numpy(name)
    return [] if array is None else [v.decode("utf-8") for v in array.reshape(-1)]


def _piece(result) -> Piece:
    ids = result.as_numpy("output_ids")
    finish = _strings(result, "finish_reason")
    num_input = result.as_numpy("num_input_tokens")
    num_output = result.as_numpy("num_output_tokens")
    return Piece(text="".join(_strings(result, "text_output")),
                 token_ids=[] if ids is None else [int(i) for i in ids.reshape(-1)],
                 finish_reason=finish[0] if finish else "",
                 num_input_tokens=0 if num_input is None else int(num_input.reshape(-1)[0]),
                 num_output_tokens=0 if num_output is None else int(num_output.reshape(-1).sum()),
                 logprobs=[json.loads(s) for s in _strings(result, "logprobs")])


class GeneratorClient:
    """Talks to one Triton model (the generator) through one shared aio gRPC channel."""

    def __init__(self, url: str, model: str = "generator"):
        self.url = url
        self.model = model
        self._client = grpcclient.InferenceServerClient(url)

    async def close(self) -> None:
        await self._client.close()

    async def is_ready(self) -> bool:
        try:
            return await self._client.is_model_ready(self.model)
        except InferenceServerException:
            return False

    async def stream(self, inputs: dict[str, Any], request_id: str = "") -> AsyncGenerator[Piece, None]:
        """Yield the generator's responses until the FINAL one; raise OpenAIError on an error.

        Leaving early (an exception, a cancelled task, `aclose()`) cancels the
        gRPC call, which Triton reports to the generator as a cancellation.
        """
        tensors = [_tensor(name, value) for name, value in inputs.items() if value is not None]

        async def one_request():
            yield {"model_name": self.model, "inputs": tensors, "request_id": request_id}

        try:
            responses = self._client.stream_infer(one_request())
        except InferenceServerException as exc:
            raise unavailable(f"cannot reach Triton at {self.url}: {exc.message()}") from None
        finished = False
        try:
            async for result, error in responses:
                if error is not None:
                    raise await self._error(error.message())
                final = result.get_response().parameters["triton_final_response"].bool_param
                if final:
                    finished = True  # set before yielding: a consumer may stop at the last piece
                yield _piece(result)
                if final:
                    break
            else:
                raise OpenAIError(500, "the generator failed to complete the request",
                                  detail="the generator closed the stream without a final response")
            # Let the call end by itself: our request stream is closed, so Triton completes the
            # RPC after the final response. Cancelling here instead races Triton's stream state.
            async for _ in responses:
                pass
        except grpc.aio.AioRpcError as exc:
            detail = f"Triton gRPC stream failed: {exc.code().name}: {exc.details()}"
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise unavailable(detail) from None
            raise OpenAIError(500, "the generator failed to complete the request", detail=detail) from None
        finally:
            if not finished:
                responses.cancel()

    async def _error(self, message: str) -> OpenAIError:
        """The generator's error by its code token; one without the token is Triton's own (the generator not
        loaded, or its stub gone): unavailable while the generator is not ready, else a failure."""
        kind, text = from_wire(message) or (RequestFailed if await self.is_ready() else EngineStopped, message)
        return from_generator(kind, text, message)
