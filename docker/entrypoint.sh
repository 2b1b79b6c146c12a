#!/usr/bin/env bash
# Serve the repository with the control APIs locked: model loading and unloading, shared-memory
# registration, trace and log settings answer only requests carrying the operator header
# (tritongen-operator-key over HTTP, triton-grpc-protocol-tritongen-operator-key over gRPC).
# The key is TRITONGEN_OPERATOR_KEY, or a fresh one written to /run/tritongen/operator-key (owner-only).
# Inside the container every interface listens; publishing a port is the operator's decision.
# MODEL=<folder> serves that model folder in place (ours, onnxruntime-genai's, Optimum's or the hub layout,
# MODEL_VARIANT picking the hub layout's graph), with the speculative folders that DRAFT_MODEL, MTP_HEAD,
# EAGLE3_HEAD and SHARED_KV_HEAD name (unset or empty: that mode off); with MODEL empty, MODEL_REPOSITORY is
# served as it is. With OPENAI_API_PORT set (9000, say) the OpenAI-compatible API runs beside it on that port,
# bound to loopback unless OPENAI_API_HOST says otherwise, with TRITONGEN_API_KEY as its key when set.
set -euo pipefail
key=${TRITONGEN_OPERATOR_KEY:-}
if [ -z "$key" ]; then
  umask 077
  mkdir -p /run/tritongen
  key=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
  printf '%s\n' "$key" > /run/tritongen/operator-key
  echo "operator key written to /run/tritongen/operator-key" >&2
fi
built=/opt/tritongen/model_repository
repository=${MODEL_REPOSITORY:-$built}
if [ "${MODEL:-}" = "$built/target_gqa_fp16" ]; then
  # The image's SmolLM2: the heads built beside it that read its hidden state (cast to float32). Not the shared-KV
  # assistant (it reads the target's KV as it is, and was built for float32 KV) nor the draft model (fp32: its
  # attention would fall back to the CPU).
  export MTP_HEAD=${MTP_HEAD-$built/mtp_head} EAGLE3_HEAD=${EAGLE3_HEAD-$built/eagle3_head}
fi
if [ -n "${MODEL:-}" ]; then
  repository=$(python3 -c 'import os, sys; from tritongen.serve import SPECULATIVE_FOLDERS, folder_repository
heads = {key: os.environ[key.upper()] for key in SPECULATIVE_FOLDERS if os.environ.get(key.upper())}
print(folder_repository(sys.argv[1], sys.argv[2], heads))' "$MODEL" "${MODEL_VARIANT:-}")
fi
# TensorRT-LLM's ensemble beside the generator where the repository has it (its steps load with it).
models=(--load-model=generator)
if [ -f "$repository/ensemble/config.pbtxt" ]; then models+=(--load-model=ensemble); fi
guarded="model-repository,shared-memory,trace,logging:tritongen-operator-key=$key"
if [ -n "${OPENAI_API_PORT:-}" ]; then  # it answers 503 until the generator is ready
  python3 -m tritongen.openai_api --triton-url 127.0.0.1:8001 --port "$OPENAI_API_PORT" &
fi
# --metrics-interval-ms as serve.py sets it: Triton's exit waits for its metrics thread's sleep (half the interval).
exec tritonserver --model-repository="$repository" \
  --model-control-mode=explicit "${models[@]}" --disable-auto-complete-config --metrics-interval-ms=200 \
  --http-address=0.0.0.0 --grpc-address=0.0.0.0 --metrics-address=0.0.0.0 \
  --http-restricted-api="$guarded" --grpc-restricted-protocol="$guarded" "$@"
