"""The Python steps of the `ensemble` model: TensorRT-LLM's tensors into the generator's, and each of the
generator's responses back into TensorRT-LLM's outputs. Triton's ensemble scheduler runs the generator
between them and carries its stream: the outputs step runs once per streamed response."""

from __future__ import annotations

import json
import traceback

import triton_python_backend_utils as pb_utils

from .request_limits import RequestError
from .tensorrtllm_tensors import generator_inputs, tensorrtllm_outputs

# The steps' own names for the generator's tensors (an input and an output of one model never share a name).
PREFIX = "gen_"


def _inputs(request, names: list[str]) -> dict:
    tensors = {}
    for name in names:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is not None:
            tensors[name] = tensor.as_numpy()
    return tensors


def _answer(requests, input_names: list[str], convert) -> list:
    """One response per request: `convert` of its tensors, or an error naming the field."""
    responses = []
    for request in requests:
        try:
            outputs = convert(_inputs(request, input_names))
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, array) for name, array in outputs.items()]))
        except RequestError as exc:
            responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        except Exception:  # noqa: BLE001 - our bug, not the client's: logged, never shown to the client
            pb_utils.Logger.log_error(f"a TensorRT-LLM step failed: {traceback.format_exc()}")
            responses.append(pb_utils.InferenceResponse(
                error=pb_utils.TritonError("internal error; the server log has the details")))
    return responses


class _Step:
    def initialize(self, args: dict) -> None:
        self.input_names = [i["name"] for i in json.loads(args["model_config"])["input"]]


class TensorrtllmInputs(_Step):
    """TensorRT-LLM's inputs -> the generator's, as outputs named gen_<generator input>."""

    def execute(self, requests):
        return _answer(requests, self.input_names,
                       lambda tensors: {PREFIX + k: v for k, v in generator_inputs(tensors).items()})


class TensorrtllmOutputs(_Step):
    """One generator response, its outputs as inputs named gen_<generator output> -> TensorRT-LLM's outputs."""

    def execute(self, requests):
        return _answer(requests, self.input_names,
                       lambda tensors: tensorrtllm_outputs({k.removeprefix(PREFIX): v for k, v in tensors.items()}))
