"""Tool-call text in, verified `ToolCall` out; and the text that starts a forced call.

Parsing is transformers' response parsing with a response template (`response_template`: the
tokenizer's own, else the one transformers ships for the model's type: Qwen2/2.5/3, Qwen3.5,
Gemma 4). Without a template, and for a bare or fenced JSON call that a template does not see as
one, a small Hermes parser reads `<tool_call>{json}</tool_call>` blocks. The text is model output:
parsing never raises.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

import jsonschema
from referencing.exceptions import Unresolvable

from specguard_core.text.schema import json_problem, loads_untrusted, validator
from specguard_core.types import ToolCall

__all__ = ["forced_call_prefix", "parse_tool_call", "response_template", "surfaced"]

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


def response_template(tokenizer: Any, *models: Any) -> dict[str, Any] | None:
    """The response template to parse `tokenizer`'s model output with: the tokenizer's own
    `response_template`, else the one transformers ships (the fallbacks of `transformers serve`)
    for the type (`config.model_type`) of the first of `models` that has one, else None (the
    Hermes parser)."""
    own = getattr(tokenizer, "response_template", None)
    model_type = next((t for m in models if isinstance(
        t := getattr(getattr(m, "config", None), "model_type", None), str)), None)
    if own or not model_type:
        return own or None
    try:  # transformers' table of shipped templates by model type (no public name yet)
        from transformers.cli.serving.utils import _RESPONSE_TEMPLATE_FALLBACKS as shipped
    except ImportError:
        return None
    return next((dict(t) for types, t in shipped.items() if model_type in types), None)


def _parse_with_template(template: dict[str, Any], text: str, tools: list[dict[str, Any]],
                         tokenizer: Any) -> dict[str, Any] | None:
    """The first call transformers' response parser finds in `text` (the tokenizer's
    `parse_response`, or the same parser without a tokenizer); None when it finds none."""
    if tokenizer is not None and hasattr(tokenizer, "parse_response"):
        parsed = tokenizer.parse_response(text, schema=template, prefix="", tools=tools)
    else:
        from transformers.utils.chat_parsing import parse_response

        parsed = parse_response(text, template, prefix="", tools=list(tools))
    calls = parsed.get("tool_calls") or []
    if not calls:
        return None
    fn = calls[0].get("function", calls[0])
    if not isinstance(fn, dict) or "name" not in fn:
        raise ValueError('a tool call must be a JSON object with "name" and "arguments"')
    return {"name": fn["name"], "arguments": fn.get("arguments", {})}


def parse_tool_call(text: str, tools: list[dict[str, Any]], tokenizer: Any = None,
                    template: dict[str, Any] | None = None) -> ToolCall:
    """Parse one tool-call step and verify it: parses, names an offered tool, arguments are plain
    JSON (finite numbers, at most `MAX_JSON_DEPTH` deep) and validate against the tool's schema.
    `template`: the response template (`response_template`); None: `tokenizer`'s own, if any.

    Never raises: the text is model output, so any failure comes back as a call with `error` set.
    """
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    template = template or getattr(tokenizer, "response_template", None)
    try:
        data = _parse_with_template(template, text, tools, tokenizer) if template else None
        if data is None:  # no template, or a bare or fenced JSON call the template does not see
            data = _parse_hermes(text)
    except RecursionError:
        return ToolCall(call_id, "", {}, raw=text, error="unparseable tool call: nested too deeply")
    except Exception as err:  # noqa: BLE001 - untrusted text through a template parser: any error
        return ToolCall(call_id, "", {}, raw=text, error=f"unparseable tool call: {err!s:.300}")
    name, args = data["name"], data["arguments"]
    if not isinstance(name, str):
        return ToolCall(call_id, "", {}, raw=text, error="the tool name must be a JSON string")
    problem = json_problem(args) if isinstance(args, dict) else "arguments must be a JSON object"
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    if name not in schemas:
        return ToolCall(call_id, name, {} if problem else args, raw=text,
                        error=f"unknown tool {name!r}; offered: {sorted(schemas)}",
                        named=problem is None and json_problem(name) is None)
    if problem:
        return ToolCall(call_id, name, {}, raw=text, error=f"arguments invalid: {problem}")
    try:
        validator(schemas[name]).validate(args)
    except jsonschema.ValidationError as err:
        return ToolCall(call_id, name, args, raw=text, error=f"arguments invalid: {err.message}",
                        named=True)
    except (Unresolvable, RecursionError) as err:  # check_tools refuses these schemas; kept safe
        return ToolCall(call_id, name, {}, raw=text, error=f"schema cannot be checked: {err!r:.200}")
    return ToolCall(call_id, name, args, raw=text)


def forced_call_prefix(required: str) -> str:
    """Text that makes a Hermes-style model continue with a tool call (of `required`, unless "*")."""
    if required == "*":
        return '<tool_call>\n{"name": "'
    return '<tool_call>\n{"name": ' + json.dumps(required) + ', "arguments": '


def surfaced(calls: Sequence[ToolCall]) -> list[ToolCall]:
    """The calls an agent sees as tool calls (`ToolCall.shown`), in order."""
    return [c for c in calls if c.shown]
