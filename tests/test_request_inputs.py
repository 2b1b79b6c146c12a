"""parse_request: Triton tensors + parameters -> GenerateRequest (docs/contract.md)."""
import json

import numpy as np
import pytest

from tritongen.engine.options import GenerateOptions, InvalidOption
from tritongen.triton.request_inputs import RequestError, named_error, parse_request
from tritongen.triton.request_limits import RequestLimits


def s(text):  # a STRING input as Triton gives it: object array of bytes, shape [1]
    return np.array([text.encode() if isinstance(text, str) else text], dtype=np.object_)


def chat(messages):
    return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"


def parse(tensors=None, parameters=None, defaults=None, sampling=None, prompt="Hello"):
    tensors = dict(tensors or {})
    if prompt is not None and not any(k in tensors for k in ("text_input", "input_ids", "messages")):
        tensors["text_input"] = s(prompt)
    if sampling is not None:
        tensors["sampling_parameters"] = s(json.dumps(sampling))
    return parse_request(tensors, parameters or {}, defaults or {}, chat)


def error(*args, **kwargs):
    """What a client is told when the parser, or the engine's option validation (named as the client spells
    the field), refuses the request."""
    try:
        parsed = parse(*args, **kwargs)
        parsed.request.options.validate()
    except RequestError as exc:
        return str(exc)
    except InvalidOption as exc:
        return str(named_error(exc, parsed))
    raise AssertionError("the request was accepted")


def test_defaults_without_options_are_the_seed_defaults():
    p = parse()
    d = GenerateOptions()
    o = p.request.options
    assert p.request.prompt == "Hello" and p.prompt_text == "Hello"
    assert (o.max_new_tokens, o.greedy, o.top_k, o.top_p, o.seed, o.stop_sequences, o.stop_on_eos) == (
        d.max_new_tokens, True, 0, 1.0, None, [], True)
    assert o.top_logprobs is None
    assert (p.mode.stream, p.mode.exclude_input_in_output) == (False, False)


def test_precedence_tensor_then_sampling_parameters_then_parameter_then_default():
    t = {"max_tokens": np.array([5], np.int32)}
    both = dict(sampling={"max_tokens": 6}, parameters={"max_tokens": 7}, defaults={"max_tokens": 8})
    assert parse(t, **both).request.options.max_new_tokens == 5
    assert parse(**both).request.options.max_new_tokens == 6
    assert parse(parameters={"max_tokens": 7}, defaults={"max_tokens": 8}).request.options.max_new_tokens == 7
    assert parse(defaults={"max_tokens": 8}).request.options.max_new_tokens == 8
    # the same chain for a float option
    o = parse({"temperature": np.array([0.25], np.float32)}, sampling={"temperature": 0.5},
              parameters={"temperature": 0.75}).request.options
    assert o.temperature == pytest.approx(0.25) and o.greedy is False
    assert parse(sampling={"temperature": 0.5}, parameters={"temperature": 0.75}).request.options.temperature == 0.5


def test_numbers_given_as_strings():
    o = parse(
        sampling={"max_tokens": "16", "top_p": "0.5", "top_k": "3"}, parameters={"temperature": "0.5"}
    ).request.options
    assert (o.max_new_tokens, o.top_p, o.top_k, o.temperature, o.greedy) == (16, 0.5, 3, 0.5, False)
    assert parse(parameters={"stream": "true", "exclude_input_in_output": "1"}).mode == parse(
        {"stream": np.array([True]), "exclude_input_in_output": np.array([True])}).mode


def test_seed_given_as_string_keeps_every_digit():
    # A seed is a u64; a string must not go through float (2**53 + 1 would become 2**53).
    assert parse(sampling={"seed": "9007199254740993"}).request.options.seed == 9007199254740993
    assert parse(parameters={"seed": str(2**64 - 1)}).request.options.seed == 2**64 - 1


def test_non_numbers_are_rejected_by_name():
    assert "max_tokens" in error(sampling={"max_tokens": "many"})
    assert "max_tokens" in error(parameters={"max_tokens": "1.5"})
    assert "temperature" in error(parameters={"temperature": "hot"})
    assert "ignore_eos" in error(sampling={"ignore_eos": "maybe"})


