"""Content parts read by the one normaliser; extra chat-template variables (`template_kwargs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specguard_core.testing import QWEN_STYLE_TEMPLATE, build_tokenizer
from specguard_core.text.chat import (
    InputError,
    check_template_kwargs,
    content_text,
    normalise_messages,
    render_prompt,
)

# Qwen3's switch: with enable_thinking false the template opens an empty think block itself
THINKING_TEMPLATE = QWEN_STYLE_TEMPLATE.replace(
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
    "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
PARTS = [{"type": "text", "text": "What is"}, {"type": "input_text", "text": "3 + 4?"}, "Thanks."]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build_tokenizer(Path(tmp_path_factory.mktemp("think")), template=THINKING_TEMPLATE)


def test_content_parts_have_one_normaliser() -> None:
    assert content_text(PARTS, "message 0") == "What is\n3 + 4?\nThanks."
    (message,) = normalise_messages([{"role": "user", "content": PARTS}])
    assert message["content"] == content_text(PARTS, "message 0")
    assert content_text(None, "message 0") is None and content_text("hi", "message 0") == "hi"
    with pytest.raises(InputError, match="message 3, content part 0 is 'image_url'"):
        content_text([{"type": "image_url", "image_url": {"url": "x"}}], "message 3")


def test_template_kwargs_reach_the_chat_template(tokenizer: Any) -> None:
    messages = normalise_messages("hi")
    plain = render_prompt(tokenizer, messages, [])
    off = render_prompt(tokenizer, messages, [], {"enable_thinking": False})
    assert plain.endswith("<|im_start|>assistant\n")
    assert off == plain + "<think>\n\n</think>\n\n"
    assert render_prompt(tokenizer, messages, [], {"enable_thinking": True}) == plain
    assert render_prompt(tokenizer, messages, [], None) == plain


@pytest.mark.parametrize(("bad", "match"), [
    ({"tokenize": True}, r"cannot set \['tokenize'\]"),
    ({"add_generation_prompt": False, "messages": []}, "add_generation_prompt', 'messages"),
    ({1: True}, r"cannot set \['1'\]"),
    ("enable_thinking=False", "must be a dict of template variables"),
])
def test_template_kwargs_that_cannot_be_template_variables(tokenizer: Any, bad: Any,
                                                            match: str) -> None:
    with pytest.raises(InputError, match=match):
        render_prompt(tokenizer, normalise_messages("hi"), [], bad)
    with pytest.raises(InputError, match=match):
        check_template_kwargs(bad)
