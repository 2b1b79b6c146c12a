"""A model folder that lacks what serving needs fails the load with an error naming the file and what is wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig

from conftest import foreign_folder

TINY_GENAI = "tiny-genai-fp32"
TINY_OPTIMUM = "tiny-optimum-fp32"


def copy_of(name: str, tmp_path: Path) -> Path:
    """A copy of a foreign folder, to break."""
    source = foreign_folder(name)
    dest = tmp_path / source.name
    shutil.copytree(source, dest)
    return dest


def rewrite_graph(folder: Path, change) -> Path:
    path = folder / "model.onnx"
    model = onnx.load(str(path))
    change(model.graph)
    onnx.save(model, str(path))
    return path


def load_error(folder: Path) -> str:
    with pytest.raises(ValueError) as caught:
        Engine(folder, EngineConfig(max_model_len=256))
    return str(caught.value)


def test_no_tokenizer(tmp_path):
    folder = copy_of(TINY_GENAI, tmp_path)
    (folder / "tokenizer.json").unlink()
    assert "no tokenizer.json" in load_error(folder) and str(folder) in load_error(folder)


def test_no_graph_at_all(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    assert "no model found" in load_error(folder)


def test_genai_config_names_a_missing_graph(tmp_path):
    folder = copy_of(TINY_GENAI, tmp_path)
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["decoder"]["filename"] = "decoder.onnx"
    (folder / "genai_config.json").write_text(json.dumps(config))
    assert "decoder.onnx" in load_error(folder) and "does not exist" in load_error(folder)


def test_an_unknown_input(tmp_path):
    folder = copy_of(TINY_OPTIMUM, tmp_path)
    rewrite_graph(folder, lambda g: g.input.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64,
                                                                                  ["batch", "seq"])))
    error = load_error(folder)
    assert "model.onnx" in error and "token_type_ids" in error


def toy_decoder(kv_type: int, with_kv: bool = True) -> onnx.ModelProto:
    """A graph that loads in onnxruntime: constant logits, and a present that is its past."""
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "t"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["b", "s"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", 320])]
    nodes = [helper.make_node("Cast", ["input_ids"], ["c"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["c", "axes"], ["u"]),
             helper.make_node("Expand", ["u", "shape"], ["logits"])]
    if with_kv:
        for part in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.0.{part}", kv_type, ["b", 2, "p", 16]))
            outputs.append(helper.make_tensor_value_info(f"present.0.{part}", kv_type, ["b", 2, "p", 16]))
            nodes.append(helper.make_node("Identity", [f"past_key_values.0.{part}"], [f"present.0.{part}"]))
    graph = helper.make_graph(nodes, "toy", inputs, outputs,
                              [helper.make_tensor("axes", TensorProto.INT64, [1], [2]),
                               helper.make_tensor("shape", TensorProto.INT64, [3], [1, 1, 320])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_graph_without_kv_inputs(tmp_path):
    folder = copy_of(TINY_OPTIMUM, tmp_path)
    onnx.save(toy_decoder(TensorProto.FLOAT, with_kv=False), str(folder / "model.onnx"))
    error = load_error(folder)
    assert "model.onnx" in error and "past_key_values.0.key" in error


def test_an_unsupported_kv_dtype(tmp_path):
    folder = copy_of(TINY_OPTIMUM, tmp_path)
    onnx.save(toy_decoder(TensorProto.DOUBLE), str(folder / "model.onnx"))
    error = load_error(folder)
    assert "model.onnx" in error and "tensor(double)" in error and "float32 and float16" in error


def test_an_unsupported_op(tmp_path):
    folder = copy_of(TINY_OPTIMUM, tmp_path)

    def add_unknown_op(graph):
        node = graph.node[0]
        graph.node.insert(0, helper.make_node("FrobnicateAttention", [node.input[0]], ["frob"], domain="ai.example"))

    rewrite_graph(folder, add_unknown_op)
    error = load_error(folder)
    assert "model.onnx" in error and "onnxruntime cannot load" in error


def test_bad_metadata_json(tmp_path):
    folder = copy_of(TINY_OPTIMUM, tmp_path)
    (folder / "config.json").write_text("{not json")
    assert "config.json: not valid JSON" in load_error(folder)
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": "long"}))
    assert "config.json: max_position_embeddings must be a positive integer" in load_error(folder)