def test_unknown_keys_are_named():
    msg = error(sampling={"max_tokens": 4, "beam_width": 3, "lookahead": 2})
    assert "lookahead" in msg and "beam_width" in msg and "sampling_parameters" in msg
    msg = error(parameters={"frobnicate": 1})
    assert "frobnicate" in msg
    assert parse(parameters={"triton_enable_empty_final_response": True}).request.prompt == "Hello"


def test_sampling_parameters_not_json_or_not_object():
    assert "sampling_parameters" in error({"sampling_parameters": s("{max_tokens: 3")})
    assert "sampling_parameters" in error({"sampling_parameters": s("[1, 2]")})


def test_prompt_inputs():
    assert "prompt" in error(prompt=None) and "text_input" in error(prompt=None)
    msg = error({"text_input": s("a"), "input_ids": np.array([1, 2], np.int64)})
    assert "text_input" in msg and "input_ids" in msg
    assert "text_input" in error({"text_input": s("")})
    assert "text_input" in error({"text_input": s(b"\xff\xfeab")})
    assert "input_ids" in error({"input_ids": np.array([], np.int64)})
    p = parse({"input_ids": np.array([3, 4, 5], np.int64)})
    assert p.request.prompt == [3, 4, 5] and p.prompt_text is None
    p = parse({"text_input": s("héllo 世界")})
    assert p.request.prompt == "héllo 世界"


def test_messages_rendered_with_the_chat_template():
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    p = parse({"messages": s(json.dumps(msgs))})
    assert p.request.prompt == p.prompt_text == "system:be brief|user:hi|assistant:"


@pytest.mark.parametrize("raw", ["not json", '{"role": "user", "content": "hi"}', "[]", '[{"content": "hi"}]',
                                 '[{"role": "user", "content": 3}]', '["hi"]'])
def test_bad_messages(raw):
    assert "messages" in error({"messages": s(raw)})


@pytest.mark.parametrize("value", [-0.5, "nan", "inf"])
def test_bad_temperature(value):
    assert "temperature" in error(parameters={"temperature": value})


def test_temperature_zero_is_greedy_and_positive_samples():
    assert parse(sampling={"temperature": 0}).request.options.greedy is True
    o = parse(sampling={"temperature": 0.7}).request.options
    assert o.greedy is False and o.temperature == 0.7
    o = parse(sampling={"temperature": 0.7, "seed": 3}).request.options
    assert o.seed == 3


def test_top_k():
    assert parse(sampling={"top_k": -1}).request.options.top_k == 0
    assert parse(sampling={"top_k": 0}).request.options.top_k == 0
    assert parse(sampling={"top_k": 40}).request.options.top_k == 40
    assert "top_k" in error(sampling={"top_k": -2})


def test_other_option_errors_name_the_field():
    assert "max_tokens" in error(sampling={"max_tokens": 0})
    assert "max_tokens" in error({"max_tokens": np.array([-3], np.int32)})
    assert "top_p" in error(sampling={"top_p": -0.1})
    assert "min_p" in error(sampling={"min_p": 1.5})
    assert "repetition_penalty" in error(sampling={"repetition_penalty": 0})
    assert "min_length" in error({"min_length": np.array([-1], np.int32)})
    assert "seed" in error(sampling={"seed": -1})


def test_seed_and_random_seed():
    t = {"seed": np.array([7], np.uint64), "random_seed": np.array([8], np.uint64)}
    msg = error(t)
    assert "seed" in msg and "random_seed" in msg
    t = {"seed": np.array([7], np.uint64), "random_seed": np.array([7], np.uint64)}
    assert parse(t).request.options.seed == 7
    assert parse({"random_seed": np.array([2**64 - 1], np.uint64)}).request.options.seed == 2**64 - 1


def test_min_length_and_min_tokens_alias():
    assert parse(sampling={"min_tokens": 4}).request.options.min_length == 4
    assert parse({"min_length": np.array([2], np.int32)}, sampling={"min_tokens": 4}).request.options.min_length == 2


