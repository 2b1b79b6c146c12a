"""GgufFile reads what gguf's own GGUFReader reads: every metadata value, every tensor's type, shape and bytes."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize

from tritongen.model_build.gguf_file import GgufFile

from conftest import smollm2_gguf


def assert_same_as_gguf_reader(path) -> None:
    reader, ours = GGUFReader(str(path)), GgufFile(path)
    assert ours.fields == {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.tensors) == [t.name for t in reader.tensors]
    for theirs in reader.tensors:
        mine = ours.tensors[theirs.name]
        assert (mine.tensor_type, mine.data.dtype, mine.data.shape) == (theirs.tensor_type, theirs.data.dtype,
                                                                        theirs.data.shape), theirs.name
        assert np.array_equal(mine.data, theirs.data), theirs.name


def test_every_value_type_and_a_quantized_tensor(tmp_path):
    path = tmp_path / "small.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_uint8("t.u8", 200)
    writer.add_int16("t.i16", -300)
    writer.add_uint32("t.u32", 70000)
    writer.add_int64("t.i64", -(1 << 40))
    writer.add_float32("t.f32", 0.1)
    writer.add_float64("t.f64", 0.1)
    writer.add_bool("t.bool", True)
    writer.add_string("t.str", "héllo")
    writer.add_array("t.strings", ["a", "", "ü" * 3])
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.5, 1.5])
    rng = np.random.default_rng(0)
    writer.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))
    writer.add_tensor("f16", rng.standard_normal((2, 4)).astype(np.float16))
    weights = rng.standard_normal((4, 64)).astype(np.float32)
    writer.add_tensor("q8", quantize(weights, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert_same_as_gguf_reader(path)
    assert GgufFile(path).fields["t.strings"] == ["a", "", "üüü"]


def test_the_shipped_smollm2_gguf():
    assert_same_as_gguf_reader(smollm2_gguf())


def test_refuses_a_file_that_is_not_gguf(tmp_path):
    path = tmp_path / "not.gguf"
    path.write_bytes(b"GGML" + bytes(60))
    with pytest.raises(ValueError, match="not a little-endian GGUF"):
        GgufFile(path)
