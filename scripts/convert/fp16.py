"""An fp32 ONNX folder -> an fp16 one, inputs and outputs included (KV and logits in fp16), with onnxruntime's
own float16 converter (run in .venv-optimum). onnxconverter-common's leaves the Cast nodes of Optimum's
RMSNorm typed for float32 and the graph does not load."""

import shutil
import sys
from pathlib import Path

import onnx
from onnxruntime.transformers.onnx_model import OnnxModel

src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
for f in src.iterdir():
    if f.is_file() and not f.name.startswith("model.onnx"):
        shutil.copy(f, out / f.name)
model = OnnxModel(onnx.load(str(src / "model.onnx")))
model.convert_float_to_float16(keep_io_types=False, use_symbolic_shape_infer=True)
onnx.save(model.model, str(out / "model.onnx"), save_as_external_data=True, location="model.onnx_data")
print(f"fp16: {out}")
