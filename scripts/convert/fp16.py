"""An fp32 ONNX folder -> an fp16 one, inputs and outputs included (KV in fp16), with onnxconverter-common
(run in .venv-optimum)."""

import shutil
import sys
from pathlib import Path

import onnx
from onnxconverter_common import float16

src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
for f in src.iterdir():
    if f.is_file() and not f.name.startswith("model.onnx"):
        shutil.copy(f, out / f.name)
model = float16.convert_float_to_float16(onnx.load(str(src / "model.onnx")), keep_io_types=False)
onnx.save(model, str(out / "model.onnx"), save_as_external_data=True, location="model.onnx_data")
print(f"fp16: {out}")
