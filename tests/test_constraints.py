"""Constrained decoding in-process, on the seeded tiny model: fast checks of the engine's logic.

Compile errors come before any token; EOS only where the output is
complete; logprobs on the constrained distribution; constrained and
unconstrained requests in one batch; a max_tokens cut is reported and is
never counted valid. Also: each suite case's validator (jsonschema, re,
lark) agrees with what llguidance enforces, on hand-written samples.
The suite itself runs on SmolLM2 through Triton in test_constraints_server.py.
"""

from __future__ import annotations

import json
import math
import queue
import re
import threading

import numpy as np
import pytest
from support.engine_probes import record_decode_groups

from tritongen.engine.engine import Engine
from tritongen.engine.options import FinishReason, GenerateConstraint, GenerateOptions, GenerateRequest
from tritongen.triton.request_inputs import RequestError, parse_request

from constraint_suite import SUITE, Case, judge

DIGITS = "[0-9]{2,4}"


@pytest.fixture(scope="module")
def tiny(tiny_folder):
    engine = Engine(tiny_folder)
    yield engine
    engine.close()


def run_all(engine: Engine, requests: list[GenerateRequest]) -> tuple[list, list[int]]:
    """Submit together; results in order, and the request ids.

    The first request's first token holds the engine thread until every request is
    submitted, so they all join the running batch at the same step.
    """
    done: queue.Queue = queue.Queue()
    submitted = threading.Event()
    gate = lambda token: submitted.wait(timeout=30)  # noqa: E731 - runs on the engine thread
    ids = [engine.submit(r, on_token=gate if i == 0 else None,
                         on_done=lambda res, err, i=i: done.put((i, res, err))).request_id
           for i, r in enumerate(requests)]
    submitted.set()
    results = [None] * len(requests)
    for _ in requests:
        i, res, err = done.get(timeout=120)
        assert err is None, err
        results[i] = res
    return results, ids


BAD_CONSTRAINTS = [
    ("json_schema", '{"type": "object", "properties": '),  # not JSON
    ("json_schema", '{"type": "object", "properties": {"a": {"type": "strin"}}}'),  # unknown type
    ("json_schema", '{"type": "integer", "minimum": 5, "maximum": 1}'),  # empty range
    ("regex", "[0-9"),
    ("regex", "(ab|cd"),
    ("lark", "start: missing_rule"),
    ("lark", 'start: ("a"'),
    ("lark", "this is not a grammar"),
]


@pytest.mark.parametrize("kind, text", BAD_CONSTRAINTS)
def test_invalid_constraint_is_an_error_before_any_token(tiny, kind, text):
    tokens, done = [], []
    request = GenerateRequest("hello", GenerateOptions(max_new_tokens=8, constraint=GenerateConstraint(kind, text)))
    with pytest.raises(ValueError, match=f"invalid {kind} constraint"):
        tiny.submit(request, on_token=tokens.append, on_done=lambda r, e: done.append((r, e)))
    assert tokens == [] and done == []
    ok = tiny.generate(GenerateRequest("hello", GenerateOptions(max_new_tokens=3, stop_on_eos=False)))
    assert len(ok.token_ids) == 3


@pytest.mark.parametrize("guided, field", [
    ({"regex": "[0-9"}, "regex"),
    ({"choice": []}, "choice"),
    ({"choice": "yes"}, "choice"),
    ({"regex": "[0-9]", "choice": ["a"]}, "exactly one"),
    ({"xml": "<a/>"}, "xml"),
])
def test_guided_decoding_errors_name_the_field(tiny, guided, field):
    """Errors from parse_request itself, or from compiling in submit: both before any token."""
    sampling = json.dumps({"guided_decoding": guided})
    tensors = {"text_input": np.array([b"hi"], dtype=object),
               "sampling_parameters": np.array([sampling.encode()], dtype=object)}
    with pytest.raises((RequestError, ValueError), match=field):
        parsed = parse_request(tensors, {}, {}, tiny.tokenizer.render_chat)
        tiny.submit(parsed.request)


