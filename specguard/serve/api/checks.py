"""The checks of a chat request's structured fields (`ChatCompletionRequest.unsupported`): each
returns (field, why) pairs, worded with the rule, never the value sent. Pure functions."""

from __future__ import annotations

import math
import re
from typing import Any

from specguard_core.text.chat import _RENDER_ARGS
from specguard_core.text.errors import InputError
from specguard_core.text.formats import STRUCTURED
from specguard_core.text.tool_choice import parse_tool_choice

MAX_TEMPLATE_KWARGS = 16  # chat_template_kwargs: variables per request
MAX_TEMPLATE_STRING = 1024  # chat_template_kwargs: characters in one string value
_TEMPLATE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def template_problems(kwargs: Any) -> list[tuple[str, str]]:
    """chat_template_kwargs is untrusted: a few plainly named variables with scalar values,
    none of them apply_chat_template's own parameters or a tokenizer's special tokens."""
    if kwargs is None:
        return []
    if not isinstance(kwargs, dict):
        return [("chat_template_kwargs", "chat_template_kwargs must be an object of template "
                                         "variables, e.g. {\"enable_thinking\": false}")]
    rule = (f"chat_template_kwargs takes at most {MAX_TEMPLATE_KWARGS} variables named with "
            "letters, digits and _ (at most 64 characters; not apply_chat_template's own "
            "parameters nor a special token's name, *_token or *_tokens), each a JSON scalar "
            f"(a string of at most {MAX_TEMPLATE_STRING} characters, a finite number, true, "
            "false or null)")
    names_ok = len(kwargs) <= MAX_TEMPLATE_KWARGS and all(
        _TEMPLATE_NAME.fullmatch(k) and k not in _RENDER_ARGS and
        not k.endswith(("_token", "_tokens")) for k in kwargs)
    if not names_ok or not all(_scalar(v) for v in kwargs.values()):
        return [("chat_template_kwargs", rule)]
    return []


def _scalar(value: Any) -> bool:
    """A JSON scalar within bounds: a short string, a finite number, a bool or null."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        return len(value) <= MAX_TEMPLATE_STRING
    if isinstance(value, int):
        return abs(value) < 2**63
    return isinstance(value, float) and math.isfinite(value)


def format_problems(fmt: dict[str, Any] | None) -> list[tuple[str, str]]:
    """response_format: a type this server knows, a json_schema with its schema."""
    if fmt is None:
        return []
    if fmt.get("type") not in ("text", "json_object", "json_schema"):
        return [("response_format", "response_format.type must be text, json_object or "
                                    "json_schema")]
    spec = fmt.get("json_schema")
    if fmt["type"] == "json_schema" and (not isinstance(spec, dict) or not isinstance(
            spec.get("schema"), dict) or not isinstance(spec.get("name", ""), str)):
        return [("response_format", "response_format {'type': 'json_schema'} needs "
                                    "'json_schema': {'name': '...', 'schema': {...}} (objects)")]
    return []


# vLLM's structured_outputs fields besides the constraint, accepted at their defaults (and
# `disable_fallback` at any value: there is no other backend to fall back to here)
_STRUCTURED_NO_OPS: dict[str, Any] = {"disable_any_whitespace": False,
                                      "disable_additional_properties": False,
                                      "whitespace_pattern": None, "structural_tag": None}


def structured_problems(structured: dict[str, Any] | None,
                        response_format: dict[str, Any] | None) -> list[tuple[str, str]]:
    """vLLM's structured_outputs: one of the constraints the engine reads (which checks their
    values: `ResponseFormat.structured`), vLLM's other fields at the values that are what this
    server does, and no response_format beside it."""
    if structured is None:
        return []
    if response_format is not None and response_format.get("type") != "text":
        return [("structured_outputs", "structured_outputs and response_format both constrain "
                                       "the answer; send one of them")]
    if set(structured) - set(STRUCTURED) - set(_STRUCTURED_NO_OPS) - {"disable_fallback"} or \
            sum(structured.get(k) not in (None, False) for k in STRUCTURED) != 1:
        return [("structured_outputs", "structured_outputs takes exactly one of choice, regex, "
                                       "json, grammar or json_object")]
    for name, default in _STRUCTURED_NO_OPS.items():
        if structured.get(name) not in (default, None):
            return [("structured_outputs", f"structured_outputs.{name} is supported at its "
                                           "default only; leave it unset")]
    return []


def tool_choice_problems(choice: Any, tools: list[dict[str, Any]] | None
                         ) -> list[tuple[str, str]]:
    """tool_choice: one of OpenAI's forms (the engine's parser decides which form was sent; the
    others it reads, a bare name or Anthropic's dicts, are not this API's), and tools to choose
    from when it asks for a call."""
    usage = ("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', "
             "'function': {'name': ...}}")
    try:
        parsed = parse_tool_choice(choice)
    except InputError:
        return [("tool_choice", usage)]
    if not parsed.openai:
        return [("tool_choice", usage)]
    if parsed.mode in ("required", "function") and not tools:
        return [("tool_choice", "tool_choice requires tools; pass the tools to choose from")]
    return []
