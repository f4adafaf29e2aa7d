"""Step boundaries on text: where a step ends, and what kind of step it is.

Pure string functions, shared by the engine's decode loop (is this candidate's step complete?) and by
anything that needs to split committed text the same way. Contract: `"".join(segment(t)) == t` and a
tool-call block `<tool_call>...</tool_call>` is always exactly one step, whatever it contains.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from specguard_core.types import StepKind


@dataclass(frozen=True)
class StepRules:
    """Markers that bound steps. `tool_open=None` means the template has no tool-call block markers."""

    delimiters: tuple[str, ...] = ("\n\n",)
    tool_open: str | None = "<tool_call>"
    tool_close: str | None = "</tool_call>"
    think_open: str = "<think>"
    think_close: str = "</think>"
    # names of the offered tools: a step that is one `{"name": <one of them>, ...}` JSON object is
    # a call written without markers; empty (no tools, or a response format asks for JSON) means
    # bare JSON is always an answer
    bare_calls: frozenset[str] = frozenset()

    def with_tools(self, names: Iterable[str]) -> StepRules:
        """These rules with bare JSON calls of the tools `names` recognised as tool calls."""
        return replace(self, bare_calls=frozenset(names))

    @classmethod
    def for_tokenizer(cls, tokenizer: object, delimiters: tuple[str, ...]) -> StepRules:
        """Hermes/Qwen `<tool_call>` markers when the tokenizer's vocabulary or template declares them."""
        vocab: dict[str, int] = getattr(tokenizer, "get_vocab", dict)()
        template = str(getattr(tokenizer, "chat_template", "") or "")
        if "<tool_call>" in vocab or "<tool_call>" in template:
            return cls(delimiters=delimiters)
        return cls(delimiters=delimiters, tool_open=None, tool_close=None)


def _first(text: str, markers: tuple[str, ...], start: int = 0) -> tuple[int, str] | None:
    hits = [(i, m) for m in markers if (i := text.find(m, start)) >= 0]
    return min(hits) if hits else None


_BARE = re.compile(r'(```(?:json)?\s*)?\{\s*"name"\s*:')
_BARE_NAME = re.compile(r'(?:```(?:json)?\s*)?\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _offered_call(text: str, lead: int, names: frozenset[str]) -> bool:
    """Whether `text` at `lead` opens a bare call of an offered tool: `{"name": ` followed by an
    offered name, or by a name still being written that can become one."""
    opened = _BARE.match(text, lead) if names else None
    if opened is None:
        return False
    named = _BARE_NAME.match(text, lead)
    if named is None:  # the name is still being written
        rest = text[opened.end():].lstrip()
        return not rest or (rest[0] == '"' and any(n.startswith(rest[1:]) for n in names))
    try:
        name = json.loads(f'"{named.group(1)}"')
    except ValueError:
        return False
    return name in names


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}"]')  # a whole string, a bracket, a lone quote


def _nested_end(text: str, start: int) -> int | None:
    """Where the array or object starting at `start` closes, found by matching its brackets
    (strings skipped, iteratively: any depth), or None while it is open."""
    rest = _STRING.sub("", text[start:])
    if rest.count("[") + rest.count("{") > rest.count("]") + rest.count("}"):
        return None  # cheap: not closed yet (most calls while a deep value is being written)
    depth = 0
    for m in _STRUCTURE.finditer(text, start):
        mark = m.group()
        if mark in "[{":
            depth += 1
        elif mark in "]}":
            depth -= 1
            if depth == 0:
                return m.end()
        elif mark == '"':  # a string still being written
            return None
    return None


def _json_end(text: str, start: int) -> int | None:
    """Where the JSON value starting at `start` ends, or None if it does not (yet) parse. Model
    text is untrusted: a value nested past the decoder's recursion limit ends where its brackets
    close (the call's parser then reports it as nested too deeply), never as an exception."""
    try:
        return json.JSONDecoder(strict=False).raw_decode(text, start)[1]
    except ValueError:
        return None
    except RecursionError:
        return _nested_end(text, start)


def _bare_call_end(text: str, lead: int) -> int | None:
    """End of a bare (optionally ```json-fenced) JSON call starting at `lead`, None while open."""
    m = _BARE.match(text, lead)
    assert m is not None
    start = lead + len(m.group(1) or "")
    end = _json_end(text, start)
    if end is None:
        return None
    if not m.group(1):
        return end
    close = text.find("```", end)
    return None if close < 0 else close + 3


