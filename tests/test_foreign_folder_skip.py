"""A foreign folder (`make foreign-models`) that is absent skips its tests, naming the folder and the target that
builds it; under `make test`, which builds them first, an absent one fails its tests instead of skipping them."""

from __future__ import annotations

import pytest

import conftest
from conftest import FOREIGN_REQUIRED, foreign_folder


def test_a_present_folder_is_served_as_it_is(monkeypatch, tmp_path):
    (tmp_path / "tiny-genai-fp32").mkdir()
    monkeypatch.setattr(conftest, "FOREIGN", tmp_path)
    monkeypatch.setenv(FOREIGN_REQUIRED, "1")
    assert foreign_folder("tiny-genai-fp32") == tmp_path / "tiny-genai-fp32"


def test_an_absent_folder_skips_naming_it_and_the_make_target(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "FOREIGN", tmp_path)
    monkeypatch.delenv(FOREIGN_REQUIRED, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        foreign_folder("tiny-genai-fp32")
    assert str(skipped.value) == f"{tmp_path / 'tiny-genai-fp32'} is absent: `make foreign-models` builds it"


def test_under_make_test_an_absent_folder_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "FOREIGN", tmp_path)
    monkeypatch.setenv(FOREIGN_REQUIRED, "1")
    with pytest.raises(pytest.fail.Exception, match="tiny-genai-fp32 is absent: `make foreign-models` builds it"):
        foreign_folder("tiny-genai-fp32")
