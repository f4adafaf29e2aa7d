"""`specguard_core.text.chat` keeps every name it exports, the same objects as their own modules'."""

from __future__ import annotations

import importlib

import pytest

from specguard_core.text import chat

OWNERS = {
    "specguard_core.text.messages": ("Message", "check_unicode", "content_text",
                                     "normalise_messages"),
    "specguard_core.text.tool_calls": ("forced_call_prefix", "parse_tool_call"),
    "specguard_core.text.tokens": ("token_bytes",),
    "specguard_core.text.errors": ("InputError",),
    "specguard_core.text.tool_choice": ("ToolChoice",),
}


def test_every_exported_name_resolves() -> None:
    missing = [name for name in chat.__all__ if not hasattr(chat, name)]
    assert not missing, missing


@pytest.mark.parametrize("module", sorted(OWNERS))
def test_reexports_are_the_owning_modules_objects(module: str) -> None:
    owner = importlib.import_module(module)
    for name in OWNERS[module]:
        assert name in chat.__all__
        assert getattr(chat, name) is getattr(owner, name), name
