#!/usr/bin/env bash
# What `make bench` needs beyond `make setup`, idempotent and quick once done:
#  - the peers in .venv: the `bench` extra (onnxruntime-genai, onnx-genai), pinned in constraints.txt;
#  - genai-perf 0.0.16 in its own .venv-genai-perf (it needs numpy 2, pandas, transformers), pinned in
#    bench/genai-perf-constraints.txt. It runs perf_analyzer 2.51 from .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

stamp=.venv/.bench-stamp
if [ ! -e "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q -c constraints.txt -e '.[bench]'
  touch "$stamp"
fi

gp=.venv-genai-perf
if [ ! -e "$gp/.bench-stamp" ] || [ bench/genai-perf-constraints.txt -nt "$gp/.bench-stamp" ]; then
  [ -x "$gp/bin/python" ] || "$PYTHON" -m venv "$gp"
  echo '*' > "$gp/.gitignore"  # keep it out of git, as Python 3.13's venv does by itself
  "$gp/bin/python" -m pip install -q --upgrade "pip==26.3"
  "$gp/bin/python" -m pip install -q -c bench/genai-perf-constraints.txt "genai-perf==0.0.16"
  touch "$gp/.bench-stamp"
fi
echo "bench setup: peers in .venv, genai-perf $("$gp/bin/python" -c 'from importlib.metadata import version; print(version("genai-perf"))') in $gp"