def _tool_block_end(text: str, start: int, close: str) -> int | None:
    """End of a tool-call block whose body starts at `start`: after its closer; or, when the model
    forgot the closer, right after the block's complete JSON once anything but the closer follows it
    (small models write a valid call and go on with prose). None while the block is open."""
    at = text.find(close, start)
    if at >= 0:
        return at + len(close)
    end = _json_end(text, len(text) - len(text[start:].lstrip()))
    if end is None:
        return None
    rest = text[end:].lstrip()
    return None if close.startswith(rest) else end


def call_closed(text: str, rules: StepRules) -> bool:
    """Whether a tool-call step carries its closer (bare JSON calls and forgotten closers do not)."""
    return bool(rules.tool_close) and str(rules.tool_close) in text


def opens_call(text: str, rules: StepRules) -> bool:
    """Whether `text` opens a tool call: it starts (after whitespace) with a tool-call opener, or
    with a bare JSON call of an offered tool. Such a step ends where its call does (`step_end`),
    so a step budget does not cut it."""
    body = text.lstrip()
    if rules.tool_open and rules.tool_close and body.startswith(rules.tool_open):
        return True
    return _offered_call(text, len(text) - len(body), rules.bare_calls)


def is_bare_call(text: str, names: frozenset[str]) -> bool:
    """Whether `text` is one whole bare (or ```json-fenced) JSON call of a tool in `names`."""
    body = text.strip()
    return _offered_call(body, 0, names) and _bare_call_end(body, 0) == len(body)


def step_end(text: str, rules: StepRules) -> int | None:
    """Character index where the first step of `text` ends, or None while it is still open.

    - A step that starts (after whitespace) with a tool-call opener ends right after its closer; the
      delimiter inside it does not count. If its JSON is complete and something other than the closer
      follows, it ends with the JSON (a forgotten closer).
    - With `bare_calls`, a step that starts with `{"name": "<offered tool>"` (optionally in a
      ```json fence) is a tool call written without markers, as small models often do; it ends
      where its JSON ends. JSON naming anything else (`{"name": "Bob", ...}`) is prose.
    - Otherwise a step ends after its first delimiter or `</think>`, or just *before* an opener
      (`<tool_call>`, `<think>`) that follows some prose, so blocks are never merged with prose.
    The returned index is always > 0, so repeated splitting makes progress.
    """
    body = text.lstrip()
    lead = len(text) - len(body)
    if rules.tool_open and rules.tool_close and body.startswith(rules.tool_open):
        return _tool_block_end(text, lead + len(rules.tool_open), rules.tool_close)
    if _offered_call(text, lead, rules.bare_calls):
        return _bare_call_end(text, lead)
    if body.startswith(rules.think_open):
        lead += len(rules.think_open)  # the opener itself begins this step
    ends = _first(text, rules.delimiters + (rules.think_close,), lead)
    end = ends[0] + len(ends[1]) if ends else None
    openers = tuple(m for m in (rules.tool_open, rules.think_open) if m)
    opener = _first(text, openers, max(lead, 1))
    if opener and text[: opener[0]].strip() and (end is None or opener[0] < end):
        return opener[0]
    return end


def segment(text: str, rules: StepRules) -> list[str]:
    """Split `text` into steps with `step_end`; the last step may be open (unterminated)."""
    steps: list[str] = []
    while text:
        end = step_end(text, rules)
        if end is None:
            steps.append(text)
            break
        steps.append(text[:end])
        text = text[end:]
    return steps


def step_kind(text: str, in_think: bool, rules: StepRules) -> tuple[StepKind, bool]:
    """(kind of this step, whether a `<think>` section is still open after it)."""
    body = text.strip()
    if rules.tool_open and body.startswith(rules.tool_open) and not in_think:
        return "tool_call", False
    if not in_think and is_bare_call(body, rules.bare_calls):
        return "tool_call", False
    if body.startswith(rules.think_open):
        in_think = True
    if in_think:
        return "reasoning", not body.endswith(rules.think_close)
    return "answer", False


def strip_markers(text: str, rules: StepRules) -> str:
    """Reasoning text without its `<think>`/`</think>` markers."""
    return text.replace(rules.think_open, "").replace(rules.think_close, "")
