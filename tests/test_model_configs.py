"""Every config.pbtxt `make models` writes is one a stock Triton accepts: an operator may load the ONNX folders
with Triton's own ONNX Runtime backend (no machine here has that backend, so its rules are encoded here).

The rules, from triton-inference-server/core src/model_config_utils.cc, `ValidateIOShape` (quoted):
- "must specify 'name'", "must specify 'data_type'", "must specify 'dims'";
- "cannot have empty reshape for non-batching model as scalar tensors are not supported";
- "dimension must be integer >= 1, or -1 to indicate a variable-size dimension" (reshape dimensions alike);
- "has different size for dims and reshape" unless both are variable-size.
And from triton-inference-server/onnxruntime_backend src/onnxruntime.cc (its input and output validation): each
configured input and output names a graph input or output, of the same data type, and for a non-batching model
its dims match the graph's shape dimension by dimension (a graph's symbolic dimension matches -1 only); a graph
input without an initializer must be configured.
"""

from __future__ import annotations

import math

import onnx
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tritongen.runtime.repository import onnx_path, read_config

from conftest import REPOSITORY

FOLDERS = sorted(p for p in REPOSITORY.iterdir() if (p / "config.pbtxt").is_file())
ONNX_TYPES = {onnx.TensorProto.FLOAT: mc.TYPE_FP32, onnx.TensorProto.FLOAT16: mc.TYPE_FP16,
              onnx.TensorProto.INT64: mc.TYPE_INT64, onnx.TensorProto.INT32: mc.TYPE_INT32,
              onnx.TensorProto.BOOL: mc.TYPE_BOOL}


def element_count(dims: list[int]) -> int:
    """As Triton's GetElementCount: -1 when a dimension is variable, 0 for no dimensions."""
    return -1 if -1 in dims else (math.prod(dims) if dims else 0)


def shape_errors(io, max_batch_size: int) -> list[str]:
    name = io.name
    errors = []
    if not name:
        errors.append("must specify 'name'")
    if io.data_type == mc.TYPE_INVALID:
        errors.append(f"'{name}' must specify 'data_type'")
    if len(io.dims) == 0:
        errors.append(f"'{name}' must specify 'dims'")
    if io.HasField("reshape") and len(io.reshape.shape) == 0 and max_batch_size == 0:
        errors.append(f"'{name}' cannot have empty reshape for non-batching model as scalar tensors are not supported")
    if any(d < 1 and d != -1 for d in io.dims):
        errors.append(f"'{name}' dimension must be integer >= 1, or -1")
    if io.HasField("reshape"):
        if any(d < 1 and d != -1 for d in io.reshape.shape):
            errors.append(f"'{name}' reshape dimensions must be integer >= 1, or -1")
        dims, reshape = element_count(list(io.dims)), element_count(list(io.reshape.shape))
        if dims != reshape and (reshape != 0 or dims != 1):  # an empty reshape takes dims of one element
            errors.append(f"'{name}' has different size for dims and reshape")
    return errors


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_every_input_and_output_passes_tritons_shape_rules(folder):
    config = read_config(folder)
    errors = [e for io in [*config.input, *config.output] for e in shape_errors(io, config.max_batch_size)]
    assert not errors, f"{folder.name}/config.pbtxt: {errors}"


ONNX_FOLDERS = [f for f in FOLDERS if read_config(f).platform == "onnxruntime_onnx"]


@pytest.mark.parametrize("folder", ONNX_FOLDERS, ids=[f.name for f in ONNX_FOLDERS])
def test_onnx_folders_match_their_graph_as_the_onnxruntime_backend_checks(folder):
    config = read_config(folder)
    graph = onnx.load(str(onnx_path(folder)), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    graph_inputs = {i.name: i for i in graph.input if i.name not in initializers}
    graph_outputs = {o.name: o for o in graph.output}
    assert {i.name for i in config.input} == set(graph_inputs), f"{folder.name}: configured inputs differ"
    for io, declared in [*((i, graph_inputs.get(i.name)) for i in config.input),
                         *((o, graph_outputs.get(o.name)) for o in config.output)]:
        assert declared is not None, f"{folder.name}: '{io.name}' is not in the graph"
        tensor = declared.type.tensor_type
        assert ONNX_TYPES[tensor.elem_type] == io.data_type, f"{folder.name}: '{io.name}' data type"
        graph_dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        assert list(io.dims) == graph_dims, f"{folder.name}: '{io.name}' dims {list(io.dims)} vs graph {graph_dims}"