def test_stop_order_stop_words_then_stop_then_token_ids():
    t = {"stop_words": np.array([b"END", b"\n\n"], dtype=np.object_)}
    o = parse(t, sampling={"stop": ["###", "Q:"], "stop_token_ids": [2, 7]}).request.options
    assert o.stop_sequences == ["END", "\n\n", "###", "Q:", (2,), (7,)]
    assert parse(sampling={"stop": "x"}).request.options.stop_sequences == ["x"]
    assert parse(parameters={"stop": ["p"]}).request.options.stop_sequences == ["p"]
    # sampling_parameters.stop wins over a request parameter stop
    assert parse(sampling={"stop": ["s"]}, parameters={"stop": ["p"]}).request.options.stop_sequences == ["s"]


def test_bad_stops():
    assert "stop" in error({"stop_words": np.array([b"ok", b""], dtype=np.object_)})
    assert "stop" in error(sampling={"stop": ["a", ""]})
    assert "stop" in error(sampling={"stop": [1, 2]})
    assert "stop_token_ids" in error(sampling={"stop_token_ids": ["2"]})


def test_logprobs():
    assert parse({"return_log_probs": np.array([True])}).request.options.top_logprobs == 0
    assert (
        parse(
            {"return_log_probs": np.array([True]), "top_logprobs": np.array([5], np.int32)}
        ).request.options.top_logprobs
        == 5
    )
    assert parse(sampling={"logprobs": 20}).request.options.top_logprobs == 20
    assert "top_logprobs" in error({"top_logprobs": np.array([21], np.int32)})
    assert "logprobs" in error(sampling={"logprobs": 21})
    assert parse({"return_log_probs": np.array([False])}).request.options.top_logprobs is None


def test_ignore_eos_and_end_id():
    assert parse({"ignore_eos": np.array([True])}).request.options.stop_on_eos is False
    assert parse(sampling={"ignore_eos": True}).request.options.stop_on_eos is False
    assert parse(sampling={"ignore_eos": False}).request.options.stop_on_eos is True
    assert parse({"end_id": np.array([42], np.int32)}).request.options.eos_token_id == 42


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("exclude", [False, True])
def test_response_modes(stream, exclude):
    t = {"stream": np.array([stream]), "exclude_input_in_output": np.array([exclude])}
    mode = parse(t).mode
    assert (mode.stream, mode.exclude_input_in_output) == (stream, exclude)


def test_stream_interval_per_request():
    assert parse().mode.stream_interval is None  # the generator's setting applies
    assert parse({"stream_interval": np.array([4], np.int32)}).mode.stream_interval == 4
    assert parse(parameters={"stream_interval": "3"}).mode.stream_interval == 3
    assert "stream_interval must be at least 1, got 0" in error(parameters={"stream_interval": 0})
    assert "stream_interval" in error(parameters={"stream_interval": "often"})


def test_scalar_tensor_with_two_values_is_rejected():
    assert "max_tokens" in error({"max_tokens": np.array([1, 2], np.int32)})


def test_float_options_reach_the_request():
    o = parse(sampling={"top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.1, "frequency_penalty": 0.5,
                        "presence_penalty": -0.25}).request.options
    assert (o.top_p, o.min_p, o.repetition_penalty, o.frequency_penalty, o.presence_penalty) == (
        0.9,
        0.05,
        1.1,
        0.5,
        -0.25,
    )


def test_sizes_are_checked_before_the_chat_is_rendered_or_anything_tokenized():
    rendered = []
    render = lambda messages: rendered.append(messages) or "x"  # noqa: E731
    limits = RequestLimits(max_prompt_bytes=1000)
    big_chat = json.dumps([{"role": "user", "content": "y" * 2000}]).encode()
    with pytest.raises(
        RequestError, match=r"messages is \d+ bytes, over the limit of 1000 \(generator setting max_prompt_bytes\)"
    ):
        parse_request({"messages": np.array([big_chat], np.object_)}, {}, {}, render, limits)
    with pytest.raises(RequestError, match="text_input is 2000 bytes"):
        parse_request({"text_input": np.array([b"z" * 2000], np.object_)}, {}, {}, render, limits)
    with pytest.raises(RequestError, match="input_ids has 300 tokens but the context holds 256"):
        parse_request({"input_ids": np.ones(300, np.int64)}, {}, {}, render, RequestLimits(context=256))
    assert rendered == []  # and parse_request never tokenizes: the engine does, after it
    parse_request({"messages": np.array([b'[{"role": "user", "content": "hi"}]'], np.object_)}, {}, {}, render, limits)
    assert len(rendered) == 1  # the spy works


