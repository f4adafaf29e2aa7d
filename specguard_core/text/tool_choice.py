"""`tool_choice`: every form callers pass, read by one parser.

The engine (`required_tool`), the LangChain adapter and the OpenAI-compatible server all read a
tool choice through `parse_tool_choice`; a door that takes fewer forms (the server takes OpenAI's
only) checks `ParsedToolChoice.openai` rather than parsing again. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specguard_core.text.errors import InputError, quoted

ToolChoice = str | bool | dict[str, Any] | None
Mode = Literal["auto", "none", "required", "function"]

# the words that stand for a mode, as a string or as a dict's "type"; the bool is whether
# OpenAI's Chat Completions API takes it
_MODES: dict[str, tuple[Mode, bool]] = {
    "auto": ("auto", True), "none": ("none", True), "required": ("required", True),
    "any": ("required", False),  # Anthropic's and LangChain's word for required
}
USAGE = ("use 'auto', 'none', 'required' (or 'any'), a tool's name, {'type': 'function', "
         "'function': {'name': ...}} or {'type': 'tool', 'name': ...}")


@dataclass(frozen=True)
class ParsedToolChoice:
    """A tool choice as the engine reads it.

    `mode`: "auto" (the model may call a tool), "none" (it may not), "required" (it must call
    one) or "function" (it must call the tool `name`). `openai`: whether the form given is one
    OpenAI's Chat Completions API takes (None, "auto", "none", "required" or
    {"type": "function", "function": {"name": ...}})."""

    mode: Mode
    name: str | None = None
    openai: bool = True

    def required(self, tools: Sequence[Mapping[str, Any]]) -> str | None:
        """"*" when any tool call is required, a name when that tool is, None otherwise;
        `tools` are the offered (checked) tools. "required" with no tools offered requires
        nothing; a name must be one of the tools' (else InputError)."""
        if self.mode == "required":
            return "*" if tools else None
        if self.mode != "function":
            return None
        names = {t["function"]["name"] for t in tools}
        if self.name not in names:
            offered = "the tools offered" if names else "the tools offered (none are)"
            raise InputError(f"tool_choice names {quoted(self.name)}, which is not among "
                             f"{offered}; name one of the tools passed in tools=[...]")
        return self.name

    def engine_value(self) -> str | dict[str, Any]:
        """The plainest form that parses back to this choice: a mode's word, a tool's name, or
        OpenAI's dict for a tool whose name is also a mode's word."""
        if self.mode != "function":
            return self.mode
        assert self.name is not None
        if self.name in _MODES:
            return {"type": "function", "function": {"name": self.name}}
        return self.name


def parse_tool_choice(choice: Any) -> ParsedToolChoice:
    """Any form of `tool_choice` callers pass, as a `ParsedToolChoice`; InputError for one it
    does not know (the message names the rule, quoting a value only through `quoted`).

    None, "auto", False: auto. "none": none. "required", "any", True: required. Any other
    string: that tool. Dicts: OpenAI's {"type": "function", "function": {"name": ...}};
    {"type": "auto" | "none" | "required" | "any"} (Anthropic's forms); Anthropic's
    {"type": "tool", "name": ...}; {"type": "function", "name": ...} (OpenAI's Responses API);
    and a dict with only a name, {"name": ...} or {"function": {"name": ...}}."""
    if choice is None:
        return ParsedToolChoice("auto")
    if isinstance(choice, bool):
        return ParsedToolChoice("required" if choice else "auto", openai=False)
    if isinstance(choice, str):
        if choice in _MODES:
            mode, openai = _MODES[choice]
            return ParsedToolChoice(mode, openai=openai)
        if not choice.strip():
            raise InputError(f"tool_choice is an empty string; {USAGE}")
        return ParsedToolChoice("function", choice, openai=False)
    if isinstance(choice, Mapping):
        return _parse_dict(choice)
    raise InputError(f"tool_choice is {quoted(choice)}, which is not a tool choice; {USAGE}")


def _parse_dict(choice: Mapping[Any, Any]) -> ParsedToolChoice:
    kind = choice.get("type")
    if isinstance(kind, str) and kind in _MODES:
        mode, _ = _MODES[kind]
        return ParsedToolChoice(mode, openai=False)
    if kind not in (None, "function", "tool"):
        raise InputError(f"tool_choice has type {quoted(kind)}, which is not a tool choice's "
                         f"type; {USAGE}")
    fn = choice.get("function")
    name = fn.get("name") if isinstance(fn, Mapping) else choice.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError("tool_choice names no tool (its name is missing, empty or not a "
                         f"string); {USAGE}")
    openai = kind == "function" and isinstance(fn, Mapping)
    return ParsedToolChoice("function", name, openai=openai)
