#!/usr/bin/env bash
# Serve the repository with the control APIs locked: model loading and unloading, shared-memory
# registration, trace and log settings answer only requests carrying the operator header
# (tritongen-operator-key over HTTP, triton-grpc-protocol-tritongen-operator-key over gRPC).
# The key is TRITONGEN_OPERATOR_KEY, or a fresh one written to /run/tritongen/operator-key (owner-only).
# Inside the container every interface listens; publishing a port is the operator's decision.
set -euo pipefail
key=${TRITONGEN_OPERATOR_KEY:-}
if [ -z "$key" ]; then
  umask 077
  mkdir -p /run/tritongen
  key=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
  printf '%s\n' "$key" > /run/tritongen/operator-key
  echo "operator key written to /run/tritongen/operator-key" >&2
fi
guarded="model-repository,shared-memory,trace,logging:tritongen-operator-key=$key"
exec tritonserver --model-repository="${MODEL_REPOSITORY:-/opt/tritongen/model_repository}" \
  --model-control-mode=explicit --load-model=generator \
  --http-address=0.0.0.0 --grpc-address=0.0.0.0 --metrics-address=0.0.0.0 \
  --http-restricted-api="$guarded" --grpc-restricted-protocol="$guarded" "$@"
