"""RequestSampler: the logits processors, seeded sampling and logprobs on small synthetic rows."""
import numpy as np
import pytest

from tritongen.engine.options import GenerateOptions
from tritongen.engine.sampling import RequestSampler

LOGITS = np.array([1.0, 3.0, 2.0, 0.5, -1.0, 2.5], dtype=np.float32)


def sampler(prompt=(), eos=None, vocab=None, **opts):
    opts.setdefault("greedy", False)
    return RequestSampler(
        GenerateOptions(**opts), list(prompt), vocab or LOGITS.shape[0], () if eos is None else (eos,)
    )


def kept(x):
    return set(np.flatnonzero(np.isfinite(x)).tolist())


def softmax(x):
    e = np.exp(np.asarray(x, np.float64) - np.max(x))
    return e / e.sum()


def test_greedy_is_argmax_and_ignores_temperature_filters():
    s = sampler(greedy=True, temperature=5.0, top_k=1)
    assert s.choose(LOGITS).token_id == 1
    assert sampler(greedy=False, temperature=0.0).choose(LOGITS).token_id == 1
    assert s.choose(np.array([0, 0, 9, 1], np.float32)).token_id == 2


def test_seeded_sampling_is_reproducible_and_seeds_differ():
    logits = np.zeros(50, np.float32)

    def draw(seed):
        s = sampler(seed=seed, vocab=50)
        return [s.choose(logits).token_id for _ in range(40)]

    assert draw(123) == draw(123)
    assert draw(123) != draw(124)


def test_sampling_frequencies_match_softmax_with_temperature():
    logits = np.array([0.0, 1.0, 2.0, 0.5], np.float32)
    s = sampler(temperature=0.7, seed=7, vocab=4)
    n = 20000
    counts = np.bincount([s.choose(logits).token_id for _ in range(n)], minlength=4) / n
    expected = softmax(logits / 0.7)
    assert np.abs(counts - expected).max() < 0.015
    # and it is not the untempered distribution
    assert np.abs(counts - softmax(logits)).max() > 0.05


def test_top_k_keeps_k_best():
    x = sampler(top_k=2).process(LOGITS)
    assert kept(x) == {1, 5}
    assert kept(sampler(top_k=0).process(LOGITS)) == set(range(6))
    assert kept(sampler(top_k=10).process(LOGITS)) == set(range(6))
    for _ in range(50):
        assert sampler(top_k=3).choose(LOGITS).token_id in {1, 5, 2}


def expected_top_p(logits, p):
    order = np.argsort(-softmax(logits), kind="stable")
    cum = np.cumsum(softmax(logits)[order])
    return set(order[: int(np.argmax(cum >= p)) + 1].tolist())


@pytest.mark.parametrize("p", [0.0, 0.3, 0.6, 0.8, 0.95])
def test_top_p_keeps_the_smallest_set_reaching_p(p):
    # probs of LOGITS sorted: token 1, 5, 2, 0, 3, 4
    assert kept(sampler(top_p=p).process(LOGITS)) == expected_top_p(LOGITS, p)


def test_top_p_when_more_than_512_candidates_are_needed():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 0.05, size=3000).astype(np.float32)  # nearly uniform: ~90% needs ~2700 tokens
    probs = softmax(logits)
    order = np.argsort(-probs)
    cum = np.cumsum(probs[order])
    need = 2700
    p = float((cum[need - 2] + cum[need - 1]) / 2)  # exactly `need` tokens reach p
    x = sampler(top_p=p, vocab=3000).process(logits)
    assert kept(x) == set(order[:need].tolist())
    # and fewer than 512 when the mass is concentrated
    peaked = logits.copy()
    peaked[:10] += 10
    assert kept(sampler(top_p=0.5, vocab=3000).process(peaked)) <= set(range(10))


def test_min_p_is_relative_to_the_best_probability():
    logits = np.log(np.array([0.5, 0.2, 0.04, 0.26], np.float32))
    assert kept(sampler(min_p=0.1).process(logits)) == {0, 1, 3}  # 0.04 < 0.1 * 0.5
    assert kept(sampler(min_p=0.45).process(logits)) == {0, 3}
    # relative to the tempered distribution: at T=0.5 the ratio 0.2/0.5 = 0.4 becomes 0.16
    assert kept(sampler(min_p=0.2).process(logits)) == {0, 1, 3}
    assert kept(sampler(min_p=0.2, temperature=0.5).process(logits)) == {0, 3}

