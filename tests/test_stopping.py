"""StopChecker: finish reasons, stop strings across token boundaries, held-back text."""

from tritongen.engine.options import FinishReason, GenerateOptions
from tritongen.engine.stopping import StopChecker

EOS = 0


def checker(stops=(), max_new_tokens=100, min_length=0, prompt_len=3, context_limit=1000, stop_on_eos=True):
    options = GenerateOptions(max_new_tokens=max_new_tokens, stop_sequences=list(stops), min_length=min_length,
                              stop_on_eos=stop_on_eos)
    return StopChecker(options, (EOS,), prompt_len, context_limit)


def run(c, pieces, ids=None):
    """Feed pieces (token ids 10, 11, ... unless given); return released pieces and the finish reason."""
    released, reason = [], None
    for i, piece in enumerate(pieces):
        out, reason = c.add(ids[i] if ids else 10 + i, piece)
        released.append(out)
        if reason is not None:
            break
    return released, reason


def test_no_stop_releases_everything_at_once():
    released, reason = run(checker(), ["Hel", "lo", " world"])
    assert released == ["Hel", "lo", " world"] and reason is None


def test_stop_string_across_token_boundaries_cuts_before_match():
    c = checker(["STOP"])
    released, reason = run(c, ["ab", "cS", "T", "O", "Pxyz", "never"])
    assert reason == FinishReason.stop_sequence(0) and str(reason) == "stop_sequence:0"
    assert "".join(released) == "abc" == c.text
    assert len(released) == 5  # ended on the token that completed the match


def test_held_back_text_never_shows_part_of_a_later_stop():
    stop = "<end>"
    pieces = ["x<", "e", "n", "d", ">tail"]
    released, reason = run(checker([stop]), pieces)
    assert reason == FinishReason.stop_sequence(0)
    shown = ""
    for out in released:
        shown += out
        assert "<" not in shown  # no prefix of the stop string ever leaves
    assert shown == "x"


def test_false_alarm_prefix_is_released_later():
    c = checker(["abc"])
    released, reason = run(c, ["xa", "b", "d", "e"])
    assert reason is None
    assert released[0] == "x" and released[1] == ""  # "a", then "ab" held
    assert "".join(released) == "xabde" == c.text


def test_released_pieces_concatenate_to_final_text_on_every_finish():
    for stops, pieces in [(["\n\n"], ["line", "\n", "x\n", "\n", "rest"]),
                          (["ab", "zz"], ["z", "a", "zab"]),
                          (["qq"], ["q", "q"])]:
        c = checker(stops, max_new_tokens=len(pieces))
        released, reason = run(c, pieces)
        assert reason is not None
        assert "".join(released) == c.text
        assert not any(s in c.text for s in stops)


def test_earliest_match_wins_not_list_order():
    # "cd" (index 1) starts before "de" (index 0) within the same new piece
    c = checker(["de", "cd"])
    released, reason = run(c, ["ab", "cdef"])
    assert reason == FinishReason.stop_sequence(1)
    assert "".join(released) == "ab"


def test_stop_inside_one_piece_and_index_is_list_index():
    c = checker(["zzz", "yy", "END"])
    released, reason = run(c, ["fooENDbar"])
    assert reason == FinishReason.stop_sequence(2)
    assert released == ["foo"]


def test_eos_finishes_and_releases_held_text():
    c = checker(["abc"])
    released, reason = run(c, ["hi a", "<eos-text>"], ids=[10, EOS])
    assert reason == FinishReason.EOS_TOKEN and str(reason) == "eos_token"
    assert "".join(released) == "hi a"  # held "a" released, EOS text not added


def test_ignore_eos():
    released, reason = run(checker(stop_on_eos=False), ["a", "", "b"], ids=[10, EOS, 11])
    assert reason is None and "".join(released) == "ab"


def test_max_tokens():
    c = checker(["abc"], max_new_tokens=3)
    released, reason = run(c, ["x", "y", "za", "never"])
    assert reason == FinishReason.MAX_TOKENS and str(reason) == "max_tokens"
    assert len(released) == 3 and "".join(released) == "xyza"


def test_length_at_context_limit():
    c = checker(prompt_len=5, context_limit=8, max_new_tokens=100)
    released, reason = run(c, ["a", "b", "c", "d"])
    assert reason == FinishReason.LENGTH and str(reason) == "length"
    assert len(released) == 3  # 5 prompt + 3 generated fill the context


def test_min_length_suppresses_eos_and_stop():
    c = checker(["x"], min_length=3)
    released, reason = run(c, ["a", "", "x", "bxc"], ids=[10, EOS, 11, 12])
    # only tokens before the 3rd are exempt: EOS at token 2 is ignored, "x" at token 3 stops
    assert reason == FinishReason.stop_sequence(0)
    assert len(released) == 3 and "".join(released) == "a"
    c = checker(["x"], min_length=4)
    released, reason = run(c, ["a", "", "x", "bxc"], ids=[10, EOS, 11, 12])
    assert reason == FinishReason.stop_sequence(0)
    assert len(released) == 4 and "".join(released) == "axb"
    c = checker(min_length=2)
    released, reason = run(c, ["a", "", "b", ""], ids=[EOS, 10, 11, EOS])
    assert reason == FinishReason.EOS_TOKEN and len(released) == 4 and "".join(released) == "ab"


def test_stop_completed_before_min_length_does_not_end_later():
    # "ab" lies wholly in text made before min_length; a later token must not trigger it retroactively.
    c = checker(["ab", "abx"], min_length=3)
    released, reason = run(c, ["a", "b", "c", "d"])
    assert reason is None
    assert "".join(released) == "abcd"


def test_token_id_stop_sequences():
    c = checker(["zzz", (7, 8)])
    released, reason = run(c, ["a", "b", "c", "d"], ids=[7, 9, 7, 8])
    assert reason == FinishReason.stop_sequence(1)
    assert len(released) == 4
    c = checker([(5,)])
    _, reason = run(c, ["a", "b"], ids=[4, 5])
    assert reason == FinishReason.stop_sequence(0)
