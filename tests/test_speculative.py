"""Speculative decoding: the verifier keeps greedy output identical, rollback is real, sampling stays lossless."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from tritongen.engine.engine import Engine
from tritongen.engine.options import EngineConfig, FinishReason, GenerateOptions, GenerateRequest, SchedulerConfig
from tritongen.speculative.modes import SpeculativeMode
from tritongen.speculative.proposer import Proposal, Proposer

K = 4
LOOKUP = SpeculativeMode("prompt_lookup", ngram=2, max_tokens=K)
PLAIN = SpeculativeMode("none")


class OracleProposer(Proposer):
    """Right for the first `right` tokens of each proposal (from a reference run), then wrong."""

    def __init__(self, reference: list[int], prompt_len: int, right: int, vocab: int):
        self.reference, self.prompt_len, self.right, self.vocab = reference, prompt_len, right, vocab
        self.calls = 0

    def propose(self, seq, k):
        self.calls += 1
        done = seq.num_generated
        truth = self.reference[done:done + k]
        out = truth[: self.right] + [(t + 1) % self.vocab for t in truth[self.right:]]
        return Proposal(out[:k]) if out else None


def engine_with_oracle(folder, oracle) -> Engine:
    engine = Engine(folder)
    engine.speculation.proposers["prompt_lookup"] = oracle
    return engine


@pytest.mark.parametrize("right", [0, 1, K - 1, K])
def test_oracle_rollback_keeps_greedy_output(tiny_folder, right):
    prompt = "The capital of France is"
    base = Engine(tiny_folder)
    try:
        reference = base.generate(GenerateRequest(prompt, GenerateOptions(max_new_tokens=40, stop_on_eos=False)))
    finally:
        base.close()
    ids = reference.token_ids
    # A stop token first seen mid-way, so the stop lands inside some accepted run.
    stop = next(t for i, t in enumerate(ids) if i >= 17 and t not in ids[:i])
    cases = [
        (GenerateOptions(max_new_tokens=40, stop_on_eos=False), None),
        (GenerateOptions(max_new_tokens=23, stop_on_eos=False), FinishReason.MAX_TOKENS),
        (
            GenerateOptions(max_new_tokens=40, stop_on_eos=False, stop_sequences=[(stop,)]),
            FinishReason.stop_sequence(0),
        ),
    ]
    for options, expected_reason in cases:
        plain = Engine(tiny_folder)
        try:
            want = plain.generate(GenerateRequest(prompt, options))
        finally:
            plain.close()
        oracle = OracleProposer(reference.token_ids, 0, right, 320)
        spec = engine_with_oracle(tiny_folder, oracle)
        try:
            options.speculative_mode, options.num_speculative_tokens = LOOKUP, K
            got = spec.generate(GenerateRequest(prompt, options))
        finally:
            spec.close()
        assert got.token_ids == want.token_ids and got.text == want.text
        assert got.finish_reason == want.finish_reason
        if expected_reason is not None:
            assert got.finish_reason == expected_reason
        assert got.total_draft_tokens > 0
        assert got.total_accepted_draft_tokens <= got.total_draft_tokens
        if right == K:
            assert got.total_accepted_draft_tokens >= got.total_draft_tokens // 2
        if right == 0:
            assert got.total_accepted_draft_tokens == 0


def solo_and_batch(engine: Engine, requests):
    solo = [engine.generate(r).token_ids for r in requests]
    done: queue.Queue = queue.Queue()
    for i, r in enumerate(requests):
        engine.submit(r, on_done=lambda res, err, i=i: done.put((i, res, err)))
    batch = [None] * len(requests)
    for _ in requests:
        i, res, err = done.get(timeout=600)
        assert err is None, err
        batch[i] = res
    return solo, batch


HEAD_KINDS = ("mtp", "eagle3", "shared_kv")


@pytest.fixture(scope="module")
def tiny_heads(tiny_folder):
    """Seeded MTP, EAGLE-3 and shared-KV heads for the tiny target, beside it in its repository."""
    from tritongen.model_build.head_folders import write_heads, write_target_matrices
    from tritongen.model_build.tiny import tiny_spec, tiny_weights

    weights = tiny_weights(tiny_spec(), seed=0)  # the weights tiny_folder was built from
    write_target_matrices(tiny_folder, weights)
    write_heads(tiny_folder.parent, tiny_folder.name, weights)
    return tiny_folder.parent


def engine_with_all_modes(folder, draft, heads_repo) -> Engine:
    from tritongen.speculative.head_config import load_head

    heads = {kind: load_head(heads_repo / f"{kind}_head", K) for kind in HEAD_KINDS}
    # Every batch speculates: the mixed batch below is what is being checked.
    return Engine(folder, EngineConfig(draft_model=draft, speculative_disable_by_batch_size=0, **heads))


@pytest.mark.parametrize("model", ["tiny", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_every_mode_is_token_identical_alone_and_mixed_in_a_batch(model, request, tiny_folder, tiny_heads):
    if model == "tiny":
        folder, draft, heads = tiny_folder, tiny_folder, tiny_heads  # the target as its own draft: always agrees
    else:
        folder = request.getfixturevalue("target_gqa_folder")
        draft, heads = folder.parent / "draft_gqa", folder.parent
    engine = engine_with_all_modes(folder, draft, heads)
    words = "alpha beta gamma delta alpha beta gamma delta alpha beta"
    prompts = [f"Repeat: {words}. Again: {words}. Once more:", "Count: one two three one two three one two",
               "Hello world", "The list: red, green, blue, red, green, blue, red,"]
    # A configured draft model is the engine's default mode: plain decoding is asked for by name.
    modes = [PLAIN, LOOKUP, SpeculativeMode("draft_model")] + [SpeculativeMode(kind) for kind in HEAD_KINDS]
    try:
        requests = [GenerateRequest(prompts[i % 4], GenerateOptions(max_new_tokens=12, stop_on_eos=False,
                                                                     speculative_mode=modes[i % len(modes)]))
                    for i in range(8)]
        plain_by_prompt = {p: engine.generate(GenerateRequest(p, GenerateOptions(max_new_tokens=12, stop_on_eos=False,
                                                                                 speculative_mode=PLAIN))).token_ids
                           for p in prompts}
        plain = [plain_by_prompt[r.prompt] for r in requests]
        solo, batch = solo_and_batch(engine, requests)
        for i, r in enumerate(requests):
            assert solo[i] == plain[i], f"{model} request {i} alone"
            assert batch[i].token_ids == plain[i], f"{model} request {i} in the mixed batch"
        for mode in modes[1:]:
            runs = [b for b, r in zip(batch, requests) if r.options.speculative_mode == mode]
            drafted = sum(b.total_draft_tokens for b in runs)
            accepted = sum(b.total_accepted_draft_tokens for b in runs)
            print(f"{model} {mode.kind}: drafted {drafted}, accepted {accepted}")
            assert drafted > 0
            if mode.kind in ("prompt_lookup", "draft_model"):
                assert accepted > 0
    finally:
        engine.close()


def test_a_batch_above_the_limit_decodes_plainly_and_the_output_stays(tiny_folder):
    prompt = "Repeat: one two three one two three one two three one two"
    options = dict(max_new_tokens=16, stop_on_eos=False, speculative_mode=LOOKUP, num_speculative_tokens=K)
    engine = Engine(tiny_folder, EngineConfig(speculative_disable_by_batch_size=1))
    try:
        want = engine.generate(GenerateRequest(prompt, GenerateOptions(max_new_tokens=16, stop_on_eos=False)))
        alone = engine.generate(GenerateRequest(prompt, GenerateOptions(**options)))
        _, pair = solo_and_batch(engine, [GenerateRequest(prompt, GenerateOptions(**options)) for _ in range(2)])
    finally:
        engine.close()
    assert alone.token_ids == want.token_ids and alone.total_draft_tokens > 0
    for got in pair:  # two rows decode in every step, above the limit of one: nobody speculates
        assert got.token_ids == want.token_ids and got.total_draft_tokens == 0


def _upper_normal(z: float) -> float:
    import math

    return 0.5 * math.erfc(z / math.sqrt(2))


def sample_tokens(engine: Engine, mode, seeds: range, prompt: str = "Hello world", first: int = 1) -> np.ndarray:
    """Tokens first+1..4 of many seeded runs (2..4: the positions the verifier decides), as a [runs, 4 - first]
    array."""
    done: queue.Queue = queue.Queue()
    for seed in seeds:
        options = GenerateOptions(max_new_tokens=4, greedy=False, temperature=0.8, top_k=6, seed=seed,
                                  stop_on_eos=False, speculative_mode=mode, num_speculative_tokens=3)
        engine.submit(GenerateRequest(prompt, options), on_done=lambda r, e: done.put((r, e)))
    out = []
    for _ in seeds:
        r, e = done.get(timeout=300)
        assert e is None, e
        out.append(r.token_ids[first:4])
    return np.array(out)


def test_speculative_sampling_keeps_the_target_distribution(tiny_folder, tmp_path):
    from conftest import build_tiny

    other_draft = build_tiny(tmp_path / "draft", "gqa", seed=1)  # a draft that disagrees with the target
    engine = Engine(tiny_folder, EngineConfig(draft_model=other_draft, max_queue_len=1000,
                                              speculative_disable_by_batch_size=0))
    try:
        plain = sample_tokens(engine, PLAIN, range(0, 800))
        for mode in (SpeculativeMode("draft_model"), LOOKUP):
            assert_same_distribution(plain, sample_tokens(engine, mode, range(10_000, 10_800)), mode.kind)
        assert engine.stats.drafted_tokens > 0
    finally:
        engine.close()


def assert_same_distribution(plain: np.ndarray, spec: np.ndarray, label: str) -> None:
    for position in range(plain.shape[1]):
        vocab = int(max(plain.max(), spec.max())) + 1
        p = _upper_normal(_chi_z(np.bincount(plain[:, position], minlength=vocab),
                                 np.bincount(spec[:, position], minlength=vocab)))
        print(f"{label} token {position + 2}: chi-square p = {p:.3f}")
        assert p > 0.001


@pytest.mark.slow
def test_trained_eagle3_sampling_keeps_smollm2s_distribution(target_gqa_folder):
    """400 seeded EAGLE-3 runs against the target's own sampling distribution after each prefix they took."""
    from tritongen.speculative.head_config import load_head

    eagle3 = load_head(target_gqa_folder.parent / "eagle3_head", 3)
    # 32 rows: many short runs, and a step over twice the rows costs far less than twice the step.
    engine = Engine(target_gqa_folder, EngineConfig(eagle3=eagle3, max_queue_len=1000,
                                                     speculative_disable_by_batch_size=0,
                                                     scheduler=SchedulerConfig(max_num_seqs=32)))
    try:
        prompt = engine.tokenizer.render_chat([{"role": "user", "content": "Tell me about the moon."}])
        spec = sample_tokens(engine, SpeculativeMode("eagle3"), range(10_000, 10_400), prompt, first=0)
        drafted, accepted = engine.stats.drafted_tokens, engine.stats.accepted_tokens
        print(f"eagle3 sampling at temperature 0.8: {accepted} of {drafted} drafts accepted")
        assert accepted >= 0.3 * drafted  # a trained head: real acceptance, so the residual path is exercised too
        prefixes = {tuple(row[:n]) for row in spec.tolist() for n in range(1, spec.shape[1])}
        exact = next_token_distributions(engine, engine.prepare(GenerateRequest(prompt)).prompt_ids, prefixes)
        assert_follows(spec, exact, "eagle3")
    finally:
        engine.close()


