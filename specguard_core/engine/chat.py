"""Conversation in, prompt ids out; tool-call text in, verified `ToolCall` out.

Rendering uses the tokenizer's own chat template (`apply_chat_template(..., tools=...)`); parsing uses
the tokenizer's `response_template` (transformers' response parsing) where it has one, with a small
fallback for Hermes-style `<tool_call>{json}</tool_call>` blocks.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

import jsonschema

from specguard_core.types import ToolCall

Message = dict[str, Any]
ToolChoice = str | dict[str, Any] | None


class InputError(ValueError):
    """Bad input from the caller; the message says what to do."""


def normalise_messages(messages_or_prompt: str | Sequence[Message]) -> list[Message]:
    """A prompt string becomes one user message; a message list is checked and copied."""
    if isinstance(messages_or_prompt, str):
        if not messages_or_prompt.strip():
            raise InputError("the prompt is empty; pass a question or a list of chat messages")
        return [{"role": "user", "content": messages_or_prompt}]
    messages = [dict(m) for m in messages_or_prompt]
    if not messages:
        raise InputError("messages is empty; pass at least one {'role': 'user', 'content': ...}")
    for i, m in enumerate(messages):
        if m.get("role") not in {"system", "user", "assistant", "tool", "developer"}:
            raise InputError(f"message {i} has role {m.get('role')!r}; use system/user/assistant/tool")
    return messages


def check_tools(tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """OpenAI-style tool definitions, each checked to be a function with a valid JSON schema."""
    checked: list[dict[str, Any]] = []
    for i, tool in enumerate(tools or []):
        fn = tool.get("function") if tool.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InputError(
                f"tool {i} is not an OpenAI-style function tool "
                "({'type': 'function', 'function': {'name': ..., 'parameters': {...}}}); convert it with "
                "langchain_core.utils.function_calling.convert_to_openai_tool or LlamaIndex's to_openai_tool"
            )
        params = fn.get("parameters", {"type": "object", "properties": {}})
        try:
            jsonschema.Draft202012Validator.check_schema(params)
        except jsonschema.SchemaError as err:
            raise InputError(f"tool {fn['name']!r} has an invalid JSON schema: {err.message}") from None
        checked.append({"type": "function", "function": {**fn, "parameters": params}})
    return checked


def _arguments_as_dicts(messages: list[Message]) -> list[Message]:
    """Templates (Qwen, Llama) expect tool-call arguments as dicts; OpenAI messages carry JSON strings."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if calls:
            fixed = []
            for c in calls:
                fn = dict(c.get("function", c))
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"] or "{}")
                    except json.JSONDecodeError:
                        raise InputError(f"tool call {fn.get('name')!r} has arguments that are not "
                                         "JSON") from None
                fixed.append({**c, "type": "function", "function": fn})
            m = {**m, "tool_calls": fixed}
        if m.get("content") is None:
            m = {**m, "content": ""}
        out.append(m)
    return out


def render_prompt(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]],
                  forced_prefix: str = "") -> str:
    """The conversation as this tokenizer's chat template renders it, ready for the assistant turn."""
    if not getattr(tokenizer, "chat_template", None):
        if tools:
            raise InputError("this tokenizer has no chat template, so it cannot render tools")
        return "\n\n".join(str(m["content"]) for m in messages) + "\n\n" + forced_prefix
    try:
        text = tokenizer.apply_chat_template(
            _arguments_as_dicts(messages), tools=tools or None, tokenize=False,
            add_generation_prompt=True,
        )
    except Exception as err:  # jinja raises many types; the user needs the template's own message
        raise InputError(f"the chat template cannot render this conversation: {err}") from err
    return str(text) + forced_prefix


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
    data = json.loads(body, strict=False)
    if not isinstance(data, dict) or "name" not in data:
        raise ValueError('a tool call must be a JSON object with "name" and "arguments"')
    args = data.get("arguments", data.get("parameters", {}))
    if isinstance(args, str):
        args = json.loads(args)
    return {"name": data["name"], "arguments": args}


def _parse_with_template(tokenizer: Any, text: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    parsed = tokenizer.parse_response(text, prefix="", tools=tools)
    calls = parsed.get("tool_calls") or []
    if not calls:
        raise ValueError("the response parser found no tool call")
    fn = calls[0].get("function", calls[0])
    return {"name": fn["name"], "arguments": fn.get("arguments", {})}


def parse_tool_call(text: str, tools: list[dict[str, Any]], tokenizer: Any = None) -> ToolCall:
    """Parse one tool-call step and verify it: parses, names an offered tool, arguments validate.

    Never raises: an invalid call comes back with `error` set.
    """
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    try:
        if tokenizer is not None and getattr(tokenizer, "response_template", None):
            data = _parse_with_template(tokenizer, text, tools)
        else:
            data = _parse_hermes(text)
    except (ValueError, KeyError, TypeError) as err:
        return ToolCall(call_id, "", {}, raw=text, error=f"unparseable tool call: {err}")
    name, args = str(data["name"]), data["arguments"]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    if name not in schemas:
        return ToolCall(call_id, name, args if isinstance(args, dict) else {}, raw=text,
                        error=f"unknown tool {name!r}; offered: {sorted(schemas)}")
    if not isinstance(args, dict):
        return ToolCall(call_id, name, {}, raw=text, error="arguments must be a JSON object")
    try:
        jsonschema.validate(args, schemas[name])
    except jsonschema.ValidationError as err:
        return ToolCall(call_id, name, args, raw=text, error=f"arguments invalid: {err.message}")
    return ToolCall(call_id, name, args, raw=text)


def required_tool(tool_choice: ToolChoice, tools: list[dict[str, Any]]) -> str | None:
    """"*" when any tool call is required, a name when that tool is required, None otherwise.

    Accepts "auto", "none", "required", "any", a tool name, True, or OpenAI's
    {"type": "function", "function": {"name": ...}}.
    """
    if tool_choice in (None, "auto", "none", False) or not tools:
        return None
    if tool_choice in ("required", "any", True):
        return "*"
    name = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else str(tool_choice)
    if name not in {t["function"]["name"] for t in tools}:
        raise InputError(f"tool_choice names {name!r}, which is not among the tools offered")
    return name


def forced_call_prefix(required: str) -> str:
    """Text that makes a Hermes-style model continue with a tool call (of `required`, unless "*")."""
    if required == "*":
        return '<tool_call>\n{"name": "'
    return '<tool_call>\n{"name": ' + json.dumps(required) + ', "arguments": '
