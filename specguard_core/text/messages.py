"""Chat messages in, checked messages out: roles, content parts, prior tool calls, Unicode.

Every bad message is an `InputError` up front, naming the message and what to send instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specguard_core.text.errors import InputError, quoted

__all__ = ["Message", "RawPrompt", "check_unicode", "content_text", "normalise_messages"]

Message = dict[str, Any]


@dataclass(frozen=True)
class RawPrompt:
    """A prompt the models continue as it is, with no chat template (a completion, not a chat
    turn; steps still end at the step delimiters): `text`, or `token_ids` in the target's
    vocabulary; exactly one. Text is tokenized with the tokenizer's special tokens (a BOS where
    the model has one) unless `add_special_tokens=False`, as vLLM's completions do."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    add_special_tokens: bool = True

    def __post_init__(self) -> None:
        if (self.text is None) == (self.token_ids is None):
            raise InputError("RawPrompt takes text or token_ids, exactly one")
        if self.text is not None:
            if not isinstance(self.text, str):
                raise InputError(f"RawPrompt text must be a string, got "
                                 f"{type(self.text).__name__}")
            check_unicode(self.text, "the prompt")
        ids = self.token_ids
        if ids is not None:
            if isinstance(ids, (str, bytes)) or not all(
                    isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise InputError("RawPrompt token_ids must be a sequence of integer token ids")
            object.__setattr__(self, "token_ids", tuple(ids))
        if not self.text and not self.token_ids:
            raise InputError("the prompt is empty; send at least one token")

_ROLES = {"system", "user", "assistant", "tool", "developer"}
_TEXT_PARTS = {"text", "input_text", "output_text"}
_MEDIA_PARTS = {"image_url", "image", "input_image", "audio", "input_audio", "file", "input_file",
                "video", "video_url"}


def check_unicode(value: Any, where: str) -> None:
    """Raise InputError if any string in `value` (walked iteratively, keys too) cannot be encoded
    as UTF-8, i.e. holds a lone surrogate (what Python makes of undecodable bytes)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as err:
                raise InputError(
                    f"{where} contains {quoted(item[err.start])} at character {err.start}, a "
                    "lone surrogate that is not valid Unicode (undecodable bytes?); decode the "
                    "source text with errors='replace' or remove that character") from None
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def content_text(content: Any, where: str) -> str | None:
    """Message content as text: a string, None, or an OpenAI content-part list whose text parts
    are joined with newlines (as vLLM does); media parts are refused. The one normaliser of
    content parts: the engine (`normalise_messages`), the server and the format instruction all
    read content through it. `where` names the message in errors ("message 2")."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        raise InputError(f"{where} has content of type {type(content).__name__}; use a string or "
                         "a list of {'type': 'text', 'text': ...} parts")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if isinstance(part, str):
            texts.append(part)
        elif kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in _MEDIA_PARTS:
            raise InputError(f"{where}, content part {j} is {quoted(kind)}: SpecGuard's models "
                             "read text only; remove media parts or describe them in text")
        else:
            raise InputError(f"{where}, content part {j} is not a text part ({{'type': 'text', "
                             f"'text': ...}}): {_not_text(part, kind)}")
    return "\n".join(texts)


def _not_text(part: Any, kind: Any) -> str:
    """What is wrong with a content part that is not a text part."""
    if not isinstance(part, Mapping):
        return f"it is {quoted(part)}"
    if kind in _TEXT_PARTS:
        return "its text is missing or not a string"
    return f"its type is {quoted(kind)}"


def _check_prior_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, (list, tuple)):
        raise InputError(f"{where} has tool_calls of type {type(calls).__name__}; use a list")
    for j, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InputError(f"{where}, tool call {j} has no function name; each call needs "
                             "{'function': {'name': ..., 'arguments': ...}}")


def normalise_messages(messages_or_prompt: str | Sequence[Message]) -> list[Message]:
    """A prompt string becomes one user message; a message list is checked and copied.

    Each message must be a dict with a known role (`developer` becomes `system`, which is what
    chat templates know); content is a string, None, or a list of text parts (joined); prior tool
    calls must name their function; every string must be valid Unicode."""
    if isinstance(messages_or_prompt, str):
        if not messages_or_prompt.strip():
            raise InputError("the prompt is empty; pass a question or a list of chat messages")
        check_unicode(messages_or_prompt, "the prompt")
        return [{"role": "user", "content": messages_or_prompt}]
    if isinstance(messages_or_prompt, (bytes, bytearray)):
        raise InputError("the prompt is bytes; decode it to str first (e.g. .decode('utf-8'))")
    if isinstance(messages_or_prompt, Mapping):
        raise InputError("pass a list of messages, not one message dict: wrap it in a list")
    if not isinstance(messages_or_prompt, Iterable):
        raise InputError(f"pass a prompt string or a list of chat messages, got "
                         f"{type(messages_or_prompt).__name__}")
    messages: list[Message] = []
    for i, m in enumerate(messages_or_prompt):
        if not isinstance(m, Mapping):
            raise InputError(f"message {i} is a {type(m).__name__}, not a dict; use "
                             "{'role': 'user', 'content': '...'}")
        m = dict(m)
        if m.get("role") not in _ROLES:
            raise InputError(f"message {i} has role {quoted(m.get('role'))}; use "
                             "system/user/assistant/tool")
        if m["role"] == "developer":  # OpenAI's newer name for system; templates only know system
            m["role"] = "system"
        if "content" in m:
            m["content"] = content_text(m["content"], f"message {i}")
        if m.get("tool_calls"):
            _check_prior_calls(m["tool_calls"], f"message {i}")
        check_unicode(m, f"message {i}")
        messages.append(m)
    if not messages:
        raise InputError("messages is empty; pass at least one {'role': 'user', 'content': ...}")
    return messages
