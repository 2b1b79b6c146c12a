#!/usr/bin/env bash
# llama.cpp's llama-server and llama-quantize for the bench's CPU peer, built from the llama.cpp that the
# llama-cpp-python sdist vendors (fetched through pip's configured index). Slow (about 10 minutes on two
# cores), so opt-in: bench/setup.sh calls it only with LLAMA_CPP=1. Cached under build/llama.cpp, keyed on
# the pinned version and this script.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=0.3.36
out=build/llama.cpp
want="$version $(sha256sum "$0" | cut -c1-16)"
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$want" ] && [ -x "$out/bin/llama-server" ]; then
  echo "llama.cpp: cached in $out (llama-cpp-python $version)"
  exit 0
fi
start=$(date +%s)
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$version"
tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >"$work/cmake.log"
cmake --build "$work/build" -j2 --target llama-server llama-quantize >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; exit 1; }
mkdir -p "$out/bin"
cp "$work/build/bin/llama-server" "$work/build/bin/llama-quantize" "$out/bin/"
echo "$want" > "$out/.stamp"
echo "llama.cpp: llama-server and llama-quantize (llama-cpp-python $version) in $out/bin in $(( $(date +%s) - start ))s"