def test_eos_only_where_the_output_is_complete(tiny):
    """At every step EOS is allowed exactly when the text so far is a full match, and every allowed token fits."""
    eos = tiny.tokenizer.eos_token_id
    for seed in range(6):
        options = GenerateOptions(max_new_tokens=12, greedy=False, temperature=1.5, seed=seed, top_logprobs=20,
                                  constraint=GenerateConstraint("regex", DIGITS))
        result = tiny.generate(GenerateRequest("Numbers 0123456789", options))
        assert result.finish_reason == FinishReason.EOS_TOKEN
        assert re.fullmatch(DIGITS, result.text), result.text
        for k, lp in enumerate(result.logprobs):
            done = tiny.tokenizer.decode(result.token_ids[:k])
            allowed = [i for i, p in lp.top if math.isfinite(p)]
            assert (eos in allowed) == bool(re.fullmatch(DIGITS, done)), (seed, k, done)
            for i in allowed:
                if i != eos:
                    grown = done + tiny.tokenizer.decode([i])
                    assert re.fullmatch("[0-9]{1,4}", grown), (seed, k, repr(grown))
            # Fewer than 20 tokens are allowed here, so the top list is the whole constrained distribution.
            assert len(allowed) < 20 and math.isclose(sum(math.exp(p) for p in (q for _, q in lp.top)), 1, rel_tol=1e-4)


def test_greedy_constraint_forces_eos_when_complete(tiny):
    options = GenerateOptions(max_new_tokens=20, top_logprobs=3, constraint=GenerateConstraint.choice(["yes", "no"]))
    result = tiny.generate(GenerateRequest("Is water wet?", options))
    assert result.text in ("yes", "no") and result.finish_reason == FinishReason.EOS_TOKEN
    last = result.logprobs[-1]
    assert last.token_id == tiny.tokenizer.eos_token_id and last.logprob == 0.0 and len(last.top) == 1


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_logprobs_are_on_the_constrained_distribution(tiny, temperature):
    """Constrain the first token to 3 tokens the model ranks highly: their logprobs are renormalised over those 3."""
    prompt = "The capital of France is"
    free = tiny.generate(GenerateRequest(prompt, GenerateOptions(max_new_tokens=1, stop_on_eos=False, top_logprobs=20)))
    raw = {}
    for i, p in free.logprobs[0].top:
        text = tiny.tokenizer.decode([i])
        if len(text) == 1 and text.isascii() and text.isalnum():
            raw[text] = (i, p)
    assert len(raw) >= 3, raw
    picked = sorted(raw, key=lambda t: -raw[t][1])[:3]
    # Single characters: the only tokens that begin one of these choices are the three tokens themselves.
    options = GenerateOptions(max_new_tokens=4, top_logprobs=20, constraint=GenerateConstraint.choice(picked),
                              greedy=temperature == 0.0, temperature=temperature or 1.0, seed=7)
    result = tiny.generate(GenerateRequest(prompt, options))
    assert result.text in picked and result.finish_reason == FinishReason.EOS_TOKEN
    scaled = {t: raw[t][1] / (temperature or 1.0) for t in picked}
    norm = math.log(sum(math.exp(v) for v in scaled.values()))
    expected = {raw[t][0]: scaled[t] - norm for t in picked}
    first = result.logprobs[0]
    assert {i for i, _ in first.top} == set(expected)
    for i, p in first.top:
        assert p == pytest.approx(expected[i], abs=1e-4)
    assert first.logprob == pytest.approx(expected[first.token_id], abs=1e-4)
    if temperature == 0.0:
        assert result.text == picked[0]


def test_constrained_and_unconstrained_share_a_batch(tiny):
    prompts = ["Hello world", "def add(a, b):", "The capital of France", "Numbers 0123456789"]
    plain = [GenerateRequest(p, GenerateOptions(max_new_tokens=24, stop_on_eos=False)) for p in prompts]
    plain_sampled = [GenerateRequest(p, GenerateOptions(max_new_tokens=24, stop_on_eos=False, greedy=False,
                                                        temperature=1.0, seed=11)) for p in prompts[:2]]
    # No free whitespace: the random tiny model would otherwise pad the object with spaces up to max_new_tokens.
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 999},
                                               "s": {"type": "string", "maxLength": 8}},
              "required": ["n", "s"], "additionalProperties": False, "x-guidance": {"whitespace_flexible": False}}
    cases = [Case("digits", "regex", "", pattern="[0-9]{6,10}"), Case("obj", "json_schema", "", schema=schema),
             Case("yn", "choice", "", choices=("yes", "no"))]
    constrained = [GenerateRequest(p, GenerateOptions(max_new_tokens=60, constraint=c.constraint(), greedy=g,
                                                      temperature=1.0, seed=5))
                   for p, c, g in zip(prompts * 2, cases * 2, (True, True, True, False, False, False))]
    alone = [tiny.generate(r).token_ids for r in plain + plain_sampled + constrained[3:]]
    mixed = plain + plain_sampled + constrained
    order = [4, 6, 0, 9, 3, 7, 1, 10, 5, 8, 2, 11]  # interleaved
    groups = record_decode_groups(tiny)
    results, ids = run_all(tiny, [mixed[i] for i in order])
    by_index = {order[k]: (results[k], ids[k]) for k in range(len(order))}
    plain_ids = {by_index[i][1] for i in range(6)}
    constrained_ids = {by_index[i][1] for i in range(6, 12)}
    assert any(plain_ids & set(step) and constrained_ids & set(step) for step in groups)
    for i in range(6):  # unconstrained rows: exactly what they produce without the constrained ones beside them
        assert by_index[i][0].token_ids == alone[i], f"unconstrained request {i} changed"
    for k in range(6):
        result = by_index[6 + k][0]
        assert result.finish_reason == FinishReason.EOS_TOKEN, (k, result.text)
        assert cases[k % 3].validate(result.text) is None, (k, result.text)
    for k in range(3, 6):  # seeded constrained rows: the same tokens as alone
        assert by_index[6 + k][0].token_ids == alone[6 + k - 3]


