"""The node walk that picks the KV layout sees exactly the operators onnx.load sees, without reading weights."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from tritongen.runtime.decoder_signature import uses_group_query_attention
from tritongen.runtime.graph_ops import graph_op_types
from tritongen.runtime.repository import onnx_path

from conftest import foreign_folder

# Inline weights (ours), external data (onnxruntime-genai's), inline Constant-heavy (Optimum's): foreign folders.
GRAPHS = {"genai-fp32": "smollm2-genai-fp32", "genai-int4": "smollm2-genai-int4",
          "optimum-fp32": "smollm2-optimum-fp32"}


def onnx_ops(path: Path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node}


@pytest.mark.parametrize("name", ["tiny-gqa", "tiny-concat", "smollm2", *GRAPHS])
def test_op_types_match_onnx_load(name, tiny_folder, tiny_concat_folder, target_gqa_folder):
    folders = {"tiny-gqa": tiny_folder, "tiny-concat": tiny_concat_folder, "smollm2": target_gqa_folder}
    path = onnx_path(folders[name]) if name in folders else foreign_folder(GRAPHS[name]) / "model.onnx"
    assert path.is_file(), f"{path} missing"
    ops = graph_op_types(path)
    assert ops == onnx_ops(path)
    assert uses_group_query_attention(path) == ("GroupQueryAttention" in ops) == (name not in ("tiny-concat",
                                                                                                  "optimum-fp32"))


@pytest.mark.parametrize("content", [b"", b"not an onnx model at all", b"\x3a\xff\xff\xff\xff\x0f"])
def test_a_file_that_is_not_a_model_is_left_to_onnxruntime(tmp_path, content, tiny_folder):
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises((ValueError, IndexError)):
        graph_op_types(path)
    assert not uses_group_query_attention(path)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(onnx_path(tiny_folder).read_bytes()[:-7])
    with pytest.raises((ValueError, IndexError)):
        graph_op_types(truncated)
