#!/usr/bin/env bash
# The converter environments: heavy tools that only make foreign model folders for tests and the bench
# (the product never imports them). Two, because onnxruntime-genai's builder needs transformers 5 and
# optimum-onnx needs transformers < 4.58. torch 2.13.0 is the CPU build (an unpinned torch would
# download a CUDA build of several GB). Idempotent: each venv is rebuilt only when its pins change.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
for name in genai optimum; do
  venv=.venv-$name
  req=scripts/convert/requirements-$name.txt
  stamp=$venv/.stamp
  want=$(sha256sum "$req" | cut -c1-16)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    continue
  fi
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade "pip==26.3" 2> >(grep -v "^WARNING: Location" >&2)
  "$venv/bin/python" -m pip install -q -r "$req" 2> >(grep -v "^WARNING: Location" >&2)
  echo "$want" > "$stamp"
  echo "convert: $venv ready ($(du -sh "$venv" | cut -f1))"
done
