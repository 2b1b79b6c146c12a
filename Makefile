# tritongen: `make demo` to see it answer, `make test` to check it.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.setup-stamp

.PHONY: setup models foreign-models serve serve-openai demo test test-fast lint clean bench soak

setup: $(SETUP_STAMP)

$(SETUP_STAMP): pyproject.toml constraints.txt scripts/setup.sh
	scripts/setup.sh
	touch $@

models: setup
	$(PY) -m tritongen.model_build

# SmolLM2 and tiny twins as onnxruntime-genai's builder and Optimum make them, for tests and the bench
# (converter environments .venv-genai and .venv-optimum; cached).
foreign-models: setup
	scripts/convert/build.sh

# MODEL=<folder> serves that model folder in place (no `make models` needed).
serve: $(if $(MODEL),setup,models)
	$(PY) -m tritongen.serve $(if $(MODEL),--model "$(MODEL)")

serve-openai: models
	$(PY) -m tritongen.openai_api --start-triton

demo: models
	$(PY) client/demo.py

test: setup foreign-models
	$(PY) -m pytest -q

# The engine-only suite: no tritonserver, no slow tests (a minute or two).
test-fast: setup foreign-models
	$(PY) -m pytest -q -m "not server and not slow"

bench: models foreign-models
	bench/setup.sh
	$(PY) -m bench.run

# 32 streaming clients for 5 minutes against a loopback-only server: errors, latency, memory.
soak: models
	$(PY) -m bench.soak --duration 300 --clients 32

# Ruff on all of the Python; mypy on the tritongen package (its settings: [tool.mypy] in pyproject.toml).
lint: setup
	$(PY) -m ruff check backend_src client tests bench
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .venv-genai .venv-optimum foreign_models model_repository/target model_repository/draft model_repository/target_gqa model_repository/target_gqa_int4 model_repository/draft_gqa model_repository/*_head
