"""Comparing `make bench` runs before and after a change: medians of each side, their quotient, and a
verdict that flips at the tolerance."""

from __future__ import annotations

import json

import pytest

from bench.compare_runs import compare, main, ratios


def summary(tmp_path, name: str, values: dict[str, float | None]):
    path = tmp_path / f"{name}.json"
    rows = [{"compares": "vs the raw loop", "target": t, "ratio": r, "threshold": 0.9, "met": None} for t, r in
            values.items()]
    path.write_text(json.dumps({"targets": rows}))
    return path


def test_targets_without_a_ratio_are_left_out(tmp_path):
    assert ratios(summary(tmp_path, "a", {"x": 1.2, "y": None})) == {"x": 1.2}


def test_medians_are_compared_and_spread_is_each_sides_largest_over_smallest():
    before = [{"x": 1.0}, {"x": 1.1}, {"x": 0.9}]
    after = [{"x": 1.04}, {"x": 0.8}, {"x": 1.2}]
    (row,) = compare(before, after, 0.05)
    assert row["change"] == pytest.approx(1.04)
    assert row["spread_before"] == pytest.approx(1.1 / 0.9 - 1)
    assert row["spread_after"] == pytest.approx(0.5)
    assert row["within"]


def test_a_target_measured_on_one_side_only_is_not_compared():
    assert compare([{"x": 1.0, "y": 2.0}], [{"x": 1.0}], 0.05) == [compare([{"x": 1.0}], [{"x": 1.0}], 0.05)[0]]


@pytest.mark.parametrize(("after", "code"), [(1.049, 0), (0.951, 0), (1.06, 1), (0.94, 1)])
def test_exit_code_says_whether_every_ratio_stayed_within_the_tolerance(tmp_path, capsys, after, code):
    b = summary(tmp_path, "b", {"x": 1.0, "y": 2.0})
    a = summary(tmp_path, "a", {"x": after, "y": 2.0})
    assert main(["--before", str(b), "--after", str(a)]) == code
    out = capsys.readouterr().out
    assert f"{2 - code} of 2 ratios within ±5%" in out
    assert ("**no**" in out) == bool(code)