def test_tools_and_chat_template_kwargs_reach_the_template():
    seen = {}

    def render(messages, **kwargs):
        seen.update(kwargs)
        return "rendered"

    chat = np.array([b'[{"role": "user", "content": "hi"}]'], np.object_)
    tools = np.array([b'[{"type": "function", "function": {"name": "now"}}]'], np.object_)
    parse_request({"messages": chat, "tools": tools,
                   "chat_template_kwargs": np.array([b'{"enable_thinking": false}'], np.object_)}, {}, {}, render)
    assert seen == {"tools": [{"type": "function", "function": {"name": "now"}}], "enable_thinking": False}
    with pytest.raises(RequestError, match="chat_template_kwargs may not set messages"):
        parse_request({"messages": chat, "chat_template_kwargs": np.array([b'{"messages": []}'], np.object_)}, {}, {},
                      render)
    with pytest.raises(RequestError, match="tools must be a JSON list"):
        parse_request({"messages": chat, "tools": np.array([b'{"a": 1}'], np.object_)}, {}, {}, render)


def test_vllm_keys_we_do_not_implement_pass_at_their_default_only():
    parsed = parse(sampling={"n": 1, "best_of": None, "use_beam_search": False, "prompt_logprobs": None,
                             "lora_name": None, "spaces_between_special_tokens": True})
    assert parsed.request.prompt == "Hello"
    for key, value in (("n", 2), ("best_of", 3), ("use_beam_search", True), ("lora_name", "sql-lora"),
                       ("spaces_between_special_tokens", False)):
        assert f"sampling_parameters.{key}" in error(sampling={key: value}) and "vLLM's default" in error(
            sampling={key: value})


def test_vllm_sampling_keys_we_honour():
    options = parse(sampling={"skip_special_tokens": False, "include_stop_str_in_output": True,
                              "logit_bias": {"12": 5, 7: -100.0}}).request.options
    assert not options.skip_special_tokens and options.include_stop_str_in_output
    assert options.logit_bias == {12: 5.0, 7: -100.0}
    assert "logit_bias[3]" in error(sampling={"logit_bias": {"3": 101}})
    assert "max_logit_bias" in error(sampling={"logit_bias": {str(i): 1 for i in range(301)}})
    assert parse(sampling={"bad_words": ["no", "never"]}).bad_words == ["no", "never"]
    assert "max_bad_words" in error(sampling={"bad_words": ["w"] * 65})


def test_structured_outputs_and_gbnf_grammars():
    constraint = parse(sampling={"structured_outputs": json.dumps(
        {"json": None, "regex": "[0-9]+", "choice": None, "grammar": None, "json_object": None,
         "disable_fallback": False, "whitespace_pattern": None})}).request.options.constraint
    assert (constraint.kind, constraint.text) == ("regex", "[0-9]+")
    gbnf = parse(sampling={"guided_decoding": {"grammar": 'root ::= "yes" | "no"'}}).request.options.constraint
    assert gbnf.kind == "lark" and "start:" in gbnf.text
    ebnf = parse({"guided_decoding_guide_type": s("ebnf_grammar"),
                  "guided_decoding_guide": s('root ::= [0-9]+')}).request.options.constraint
    assert ebnf.kind == "lark" and "start:" in ebnf.text
    assert "not a GBNF or Lark grammar" in error(sampling={"guided_decoding": {"grammar": "root ::= ("}})
    assert "structured_outputs or guided_decoding" in error(sampling={"guided_decoding": {"regex": "a"},
                                                                      "structured_outputs": {"regex": "b"}})