def test_repetition_penalty_divides_positive_multiplies_negative_seen_only():
    logits = np.array([2.0, -2.0, 2.0, -2.0], np.float32)
    s = sampler(greedy=True, prompt=[0, 1], repetition_penalty=2.0, vocab=4)
    np.testing.assert_allclose(s.process(logits), [1.0, -4.0, 2.0, -2.0])
    s.record(2)
    np.testing.assert_allclose(s.process(logits), [1.0, -4.0, 1.0, -2.0])


def test_frequency_and_presence_penalties_count_generated_tokens_only():
    logits = np.zeros(4, np.float32)
    s = sampler(greedy=True, prompt=[3], frequency_penalty=0.5, vocab=4)
    for t in (1, 1, 2):
        s.record(t)
    np.testing.assert_allclose(s.process(logits), [0.0, -1.0, -0.5, 0.0])
    s = sampler(greedy=True, prompt=[3], presence_penalty=0.75, vocab=4)
    for t in (1, 1, 2):
        s.record(t)
    np.testing.assert_allclose(s.process(logits), [0.0, -0.75, -0.75, 0.0])
    # a penalty can change the greedy choice
    s = sampler(greedy=True, presence_penalty=5.0, vocab=6)
    assert s.choose(LOGITS).token_id == 1 and s.choose(LOGITS).token_id == 5


def test_min_length_bans_eos_until_enough_tokens():
    s = sampler(greedy=True, eos=1, min_length=2)
    assert s.choose(LOGITS).token_id == 5
    assert s.choose(LOGITS).token_id == 5
    assert s.choose(LOGITS).token_id == 1
    s = sampler(eos=1, min_length=1, seed=0, top_k=1)
    assert s.choose(LOGITS).token_id == 5


def test_process_does_not_modify_the_input_row():
    row = LOGITS.copy()
    sampler(top_k=2, top_p=0.5, temperature=0.3, repetition_penalty=1.5, prompt=[1]).process(row)
    np.testing.assert_array_equal(row, LOGITS)


def test_top_logprobs_include_chosen_and_sorted_alternatives():
    s = sampler(greedy=True, top_logprobs=3)
    c = s.choose(LOGITS)
    lp = c.logprob
    assert lp.token_id == c.token_id == 1
    ids = [i for i, _ in lp.top]
    values = [v for _, v in lp.top]
    assert ids == [1, 5, 2] and values == sorted(values, reverse=True)
    np.testing.assert_allclose(values, np.log(softmax(LOGITS))[[1, 5, 2]], atol=1e-5)
    assert lp.logprob == pytest.approx(values[0], abs=1e-6)


def test_chosen_token_outside_top_is_still_listed():
    s = sampler(top_logprobs=1, seed=1, temperature=1.0, vocab=2)
    seen_low = False
    for _ in range(200):
        lp = s.choose(np.array([0.0, 0.5], np.float32)).logprob
        assert lp.token_id in [i for i, _ in lp.top]
        assert lp.top[0][0] == 1
        seen_low |= lp.token_id == 0
    assert seen_low
    assert sampler(greedy=True, top_logprobs=0).choose(LOGITS).logprob.top == [
        (1, pytest.approx(np.log(softmax(LOGITS)[1]), abs=1e-5))
    ]


def test_logprobs_come_from_the_processed_distribution():
    s = sampler(top_k=3, temperature=0.5, top_logprobs=5, seed=3)
    lp = s.choose(LOGITS).logprob
    assert {i for i, _ in lp.top} == {1, 5, 2}  # filtered tokens are not alternatives
    assert sum(np.exp(v) for _, v in lp.top) == pytest.approx(1.0, abs=1e-5)
    expected = np.log(softmax(LOGITS[[1, 5, 2]] / 0.5))
    np.testing.assert_allclose([v for _, v in lp.top], expected, atol=1e-5)
    assert sampler(top_logprobs=None, seed=0).choose(LOGITS).logprob is None
