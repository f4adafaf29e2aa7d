"""Conversation in, prompt ids out; tool-call text in, verified `ToolCall` out.

Rendering uses the tokenizer's own chat template (`apply_chat_template(..., tools=...)`); parsing uses
the tokenizer's `response_template` (transformers' response parsing) where it has one, with a small
fallback for Hermes-style `<tool_call>{json}</tool_call>` blocks.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jsonschema
from referencing.exceptions import Unresolvable

from specguard_core.text.errors import FREE_TEXT_LIMIT, InputError, quoted
from specguard_core.text.schema import json_problem, loads_untrusted, unresolvable_ref, validator
from specguard_core.text.tool_choice import ToolChoice, parse_tool_choice
from specguard_core.types import ToolCall

__all__ = ["InputError", "Message", "ToolChoice", "check_template_kwargs", "check_tools",
           "check_unicode", "content_text", "forced_call_prefix", "normalise_messages",
           "parse_tool_call", "render_prompt", "required_tool", "token_bytes"]

Message = dict[str, Any]

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


def check_tools(tools: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """OpenAI-style tool definitions, each checked to be a function with a unique name and a valid
    JSON schema whose references all resolve inside it (none is ever fetched)."""
    if isinstance(tools, (Mapping, str, bytes)):
        raise InputError("tools must be a list of tool definitions; wrap a single tool in a list")
    checked: list[dict[str, Any]] = []
    for i, tool in enumerate(tools or []):
        fn = tool.get("function") if isinstance(tool, Mapping) and \
            tool.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InputError(
                f"tool {i} is not an OpenAI-style function tool "
                "({'type': 'function', 'function': {'name': ..., 'parameters': {...}}}); convert it with "
                "langchain_core.utils.function_calling.convert_to_openai_tool or LlamaIndex's to_openai_tool"
            )
        name = fn["name"]
        if any(t["function"]["name"] == name for t in checked):
            raise InputError(f"two tools are named {quoted(name)}; tool names must be unique")
        check_unicode(tool, f"tool {quoted(name)}")
        params = fn.get("parameters")
        if params is None:  # omitted or null: no parameters, as OpenAI reads it
            params = {"type": "object", "properties": {}}
        elif not isinstance(params, Mapping):
            raise InputError(f"tool {quoted(name)} has parameters of type {type(params).__name__}; "
                             "pass a JSON schema object ({'type': 'object', 'properties': "
                             "{...}}), or None for a tool that takes no arguments")
        try:
            validator(params).check_schema(params)
            ref = unresolvable_ref(params)
        except jsonschema.SchemaError as err:
            raise InputError(f"tool {quoted(name)} has an invalid JSON schema: "
                             f"{quoted(err.message, FREE_TEXT_LIMIT)}; fix its parameters "
                             "(JSON Schema 2020-12 unless they name a $schema)") from None
        except RecursionError:
            raise InputError(f"tool {quoted(name)} has a JSON schema nested too deeply") from None
        if ref is not None:
            raise InputError(f"tool {quoted(name)} has a schema $ref {quoted(ref)} that does not "
                             "resolve inside the schema; SpecGuard never fetches schemas: inline "
                             "the definition under $defs")
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
                        fn["arguments"] = loads_untrusted(fn["arguments"] or "{}")
                    except (ValueError, RecursionError):
                        raise InputError(f"tool call {quoted(fn.get('name'))} has arguments "
                                         "that are not JSON") from None
                fixed.append({**c, "type": "function", "function": fn})
            m = {**m, "tool_calls": fixed}
        if m.get("content") is None:
            m = {**m, "content": ""}
        out.append(m)
    return out


# apply_chat_template's own parameters: not template variables
_RENDER_ARGS = frozenset({"conversation", "messages", "tools", "documents", "chat_template",
                          "add_generation_prompt", "continue_final_message", "tokenize", "padding",
                          "truncation", "max_length", "return_tensors", "return_dict",
                          "return_assistant_tokens_mask", "tokenizer_kwargs"})


def check_template_kwargs(template_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Extra chat-template variables (vLLM's `chat_template_kwargs`, e.g. Qwen3's
    `{"enable_thinking": False}`), checked: a mapping of names to values, none of them one of
    `apply_chat_template`'s own parameters; None is no variables."""
    if template_kwargs is None:
        return {}
    if not isinstance(template_kwargs, Mapping):
        raise InputError(f"chat_template_kwargs must be a dict of template variables (e.g. "
                         f"{{'enable_thinking': False}}), got {type(template_kwargs).__name__}")
    bad = sorted(str(k) for k in template_kwargs if not isinstance(k, str) or k in _RENDER_ARGS)
    if bad:
        shown = ", ".join(quoted(k) for k in bad[:5]) + (", ..." if len(bad) > 5 else "")
        raise InputError(f"chat_template_kwargs cannot set [{shown}]: the names must be strings, "
                         "and messages, tools and the rendering options are set by SpecGuard "
                         "itself")
    check_unicode(template_kwargs, "chat_template_kwargs")
    return dict(template_kwargs)


def render_prompt(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]],
                  template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The conversation as this tokenizer's chat template renders it, ready for the assistant turn;
    `template_kwargs` are extra template variables (`check_template_kwargs`), which a tokenizer
    without a chat template has no use for."""
    extra = check_template_kwargs(template_kwargs)
    if not getattr(tokenizer, "chat_template", None):
        if tools:
            raise InputError("this tokenizer has no chat template, so it cannot render tools")
        return "\n\n".join(str(m["content"]) for m in messages) + "\n\n"
    conversation = _arguments_as_dicts(messages)  # its own errors are not the template's
    try:
        text = tokenizer.apply_chat_template(
            conversation, tools=tools or None, tokenize=False, add_generation_prompt=True, **extra,
        )
    except Exception as err:  # jinja raises many types; the user needs the template's own message
        raise InputError("the chat template cannot render this conversation: "
                         f"{quoted(str(err), FREE_TEXT_LIMIT)}; change the messages to what "
                         "the template accepts (roles, their order, tool calls)") from err
    return str(text)


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


def required_tool(tool_choice: ToolChoice, tools: list[dict[str, Any]]) -> str | None:
    """"*" when any tool call is required, a name when that tool is required, None otherwise:
    `tool_choice` in any form `parse_tool_choice` reads, `tools` the checked tools offered."""
    return parse_tool_choice(tool_choice).required(tools)


def forced_call_prefix(required: str) -> str:
    """Text that makes a Hermes-style model continue with a tool call (of `required`, unless "*")."""
    if required == "*":
        return '<tool_call>\n{"name": "'
    return '<tool_call>\n{"name": ' + json.dumps(required) + ', "arguments": '


_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # SentencePiece byte fallback


def token_bytes(tokenizer: Any, token: int, text: str) -> bytes:
    """The bytes one token stands for: its decoded `text` in UTF-8, unless that text lost part of
    a multi-byte character ("\\ufffd"); then the token's own bytes, read from its vocabulary
    entry (byte-level BPE's alphabet, or SentencePiece's `<0xNN>`)."""
    if "\ufffd" not in text:
        return text.encode("utf-8")
    piece = tokenizer.convert_ids_to_tokens(token)
    if isinstance(piece, str):
        if match := _BYTE_TOKEN.match(piece):
            return bytes([int(match.group(1), 16)])
        byte_of = _byte_level_alphabet()
        if all(ch in byte_of for ch in piece):
            return bytes(byte_of[ch] for ch in piece)
    return text.encode("utf-8")


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in character -> the byte it stands for."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ch: b for b, ch in bytes_to_unicode().items()}
