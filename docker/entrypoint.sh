#!/usr/bin/env bash
# Serve the repository with the control APIs locked: model loading and unloading, shared-memory
# registration, trace and log settings answer only requests carrying the operator header
# (tritongen-operator-key over HTTP, triton-grpc-protocol-tritongen-operator-key over gRPC).
# The key is TRITONGEN_OPERATOR_KEY, or a fresh one written to /run/tritongen/operator-key (owner-only).
# Inside the container every interface listens; publishing a port is the operator's decision.
# MODEL=<folder> serves that model folder in place (ours, onnxruntime-genai's, Optimum's or the hub layout,
# MODEL_VARIANT picking the hub layout's graph); with MODEL empty, MODEL_REPOSITORY is served as it is.
set -euo pipefail
key=${TRITONGEN_OPERATOR_KEY:-}
if [ -z "$key" ]; then
  umask 077
  mkdir -p /run/tritongen
  key=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
  printf '%s\n' "$key" > /run/tritongen/operator-key
  echo "operator key written to /run/tritongen/operator-key" >&2
fi
repository=${MODEL_REPOSITORY:-/opt/tritongen/model_repository}
if [ -n "${MODEL:-}" ]; then
  repository=$(python3 -c 'import sys; from tritongen.serve import folder_repository
print(folder_repository(sys.argv[1], sys.argv[2]))' "$MODEL" "${MODEL_VARIANT:-}")
fi
guarded="model-repository,shared-memory,trace,logging:tritongen-operator-key=$key"
exec tritonserver --model-repository="$repository" \
  --model-control-mode=explicit --load-model=generator --disable-auto-complete-config \
  --http-address=0.0.0.0 --grpc-address=0.0.0.0 --metrics-address=0.0.0.0 \
  --http-restricted-api="$guarded" --grpc-restricted-protocol="$guarded" "$@"
