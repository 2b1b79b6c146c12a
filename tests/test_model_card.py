"""Every model folder yields a Hugging Face config.json: written by `make models`, derived for onnxruntime-genai's
folders (which have none), and put with the tokenizer files in a model card folder of its own."""

from __future__ import annotations

import json

import onnxruntime as ort
import pytest

from tritongen.model_build.__main__ import VARIANTS
from tritongen.runtime.model_card import hf_config, write_model_card
from tritongen.runtime.model_folder import locate
from tritongen.runtime.tokenizer import TextTokenizer

from conftest import REPOSITORY, foreign_folder


def graph_numbers(onnx_file) -> dict:
    """Layers, KV heads and head size as the graph's KV inputs declare them."""
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    kv = [i for i in session.get_inputs() if i.name.startswith("past_key_values.") and i.name.endswith(".key")]
    return {"num_hidden_layers": len(kv), "num_key_value_heads": kv[0].shape[1], "head_dim": kv[0].shape[3]}


def test_the_tiny_build_writes_a_config_that_matches_its_graph(tiny_folder):
    config = json.loads((tiny_folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    for key, value in graph_numbers(locate(tiny_folder).onnx_file).items():
        assert config[key] == value, key
    assert config["vocab_size"] == TextTokenizer(tiny_folder).vocab_size
    generation = json.loads((tiny_folder / "generation_config.json").read_text())
    assert config["eos_token_id"] == generation["eos_token_id"]
    assert config["max_position_embeddings"] == generation["max_position_embeddings"]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_built_decoder_has_its_own_layer_count(name):
    config = json.loads((REPOSITORY / name / "config.json").read_text())
    dropped = VARIANTS[name][0]
    assert config["num_hidden_layers"] == 30 - len(dropped)
    assert (config["num_key_value_heads"], config["head_dim"], config["vocab_size"]) == (3, 64, 49152)
    assert config["torch_dtype"] == "float32"


@pytest.mark.parametrize("name", ["tiny-genai-fp32", "smollm2-genai-int4"])
def test_a_builder_folder_gets_a_config_derived_from_genai_config(name, tmp_path):
    folder = foreign_folder(name)
    assert (folder / "genai_config.json").is_file(), f"{folder} has no genai_config.json"
    assert not (folder / "config.json").exists()  # the builder writes none: it must be derived
    model = json.loads((folder / "genai_config.json").read_text())["model"]
    config = hf_config(folder)
    assert config["num_hidden_layers"] == model["decoder"]["num_hidden_layers"]
    assert config["vocab_size"] == model["vocab_size"] == TextTokenizer(folder).vocab_size
    assert config["head_dim"] == model["decoder"]["head_size"]
    card = write_model_card(folder, tmp_path / "card")
    assert json.loads((card / "config.json").read_text()) == config
    assert (card / "tokenizer.json").resolve() == (folder / "tokenizer.json").resolve()
    template = json.loads((card / "tokenizer_config.json").read_text()).get("chat_template")
    assert template and "im_start" in template  # the chat template travels with the card, whichever file held it
    assert not (folder / "config.json").exists()  # the served folder is never written


def test_an_optimum_folder_keeps_its_own_config(tmp_path):
    folder = foreign_folder("tiny-optimum-fp32")
    assert (folder / "config.json").is_file(), f"{folder} has no config.json"
    assert hf_config(folder) == json.loads((folder / "config.json").read_text())


def test_a_folder_with_no_configuration_is_refused_by_name(tmp_path):
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {"type": "llama", "decoder": {}}}))
    with pytest.raises(ValueError, match="missing model.vocab_size.*decoder.hidden_size"):
        hf_config(tmp_path)
    with pytest.raises(ValueError, match="neither config.json nor genai_config.json"):
        hf_config(tmp_path / "absent")
