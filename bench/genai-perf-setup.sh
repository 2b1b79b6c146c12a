#!/usr/bin/env bash
# genai-perf 0.0.16 in its own .venv-genai-perf (it needs numpy 2, pandas, transformers), pinned in
# bench/genai-perf-constraints.txt; idempotent and quick once done. It runs perf_analyzer 2.51 from .venv.
# Used by bench/setup.sh and by `make test` (tests/test_ensemble.py runs genai-perf against the ensemble).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
gp=.venv-genai-perf
if [ ! -e "$gp/.bench-stamp" ] || [ bench/genai-perf-constraints.txt -nt "$gp/.bench-stamp" ]; then
  [ -x "$gp/bin/python" ] || "$PYTHON" -m venv "$gp"
  echo '*' > "$gp/.gitignore"  # keep it out of git, as Python 3.13's venv does by itself
  "$gp/bin/python" -m pip install -q --upgrade "pip==26.3"
  "$gp/bin/python" -m pip install -q -c bench/genai-perf-constraints.txt "genai-perf==0.0.16"
  touch "$gp/.bench-stamp"
fi
