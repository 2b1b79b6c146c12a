# tritongen: `make demo` to see it answer, `make test` to check it.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.setup-stamp

.PHONY: setup models foreign-models train-eagle3 serve serve-openai setup-dynamo serve-dynamo demo test test-fast lint clean bench soak

setup: $(SETUP_STAMP)

$(SETUP_STAMP): pyproject.toml constraints.txt scripts/setup.sh
	scripts/setup.sh
	touch $@

# FP16=1 also builds target_gqa_fp16, for GPUs.
models: setup
	$(PY) -m tritongen.model_build $(if $(FP16),--fp16)

# SmolLM2 and tiny twins as onnxruntime-genai's builder and Optimum make them, for tests and the bench
# (converter environments .venv-genai and .venv-optimum; cached).
foreign-models: setup
	scripts/convert/build.sh

# SmolLM2's EAGLE-3 head, trained here (about 35 minutes on two cores; each stage cached under build/eagle3,
# training resumes from its checkpoint): self-distilled answers, the target's hidden taps, torch training in
# .venv-genai, float16 weights written to backend_src/tritongen/model_build/eagle3_smollm2.npz, then the
# models rebuilt from them. scripts/eagle3/ documents each stage.
EAGLE3_DATA := build/eagle3
train-eagle3: models
	scripts/convert/setup.sh
	$(PY) scripts/eagle3/data.py --out $(EAGLE3_DATA) --train 300 --heldout 32 --rounds 2
	$(PY) scripts/eagle3/features.py --data $(EAGLE3_DATA)
	.venv-genai/bin/python scripts/eagle3/train.py --data $(EAGLE3_DATA) --resume
	$(PY) -m tritongen.model_build

# MODEL=<folder> serves that model folder in place (no `make models` needed).
serve: $(if $(MODEL),setup,models)
	$(PY) -m tritongen.serve $(if $(MODEL),--model "$(MODEL)")

# The API on OPENAI_API_PORT (default 9000), Triton on the TRITON_*_PORT ports as `make serve`.
serve-openai: models
	$(PY) -m tritongen.openai_api --start-triton

# .venv-dynamo (NVIDIA Dynamo 1.6.1, its frontend and KV router, tritongen's worker) and nats-server; cached.
setup-dynamo: setup
	scripts/dynamo/setup.sh

# REPLICAS Triton servers, a Dynamo worker each, Dynamo's frontend with its KV router on DYNAMO_HTTP_PORT (8080),
# all on loopback; replica i on DYNAMO_BASE_PORT (8200) + 10 i + 0..5, nats-server on DYNAMO_NATS_PORT (4222);
# DYNAMO_ROUTER_MODE=round-robin compares; MODEL=<folder> serves that folder. Ctrl-C or SIGTERM stops it all.
REPLICAS ?= 2
serve-dynamo: $(if $(MODEL),setup,models) setup-dynamo
	$(PY) -m tritongen.dynamo.cluster --replicas $(REPLICAS) $(if $(MODEL),--model-repository "$(MODEL)")

demo: models
	$(PY) client/demo.py

# genai-perf (its own venv) for the test that profiles the ensemble with it. The foreign folders are built
# first, so a test of one fails rather than skips if it is absent (TRITONGEN_FOREIGN_REQUIRED).
test: models foreign-models setup-dynamo
	bench/genai-perf-setup.sh
	TRITONGEN_FOREIGN_REQUIRED=1 $(PY) -m pytest -q

# The engine-only suite: no tritonserver, no slow tests, no converter environments (a test of a folder
# `make foreign-models` builds skips, naming it, when that folder is absent); a minute or two.
test-fast: models
	$(PY) -m pytest -q -m "not server and not slow"

bench: models foreign-models
	bench/setup.sh
	$(PY) -m bench.run

# 32 streaming clients for 5 minutes against a loopback-only server: errors, latency, memory.
soak: models
	$(PY) -m bench.soak --duration 300 --clients 32

# Ruff on all of the Python; mypy on the tritongen package (its settings: [tool.mypy] in pyproject.toml).
lint: setup
	$(PY) -m ruff check backend_src client tests bench scripts
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .venv-genai .venv-optimum .venv-dynamo foreign_models model_repository/target model_repository/draft model_repository/target_gqa model_repository/target_gqa_int4 model_repository/target_gqa_fp16 model_repository/draft_gqa model_repository/*_head
