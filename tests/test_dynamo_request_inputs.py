"""Dynamo's request (as its frontend sends it to a worker) -> the generator's inputs: sampling options, stop
conditions and output options mapped by name; OpenAI's defaults where the generator's differ; what the generator
cannot do refused by name."""

from __future__ import annotations

import json

import pytest

from tritongen.dynamo.request_inputs import generator_inputs

# What Dynamo 1.6.1's frontend sent for a chat with every option set (ids shortened).
CHAT = {"model": "generator", "token_ids": [1, 9690, 198],
        "stop_conditions": {"max_tokens": 5, "stop": None, "stop_token_ids": None, "stop_token_ids_visible": None,
                            "stop_token_ids_hidden": [2], "min_tokens": 2, "ignore_eos": None,
                            "max_thinking_tokens": None},
        "sampling_options": {"n": None, "best_of": None, "presence_penalty": 0.2, "frequency_penalty": 0.5,
                             "repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
                             "use_beam_search": None, "length_penalty": None, "seed": 3,
                             "include_stop_str_in_output": None, "guided_decoding": None},
        "output_options": {"logprobs": 2, "prompt_logprobs": None, "skip_special_tokens": None,
                           "formatted_prompt": None, "return_tokens_as_token_ids": None},
        "eos_token_ids": [2], "annotations": [], "routing": {"dp_rank": 0}}


def with_(**groups) -> dict:
    request = json.loads(json.dumps(CHAT))
    for group, values in groups.items():
        request[group].update(values)
    return request


def test_every_option_reaches_the_generator_input_of_its_name():
    inputs = generator_inputs(CHAT)
    assert inputs == {"input_ids": [1, 9690, 198], "stream": True, "temperature": 0.7, "max_tokens": 5,
                      "min_length": 2, "seed": 3, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1,
                      "frequency_penalty": 0.5, "presence_penalty": 0.2, "return_log_probs": True, "top_logprobs": 2,
                      "sampling_parameters": json.dumps({"stop_token_ids": [2]})}


def test_openai_defaults_where_the_generators_differ():
    bare = {"token_ids": [5], "stop_conditions": {}, "sampling_options": {}, "output_options": {}}
    assert generator_inputs(bare) == {"input_ids": [5], "stream": True, "temperature": 1.0}


def test_stop_token_ids_and_guides_go_as_vllm_names_them():
    request = with_(stop_conditions={"stop_token_ids": [7, 2], "stop_token_ids_visible": [9], "ignore_eos": True,
                                     "stop_token_ids_hidden": None},
                    sampling_options={"guided_decoding": {"json": {"type": "object"}, "regex": None, "backend": None}})
    inputs = generator_inputs(request)
    assert inputs["ignore_eos"] is True
    assert json.loads(inputs["sampling_parameters"]) == {"stop_token_ids": [9, 7, 2],
                                                         "guided_decoding": {"json": {"type": "object"}}}


@pytest.mark.parametrize("group, values, named", [
    ("sampling_options", {"n": 2}, "n and best_of"),
    ("sampling_options", {"use_beam_search": True}, "use_beam_search"),
    ("sampling_options", {"guided_decoding": {"structural_tag": "x"}}, "structural_tag"),
    ("output_options", {"prompt_logprobs": 1}, "prompt_logprobs"),
    ("stop_conditions", {"max_tokens": 2**31}, "max_tokens"),
    ("sampling_options", {"seed": -1}, "seed"),
])
def test_what_the_generator_cannot_take_is_refused_by_name(group, values, named):
    with pytest.raises(ValueError, match=named):
        generator_inputs(with_(**{group: values}))
