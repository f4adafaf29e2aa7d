"""Tool calls under a grammar (llguidance's Lark), in the Hermes `<tool_call>` format.

Two cases constrain the reply, as vLLM does for its structured tool calls:

- a forced call (`tool_choice` "required" or a named tool): the reply is one call of the named tool,
  or one or more calls of any offered tool, each `{"name": ..., "arguments": ...}` with the
  arguments matching the tool's `parameters` schema; nothing but the calls;
- strict function tools (`"strict": true`, as the `openai` SDK's `pydantic_function_tool` and
  LangChain's `bind_tools(..., strict=True)` send) under `tool_choice="auto"`: free text, then any
  number of calls; a strict tool's arguments match its schema, a tool without `strict` takes any
  JSON object; only offered tools can be named;
- a constrained response format beside the tools (`decoding/reply_grammar.py`), no call owed:
  the format's answer or one or more calls (arguments as under strict tools), nothing else.

When the chat template thinks (it names `<think>`) and `<think>`/`</think>` are tokens of the
vocabulary, an optional think block may come first (a reasoning model thinks before it calls).
The call's JSON is laid out as templates render calls (one line, ", " and ": "). Pure functions
of the tools and the tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallFormat:
    """The Lark terms for a template's call markers: a token reference (`<[id]>`) where the
    marker is one token of the vocabulary, else the marker as a string literal."""

    open: str
    close: str
    think: tuple[str, str] | None = None  # (open, close) where both are single tokens


def call_format(tokenizer: Any, tool_open: str | None, tool_close: str | None
                ) -> CallFormat | None:
    """The call format of a tokenizer whose template writes `tool_open ... tool_close` blocks
    (None when it has no such markers: no grammar can say where a call goes)."""
    if not tool_open or not tool_close:
        return None
    return CallFormat(_term(tokenizer, tool_open), _term(tokenizer, tool_close),
                      think_terms(tokenizer))


def think_terms(tokenizer: Any) -> tuple[str, str] | None:
    """The think block's (open, close) token terms of a thinking template (one that names
    `<think>`) whose markers are single tokens, else None."""
    if "<think>" not in str(getattr(tokenizer, "chat_template", "") or ""):
        return None
    opens, closes = _single(tokenizer, "<think>"), _single(tokenizer, "</think>")
    return (opens, closes) if opens and closes else None


def think_rule(think: tuple[str, str]) -> str:
    """The Lark rule `think`: an optional think block's markers around any text."""
    return f"think: {think[0]} /(.|\\n)*/ {think[1]} /[ \\n]*/"


def strict_tools(tools: Sequence[dict[str, Any]]) -> list[str]:
    """The names of the tools that ask for strict arguments (`function.strict` true)."""
    return [t["function"]["name"] for t in tools if t["function"].get("strict") is True]


def calls_lark(tools: Sequence[dict[str, Any]], required: str | None, fmt: CallFormat,
               answer: str | None = None) -> str | None:
    """The Lark grammar of a reply to `tools` (checked, non-empty) with the tool choice still owed
    `required` ("*", a name or None); `answer`: the term of a format's answer, which the reply may
    be instead of calls when none is owed. None when nothing is constrained (no call owed, no
    strict tool, no answer)."""
    strict = set(strict_tools(tools))
    if required is None and not strict and answer is None:
        return None
    if required not in (None, "*"):
        body = _call_schema([t for t in tools if t["function"]["name"] == required], None)
        reply = "call"
    else:
        body = _call_schema(tools, None if required == "*" else strict)
        reply = 'call ("\\n" call)*' if required == "*" else \
            f'({answer} | call ("\\n" call)*)' if answer else 'TEXT? (call "\\n"?)*'
    lines = [f"start: think? {reply}" if fmt.think else f"start: {reply}",
             f'call: {fmt.open} "\\n" body "\\n" {fmt.close}',
             f"body: %json {json.dumps(body)}",
             "TEXT: /(.|\\n)+/"]
    if fmt.think:
        lines.append(think_rule(fmt.think))
    return "\n".join(lines) + "\n"


# a call's JSON as chat templates render calls (`tojson`): one line, ", " and ": " between items
_AS_TEMPLATES_WRITE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _call_schema(tools: Sequence[dict[str, Any]], strict: set[str] | None) -> dict[str, Any]:
    """A call of one of `tools` as Hermes writes it: name first, then the arguments, which follow
    the tool's schema (every tool when `strict` is None, else those named in it)."""
    options = []
    for tool in tools:
        fn = tool["function"]
        follows = strict is None or fn["name"] in strict
        options.append({"type": "object", "additionalProperties": False,
                        "required": ["name", "arguments"],
                        "properties": {"name": {"const": fn["name"]},
                                       "arguments": fn["parameters"] if follows
                                       else {"type": "object"}}})
    return {"anyOf": options, "x-guidance": _AS_TEMPLATES_WRITE}


def _single(tokenizer: Any, marker: str) -> str | None:
    """`<[id]>` when `marker` is one token of the vocabulary, else None."""
    token_id = tokenizer.convert_tokens_to_ids(marker)
    if not isinstance(token_id, int) or tokenizer.convert_ids_to_tokens(token_id) != marker:
        return None
    return f"<[{token_id}]>"


def _term(tokenizer: Any, marker: str) -> str:
    return _single(tokenizer, marker) or json.dumps(marker)