def test_max_tokens_cut_is_reported_and_never_valid(tiny):
    case = Case("long_digits", "regex", "", pattern="[0-9]{1,40}")
    options = GenerateOptions(max_new_tokens=3, constraint=case.constraint(), greedy=False, temperature=1.0, seed=3)
    result = tiny.generate(GenerateRequest("Numbers 0123456789", options))
    assert result.finish_reason == FinishReason.MAX_TOKENS and len(result.token_ids) == 3
    # The cut text happens to match the pattern; it still does not count as a valid, finished output.
    assert case.validate(result.text) is None
    outcome = judge(case, 1.0, 3, str(result.finish_reason), result.text, len(result.token_ids))
    assert not outcome.natural and not outcome.valid
    # The same through the suite's other kinds: a cut JSON object is reported as cut, not as invalid.
    cut = judge(SUITE[0], 0.0, None, "max_tokens", '{"name": "Al')
    assert (cut.natural, cut.valid, cut.error) == (False, False, None)


def _llguidance_accepts(engine: Engine, case: Case, text: str) -> bool:
    compiler = engine.constraint_compiler()
    matcher = compiler.compile(case.constraint())
    tokens = compiler.tokenizer.tokenize_str(text)
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()


@pytest.mark.parametrize("case", [c for c in SUITE if c.good or c.bad], ids=lambda c: c.name)
def test_validator_agrees_with_the_enforced_constraint(tiny, case):
    """The lark package's grammar (and re, jsonschema) accept and reject what llguidance does."""
    for text in case.good:
        assert case.validate(text) is None, (text, case.validate(text))
        assert _llguidance_accepts(tiny, case, text), f"llguidance rejects {text!r}"
    for text in case.bad:
        assert case.validate(text) is not None, f"validator accepts {text!r}"
        assert not _llguidance_accepts(tiny, case, text), f"llguidance accepts {text!r}"


def test_suite_is_large_and_compiles(tiny):
    kinds = [c.kind for c in SUITE]
    assert len(SUITE) >= 30 and len({c.name for c in SUITE}) == len(SUITE)
    counts = {k: kinds.count(k) for k in set(kinds)}
    assert counts == {"json_schema": 15, "regex": 10, "lark": 5, "choice": 3, "json": 2}
    compiler = tiny.constraint_compiler()
    for case in SUITE:
        compiler.compile(case.constraint())


def test_min_length_does_not_pad_a_complete_constraint_with_eos(tiny):
    from tritongen.engine.options import GenerateConstraint, GenerateOptions, GenerateRequest

    options = GenerateOptions(max_new_tokens=20, min_length=10, constraint=GenerateConstraint.choice(["yes", "no"]))
    result = tiny.generate(GenerateRequest("Answer:", options))
    assert result.text in ("yes", "no") and result.finish_reason.kind == "eos_token"
    assert result.token_ids.count(tiny.tokenizer.eos_token_id) <= 1


def test_grammars_compile_within_llguidance_limits(tiny, monkeypatch):
    """The limits reach llguidance: shrink one and a grammar over it is a compile error, not a slow compile."""
    import tritongen.engine.constraints as constraints

    grammar = GenerateConstraint("lark", "start: " + " | ".join(f'"w{i}"' for i in range(100)))
    tiny.constraint_compiler().compile(grammar)  # fine within the shipped limits
    monkeypatch.setattr(constraints, "LIMITS", {**constraints.LIMITS, "max_grammar_size": 50})
    with pytest.raises(ValueError, match="grammar size"):
        tiny.constraint_compiler().compile(grammar)