def next_token_distributions(engine: Engine, prompt_ids: list[int], prefixes: set) -> dict[tuple, dict[int, float]]:
    """The target's sampling distribution (temperature 0.8, top-k 6) after each prefix, from its own logprobs
    on a plain one-token run: with top_logprobs equal to top_k they list every token it can sample."""
    done: queue.Queue = queue.Queue()
    ordered = sorted(prefixes)
    options = GenerateOptions(max_new_tokens=1, greedy=False, temperature=0.8, top_k=6, top_logprobs=6, seed=0,
                              stop_on_eos=False)
    for i, prefix in enumerate(ordered):
        engine.submit(GenerateRequest(prompt_ids + list(prefix), options),
                      on_done=lambda r, e, i=i: done.put((i, r, e)))
    out = {}
    for _ in ordered:
        i, r, e = done.get(timeout=300)
        assert e is None, e
        out[ordered[i]] = {token: float(np.exp(logprob)) for token, logprob in r.logprobs[0].top}
        assert abs(sum(out[ordered[i]].values()) - 1) < 1e-6
    return out


def assert_follows(tokens: np.ndarray, exact: dict[tuple, dict[int, float]], label: str) -> None:
    """Pearson's chi-square of each position's token counts against the counts the exact distributions after
    each run's own prefix expect (cells expecting fewer than 5 pooled), each position and all of them summed."""
    total, total_df = 0.0, 0
    for position in range(1, tokens.shape[1]):
        expected: dict[int, float] = {}
        for row in tokens.tolist():
            for token, p in exact[tuple(row[:position])].items():
                expected[token] = expected.get(token, 0.0) + p
        observed = np.bincount(tokens[:, position], minlength=max(expected) + 1)
        cells, pooled_o, pooled_e = [], 0, 0.0
        for token, e in sorted(expected.items(), key=lambda item: -item[1]):
            if e >= 5:
                cells.append([observed[token], e])
            else:
                pooled_o, pooled_e = pooled_o + observed[token], pooled_e + e
        assert observed.sum() == sum(o for o, _ in cells) + pooled_o  # no token outside the support
        if pooled_e >= 5 or not cells:
            cells.append([pooled_o, pooled_e])
        else:
            cells[-1] = [cells[-1][0] + pooled_o, cells[-1][1] + pooled_e]
        stat = sum((o - e) ** 2 / e for o, e in cells)
        df = max(len(cells) - 1, 1)
        total, total_df = total + stat, total_df + df
        p = _chi_square_p(stat, df)
        print(f"{label} token {position + 1}: chi-square {stat:.1f} on {df} df against the target, p = {p:.3f}")
        assert p > 0.001
    p = _chi_square_p(total, total_df)
    print(f"{label} all positions: chi-square {total:.1f} on {total_df} df, p = {p:.4f}")
    assert p > 0.001


