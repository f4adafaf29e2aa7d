"""Conversation in, prompt text out: tools and template variables checked, then rendered.

Rendering uses the tokenizer's own chat template (`apply_chat_template(..., tools=...)`). The
message checks (`messages`), tool-call parsing (`tool_calls`) and token bytes (`tokens`) live
in their own modules and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specguard_core.text.errors import FREE_TEXT_LIMIT, InputError, quoted
from specguard_core.text.messages import (
    Message,
    RawPrompt,
    check_unicode,
    content_text,
    normalise_messages,
)
from specguard_core.text.schema import loads_untrusted, schema_problem
from specguard_core.text.tokens import token_bytes
from specguard_core.text.tool_calls import forced_call_prefix, parse_tool_call
from specguard_core.text.tool_choice import ToolChoice, parse_tool_choice

__all__ = ["InputError", "Message", "RawPrompt", "ToolChoice", "check_template_kwargs",
           "check_tools", "check_unicode", "content_text", "continues", "forced_call_prefix",
           "normalise_messages", "offered_tools", "parse_tool_call", "render_prompt",
           "required_tool", "token_bytes"]


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
        if fn.get("strict") is not None and not isinstance(fn["strict"], bool):
            raise InputError(f"tool {quoted(name)} has strict={quoted(fn['strict'])}; strict must "
                             "be true (arguments constrained to the schema) or false")
        params = fn.get("parameters")
        if params is None:  # omitted or null: no parameters, as OpenAI reads it
            params = {"type": "object", "properties": {}}
        elif not isinstance(params, Mapping):
            raise InputError(f"tool {quoted(name)} has parameters of type {type(params).__name__}; "
                             "pass a JSON schema object ({'type': 'object', 'properties': "
                             "{...}}), or None for a tool that takes no arguments")
        if (problem := schema_problem(params, f"tool {quoted(name)}")) is not None:
            raise InputError(problem)
        checked.append({"type": "function", "function": {**fn, "parameters": params}})
    return checked


def _arguments_as_dicts(messages: list[Message]) -> list[Message]:
    """Templates (Qwen, Llama) expect tool-call arguments as dicts; OpenAI messages carry JSON strings."""
    out = []
    for i, m in enumerate(messages):
        calls = m.get("tool_calls")
        if calls:
            fixed = []
            for j, c in enumerate(calls):
                fn = dict(c.get("function", c))
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = loads_untrusted(fn["arguments"] or "{}")
                    except (ValueError, RecursionError):
                        raise InputError(f"tool call {quoted(fn.get('name'))} has arguments "
                                         "that are not JSON") from None
                    # a JSON escape can spell a lone surrogate the string itself did not hold
                    check_unicode(fn["arguments"], f"message {i}, tool call {j} (its arguments)")
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


def continues(messages: list[Message], flag: bool | None = None) -> bool:
    """Whether the reply continues the conversation's final message (an assistant prefill,
    transformers' `continue_final_message`): `flag` when given, else whether that message is the
    assistant's, with text and no tool calls (as transformers' pipeline and Ollama decide).
    Continuing any other message is an InputError."""
    last = messages[-1] if messages else {}
    prefill = last.get("role") == "assistant" and bool(last.get("content")) and \
        not last.get("tool_calls")
    if flag is None:
        return prefill
    if flag and not prefill:
        raise InputError("continue_final_message needs the conversation to end with an "
                         "assistant message that has text (and no tool calls) to continue; "
                         "drop the flag to start a new assistant turn")
    return bool(flag)


def render_prompt(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]],
                  template_kwargs: Mapping[str, Any] | None = None,
                  continue_final: bool = False) -> str:
    """The conversation as this tokenizer's chat template renders it, ready for the assistant turn
    (or, with `continue_final`, ending inside the final assistant message, its text left open for
    the reply to continue); `template_kwargs` are extra template variables
    (`check_template_kwargs`), which a tokenizer without a chat template has no use for."""
    extra = check_template_kwargs(template_kwargs)
    if not getattr(tokenizer, "chat_template", None):
        if tools:
            raise InputError("this tokenizer has no chat template, so it cannot render tools")
        return "\n\n".join(str(m["content"]) for m in messages) + ("" if continue_final
                                                                   else "\n\n")
    conversation = _arguments_as_dicts(messages)  # its own errors are not the template's
    try:
        text = tokenizer.apply_chat_template(
            conversation, tools=tools or None, tokenize=False,
            add_generation_prompt=not continue_final, continue_final_message=continue_final,
            **extra,
        )
    except Exception as err:  # jinja raises many types; the user needs the template's own message
        raise InputError("the chat template cannot render this conversation: "
                         f"{quoted(str(err), FREE_TEXT_LIMIT)}; change the messages to what "
                         "the template accepts (roles, their order, tool calls)") from err
    return str(text)


def offered_tools(tools: Sequence[dict[str, Any]] | None, tool_choice: ToolChoice
                  ) -> tuple[list[dict[str, Any]], str | None]:
    """The tools the model is shown, checked (none when `tool_choice` is "none" in any form), and
    what `tool_choice` requires of them (as `required_tool`); the choice is read once."""
    choice = parse_tool_choice(tool_choice)
    checked = [] if choice.mode == "none" else check_tools(tools)
    return checked, choice.required(checked)


def required_tool(tool_choice: ToolChoice, tools: list[dict[str, Any]]) -> str | None:
    """"*" when any tool call is required, a name when that tool is required, None otherwise:
    `tool_choice` in any form `parse_tool_choice` reads, `tools` the checked tools offered."""
    return parse_tool_choice(tool_choice).required(tools)
