#!/usr/bin/env bash
# What `make bench` needs beyond `make setup`, idempotent and quick once done:
#  - the peers in .venv: the `bench` extra (onnxruntime-genai, onnx-genai), pinned in constraints.txt;
#  - genai-perf 0.0.16 in its own .venv-genai-perf (bench/genai-perf-setup.sh);
#  - with LLAMA_CPP=1, llama.cpp's llama-server and llama-quantize in build/llama.cpp (about 10 minutes once).
set -euo pipefail
cd "$(dirname "$0")/.."

stamp=.venv/.bench-stamp
if [ ! -e "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q -c constraints.txt -e '.[bench]'
  touch "$stamp"
fi

bench/genai-perf-setup.sh
if [ "${LLAMA_CPP:-0}" = 1 ]; then
  scripts/llama_cpp/build.sh
fi
gp=.venv-genai-perf
echo "bench setup: peers in .venv, genai-perf $("$gp/bin/python" -c 'from importlib.metadata import version; print(version("genai-perf"))') in $gp"
