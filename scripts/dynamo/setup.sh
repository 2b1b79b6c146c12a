#!/usr/bin/env bash
# The Dynamo environment: .venv-dynamo runs NVIDIA Dynamo's frontend (HTTP, chat template, tokenizer, KV router)
# and tritongen's Dynamo workers; nats-server (Debian's) carries Dynamo's event plane on loopback. The product's
# .venv never imports Dynamo. Packages come from requirements.txt with --no-deps (see why there); tritongen
# itself is installed editable, also with --no-deps: the worker imports only the standard library, tritonclient,
# numpy and dynamo. Idempotent: the venv is rebuilt only when requirements.txt or this script changes.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
venv=.venv-dynamo
req=scripts/dynamo/requirements.txt
stamp=$venv/.stamp

if ! command -v nats-server >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "dynamo: please install the Debian package nats-server (needs root)" >&2
  else
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends nats-server </dev/null >/dev/null \
      || { apt-get update </dev/null >/dev/null && apt-get install -y --no-install-recommends nats-server </dev/null >/dev/null; }
  fi
fi

want=$(cat "$req" scripts/dynamo/setup.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$venv"
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade "pip==26.3" 2> >(grep -v "^WARNING: Location" >&2)
"$venv/bin/python" -m pip install -q --no-deps -r "$req" 2> >(grep -v "^WARNING: Location" >&2)
"$venv/bin/python" -m pip install -q --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
echo "$want" > "$stamp"
echo "dynamo: $venv ready ($(du -sh "$venv" | cut -f1))"