def _chi_square_p(stat: float, df: int) -> float:
    """Upper tail of chi-square(df) at stat (Wilson-Hilferty)."""
    return _upper_normal(((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / np.sqrt(2 / (9 * df)))


def _chi_z(a: np.ndarray, b: np.ndarray) -> float:
    keep = (a + b) > 0
    a, b = a[keep].astype(float), b[keep].astype(float)
    na, nb = a.sum(), b.sum()
    stat = (((a * np.sqrt(nb / na) - b * np.sqrt(na / nb)) ** 2) / (a + b)).sum()
    df = max(len(a) - 1, 1)
    return ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / np.sqrt(2 / (9 * df))


def test_mtp_hidden_threaded_mode(tiny_folder, tiny_heads):
    from tritongen.speculative.head_config import load_head

    mtp = load_head(tiny_heads / "mtp_head", K, kv_mode="hidden_threaded")
    engine = Engine(tiny_folder, EngineConfig(mtp=mtp))
    try:
        options = GenerateOptions(max_new_tokens=12, stop_on_eos=False)
        plain = engine.generate(GenerateRequest("Hello world", options)).token_ids
        options.speculative_mode = SpeculativeMode("mtp")
        spec = engine.generate(GenerateRequest("Hello world", options))
        assert spec.token_ids == plain and spec.total_draft_tokens > 0
    finally:
        engine.close()
