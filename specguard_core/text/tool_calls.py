"""Tool-call text in, verified `ToolCall` out; and the text that starts a forced call.

Parsing uses the tokenizer's `response_template` (transformers' response parsing) where it has
one, with a small fallback for Hermes-style `<tool_call>{json}</tool_call>` blocks (bare or fenced
JSON too). The text is model output: parsing never raises.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import jsonschema
from referencing.exceptions import Unresolvable

from specguard_core.text.schema import json_problem, loads_untrusted, validator
from specguard_core.types import ToolCall

__all__ = ["forced_call_prefix", "parse_tool_call"]

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _parse_hermes(text: str) -> dict[str, Any]:
    """A Hermes `<tool_call>{json}</tool_call>` block, or a bare/fenced JSON call."""
    m = _HERMES.search(text)
    body = text.strip()
    if m:
        body = m.group(1)
    elif fenced := _FENCE.match(body):
        body = fenced.group(1)
    elif not body.startswith("{"):
        raise ValueError("no <tool_call> block")
    data = loads_untrusted(body)
    if not isinstance(data, dict) or "name" not in data:
        raise ValueError('a tool call must be a JSON object with "name" and "arguments"')
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        args = loads_untrusted(args)
    return {"name": data["name"], "arguments": args}


def _parse_with_template(tokenizer: Any, text: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    parsed = tokenizer.parse_response(text, prefix="", tools=tools)
    calls = parsed.get("tool_calls") or []
    if not calls:
        raise ValueError("the response parser found no tool call")
    fn = calls[0].get("function", calls[0])
    return {"name": fn["name"], "arguments": fn.get("arguments", {})}


def parse_tool_call(text: str, tools: list[dict[str, Any]], tokenizer: Any = None) -> ToolCall:
    """Parse one tool-call step and verify it: parses, names an offered tool, arguments are plain
    JSON (finite numbers, at most `MAX_JSON_DEPTH` deep) and validate against the tool's schema.

    Never raises: the text is model output, so any failure comes back as a call with `error` set.
    """
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    try:
        if tokenizer is not None and getattr(tokenizer, "response_template", None):
            data = _parse_with_template(tokenizer, text, tools)
        else:
            data = _parse_hermes(text)
    except RecursionError:
        return ToolCall(call_id, "", {}, raw=text, error="unparseable tool call: nested too deeply")
    except Exception as err:  # noqa: BLE001 - untrusted text through a template parser: any error
        return ToolCall(call_id, "", {}, raw=text, error=f"unparseable tool call: {err}")
    name, args = data["name"], data["arguments"]
    if not isinstance(name, str):
        return ToolCall(call_id, "", {}, raw=text, error="the tool name must be a JSON string")
    problem = json_problem(args) if isinstance(args, dict) else "arguments must be a JSON object"
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    if name not in schemas:
        return ToolCall(call_id, name, {} if problem else args, raw=text,
                        error=f"unknown tool {name!r}; offered: {sorted(schemas)}")
    if problem:
        return ToolCall(call_id, name, {}, raw=text, error=f"arguments invalid: {problem}")
    try:
        validator(schemas[name]).validate(args)
    except jsonschema.ValidationError as err:
        return ToolCall(call_id, name, args, raw=text, error=f"arguments invalid: {err.message}")
    except (Unresolvable, RecursionError) as err:  # check_tools refuses these schemas; kept safe
        return ToolCall(call_id, name, {}, raw=text, error=f"schema cannot be checked: {err!r:.200}")
    return ToolCall(call_id, name, args, raw=text)


def forced_call_prefix(required: str) -> str:
    """Text that makes a Hermes-style model continue with a tool call (of `required`, unless "*")."""
    if required == "*":
        return '<tool_call>\n{"name": "'
    return '<tool_call>\n{"name": ' + json.dumps(required) + ', "arguments": '
