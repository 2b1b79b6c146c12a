"""Chat templates render exactly as transformers renders them: each template in fixtures/chat_templates on each
case of cases.json, against the bytes transformers' apply_chat_template produced (expected.json, made in the
converter environment by render_with_transformers.py and committed)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from tritongen.runtime.chat_template import ChatTemplate

HERE = Path(__file__).parent / "fixtures" / "chat_templates"
SPEC = json.loads((HERE / "cases.json").read_text(encoding="utf-8"))
EXPECTED = json.loads((HERE / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("expected", EXPECTED, ids=[f"{e['template']}-{e['case']}" for e in EXPECTED])
def test_renders_byte_for_byte_as_transformers(expected):
    template = ChatTemplate((HERE / expected["template"]).read_text(encoding="utf-8"), SPEC["special_tokens"])
    case = SPEC["cases"][expected["case"]]
    kwargs = {**SPEC["default_kwargs"], **case.get("kwargs", {})}
    if "error" in expected:
        with pytest.raises(ValueError) as caught:
            template.render(case["messages"], tools=case.get("tools"), **kwargs)
        assert expected["error"] in str(caught.value)
    else:
        assert template.render(case["messages"], tools=case.get("tools"), **kwargs) == expected["text"]


def test_every_template_and_case_is_covered():
    assert len(EXPECTED) == len(list(HERE.glob("*.jinja"))) * len(SPEC["cases"]) >= 20


def test_strftime_now_is_todays_date_and_the_sandbox_holds():
    template = ChatTemplate((HERE / "headers.jinja").read_text(encoding="utf-8"), SPEC["special_tokens"])
    text = template.render([{"role": "user", "content": "hi"}])
    assert f"Today Date: {datetime.now().strftime('%d %b %Y')}" in text
    for escape in ("{{ ''.__class__.__mro__ }}", "{% set ns = namespace() %}{% set ns._x = 1 %}{{ ns._x }}",
                   "{{ dict.__class__ }}{{ raise_exception.__globals__ }}"):
        try:  # the sandbox refuses, or renders nothing of what was asked
            leaked = ChatTemplate(escape, {}).render([])
        except ValueError as exc:
            assert "chat template" in str(exc)
        else:
            assert leaked == "", leaked
