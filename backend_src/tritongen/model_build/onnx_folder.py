"""Write one ONNX model folder of the repository: model, config.pbtxt, tokenizer, Hugging Face config.json."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
from google.protobuf import text_format

from ..runtime.config_proto import model_config_pb2 as mc
from .tokenizer_files import write_tokenizer_folder

_DTYPES = {onnx.TensorProto.FLOAT: mc.TYPE_FP32, onnx.TensorProto.INT64: mc.TYPE_INT64,
           onnx.TensorProto.INT32: mc.TYPE_INT32, onnx.TensorProto.FLOAT16: mc.TYPE_FP16}


def _dims(value_info: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value if d.HasField("dim_value") else -1 for d in value_info.type.tensor_type.shape.dim]


def triton_config(name: str, model: onnx.ModelProto) -> str:
    """A valid onnxruntime-backend config, so an operator may also load the folder on its own: on a GPU for a
    graph that takes float16 (built for GPUs; on CPUs its matmuls are slower than float32), else on the CPU."""
    cfg = mc.ModelConfig(name=name, platform="onnxruntime_onnx", max_batch_size=0)
    for vi in model.graph.input:
        cfg.input.add(name=vi.name, data_type=_DTYPES[vi.type.tensor_type.elem_type], dims=_dims(vi))
    for vi in model.graph.output:
        cfg.output.add(name=vi.name, data_type=_DTYPES[vi.type.tensor_type.elem_type], dims=_dims(vi))
    fp16 = any(vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for vi in model.graph.input)
    cfg.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_GPU if fp16 else mc.ModelInstanceGroup.KIND_CPU)
    return text_format.MessageToString(cfg)


def write_model_folder(folder: Path, model: onnx.ModelProto, tokenizer_json: dict, settings: dict,
                       hf_config: dict) -> None:
    version_dir = folder / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(version_dir / "model.onnx"))
    (folder / "config.pbtxt").write_text(triton_config(folder.name, model), encoding="utf-8")
    write_tokenizer_folder(folder, tokenizer_json, settings)
    (folder / "config.json").write_text(json.dumps(hf_config, indent=1), encoding="utf-8")
