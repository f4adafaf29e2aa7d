"""The text layer's input errors and the one way their messages show a caller's value.

An `InputError` names the field and the rule it breaks. Where it helps to show which value was
wrong (a tool's name, a role, a `$ref`), the value goes through `quoted`: at most `QUOTE_LIMIT`
characters, printable ASCII, in Python's repr quotes. So a library's caller sees the value, and a
server that relays the message never reflects a long or odd string a client sent.
"""

from __future__ import annotations

from typing import Any

QUOTE_LIMIT = 40  # characters of a quoted value shown inside its quotes
FREE_TEXT_LIMIT = 160  # characters of a third party's message (a template's, jsonschema's)


class InputError(ValueError):
    """Bad input from the caller; the message says what to do."""


class PromptTooLong(InputError):
    """A prompt that does not fit a model's context window with room for one more token: its
    length, the window and the model's name, so that a server can word it as its API does and an
    adapter can raise its framework's context-overflow error."""

    def __init__(self, prompt_tokens: int, context_window: int, model: str) -> None:
        super().__init__(f"the prompt has {prompt_tokens} tokens but {model}'s context window is "
                         f"{context_window}; shorten the conversation or drop earlier messages")
        self.prompt_tokens, self.context_window, self.model = prompt_tokens, context_window, model

    def __reduce__(self) -> tuple[type[PromptTooLong], tuple[int, int, str]]:
        return type(self), (self.prompt_tokens, self.context_window, self.model)


def _escaped(char: str) -> str:
    """One character as it appears inside single quotes: printable ASCII as is (a quote or a
    backslash escaped), anything else as its Python escape (\\n, \\xe9, \\u2603, \\udcff)."""
    if char in "'\\":
        return "\\" + char
    return char if " " <= char <= "~" else ascii(char)[1:-1]


def quoted(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """`value` as an error message shows it: a string in single quotes, every character outside
    printable ASCII escaped, cut after `limit` characters of escaped text (the cut marked with
    "..." after the closing quote); a bool, None or a small finite number as its repr; anything
    else by its type only ("a value of type dict"), since its repr could hold anything."""
    if isinstance(value, str):
        out: list[str] = []
        size = 0
        for char in value:
            piece = _escaped(char)
            if size + len(piece) > limit:
                return "'" + "".join(out) + "'..."
            out.append(piece)
            size += len(piece)
        return "'" + "".join(out) + "'"
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, float) or isinstance(value, int) and abs(value) < 10**QUOTE_LIMIT:
        return repr(value)
    return f"a value of type {type(value).__name__}"
