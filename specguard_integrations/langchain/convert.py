"""LangChain <-> engine translation for `ChatSpecGuard`: messages in, tool choice, response
format, and committed steps out as `AIMessageChunk`s. Pure functions, no model calls."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import invalid_tool_call, tool_call, tool_call_chunk
from langchain_core.utils.function_calling import convert_to_json_schema

from specguard_core import GenerationResult, StepRecord, ToolCall
from specguard_core.text import formats
from specguard_core.text.errors import quoted
from specguard_core.text.steps import StepRules, strip_markers
from specguard_core.text.tool_calls import surfaced
from specguard_core.text.tool_choice import parse_tool_choice

_RULES = StepRules()
_SKIPPED_BLOCKS = {"reasoning", "thinking", "redacted_thinking", "tool_use", "tool_call",
                   "tool_call_chunk", "invalid_tool_call", "function_call"}
_MEDIA_BLOCKS = {"image", "image_url", "audio", "input_audio", "file", "video"}
# ---- LangChain messages -> engine messages ---------------------------------------------------
def _text(message: BaseMessage) -> str:
    """The message's text; reasoning and tool-use blocks are dropped, media is refused."""
    if isinstance(message.content, list):
        for block in message.content:
            kind = block.get("type") if isinstance(block, dict) else "text"
            if kind in _MEDIA_BLOCKS:
                raise ValueError(f"ChatSpecGuard takes text only; the {message.type} message has "
                                 f"a {kind!r} block")
            if kind not in _SKIPPED_BLOCKS | {"text"}:
                raise ValueError(f"ChatSpecGuard cannot use a {kind!r} content block")
    return message.text


def _engine_tool_calls(message: AIMessage) -> list[dict[str, Any]]:
    return [{"id": tc.get("id"), "type": "function",
             "function": {"name": tc["name"], "arguments": tc["args"]}}
            for tc in message.tool_calls]


def _tool_result(message: ToolMessage) -> str:
    text = _text(message)
    if message.status == "error" and not text.lower().startswith("error"):
        return f"Error: {text}"
    return text


def _chat_role(role: str) -> str:
    return {"human": "user", "ai": "assistant", "function": "tool"}.get(role, role)


def to_engine_message(message: BaseMessage) -> dict[str, Any]:
    """One LangChain message as the engine's OpenAI-style dict."""
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": _text(message)}
    if isinstance(message, HumanMessage):
        return {"role": "user", "content": _text(message)}
    if isinstance(message, AIMessage):
        out: dict[str, Any] = {"role": "assistant", "content": _text(message)}
        if message.tool_calls:
            out["tool_calls"] = _engine_tool_calls(message)
        return out
    if isinstance(message, ToolMessage):
        named = {"name": message.name} if message.name else {}
        return {"role": "tool", "content": _tool_result(message),
                "tool_call_id": message.tool_call_id, **named}
    if isinstance(message, FunctionMessage):
        return {"role": "tool", "content": _text(message), "name": message.name}
    if isinstance(message, ChatMessage):
        return {"role": _chat_role(message.role), "content": _text(message)}
    raise ValueError(f"ChatSpecGuard cannot convert a {type(message).__name__}")


def format_instruction(response_format: dict[str, Any]) -> str:
    """OpenAI's `response_format` as an instruction for the model (`formats.format_instruction`);
    a type other than json_schema/json_object is an error here."""
    instruction = formats.format_instruction(response_format)
    if instruction is None:
        raise ValueError(f"unsupported response_format {response_format!r}; use json_schema or "
                         "json_object")
    return instruction


# ---- tools and tool_choice -------------------------------------------------------------------
def normalise_tool_choice(choice: Any, tools: Sequence[dict[str, Any]]) -> str | dict[str, Any]:
    """Every `tool_choice` form LangChain passes (`parse_tool_choice` reads them: "any"/
    "required"/True, "auto"/None/False, "none", a name, OpenAI's and Anthropic's dicts), as the
    engine's "auto", "none", "required" or a tool name (OpenAI's dict for a tool named like a
    mode); a name must be one of the bound `tools`."""
    parsed = parse_tool_choice(choice)
    names = sorted(t["function"]["name"] for t in tools)
    if parsed.mode == "function" and parsed.name not in names:
        raise ValueError(f"tool_choice names {quoted(parsed.name)}, which is not among the bound "
                         f"tools {names}")
    return parsed.engine_value()


# ---- engine steps -> LangChain chunks ------------------------------------------------------
def _call_args(call: ToolCall) -> str:
    """A call that parsed to a name carries its JSON arguments (it is a tool call, valid or not);
    one that did not parse, its raw text (so the merged stream keeps it an invalid tool call)."""
    return json.dumps(call.arguments, ensure_ascii=False) if call.shown else call.raw


def _visible(before: str, text: str, stops: Sequence[str]) -> str:
    """The part of `text` (committed after `before`) that precedes the first stop string."""
    full = before + text
    cut = min((full.find(s) for s in stops if s and s in full), default=len(full))
    return full[len(before):max(cut, len(before))]


def _usage(result: GenerationResult) -> UsageMetadata:
    usage = UsageMetadata(input_tokens=result.usage.prompt_tokens,
                          output_tokens=result.usage.completion_tokens,
                          total_tokens=result.usage.total_tokens)
    reasoning = sum(len(s.token_ids) for s in result.steps if s.kind == "reasoning")
    if reasoning:
        usage["output_token_details"] = {"reasoning": reasoning}
    return usage


def final_chunk(result: GenerationResult) -> AIMessageChunk:
    """The stream's last chunk: finish reason, model, the run's stats, usage and, for each tool
    call that failed verification, its error under `specguard_tool_call_errors` (call id ->
    error; the call itself is in `tool_calls` when it names a tool)."""
    metadata: dict[str, Any] = {"finish_reason": result.finish_reason,
                                "model_name": result.model_name, "model_provider": "specguard",
                                "specguard": result.stats.to_dict()}
    errors = {c.id: c.error for c in result.calls_written if c.error}
    if errors:
        metadata["specguard_tool_call_errors"] = errors
    return AIMessageChunk(content="", chunk_position="last", usage_metadata=_usage(result),
                          response_metadata=metadata)


class Translator:
    """Turns one run's steps into chunks: answer text (cut at stop strings, leading whitespace of
    the answer dropped), reasoning, tool-call chunks with their index in the message. Each
    chunk's `response_metadata["specguard_steps"]` holds its step's
    `StepRecord.trace()`."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops, self.raw, self.answered, self.n_calls = tuple(stops), "", False, 0

    def chunk(self, step: StepRecord) -> AIMessageChunk:
        visible = _visible(self.raw, step.text, self.stops)
        self.raw += step.text
        meta = {"specguard_steps": [step.trace()]}
        if step.kind == "reasoning":
            return AIMessageChunk(content="", response_metadata=meta, additional_kwargs={
                "reasoning_content": strip_markers(visible, _RULES)})
        if step.kind == "tool_call" and step.tool_call is not None:
            call = step.tool_call
            self.n_calls += 1
            return AIMessageChunk(content="", response_metadata=meta, tool_call_chunks=[
                tool_call_chunk(name=call.name, args=_call_args(call), id=call.id,
                                index=self.n_calls - 1)])
        text = visible if self.answered else visible.lstrip()
        self.answered = self.answered or bool(text)
        return AIMessageChunk(content=text, response_metadata=meta)


def final_message(chunks: list[AIMessageChunk], result: GenerationResult) -> AIMessage:
    """The aggregated stream, with the engine's final answer text and its tool calls (in the
    order they were written): `tool_calls` holds every call that parsed to a
    name and an object of arguments, verified or not (`final_chunk` keeps the verification
    errors), so the agent's tool node answers a misspelt or schema-breaking call and the model
    retries; only calls that did not parse are `invalid_tool_calls`."""
    merged = chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0]
    extra = {"reasoning_content": result.reasoning} if result.reasoning else {}
    calls = result.calls_written
    named = surfaced(calls)
    unparsed = [c for c in calls if not c.shown]
    return AIMessage(
        content=result.text, additional_kwargs=extra, response_metadata=merged.response_metadata,
        usage_metadata=merged.usage_metadata, id=merged.id,
        tool_calls=[tool_call(name=c.name, args=c.arguments, id=c.id) for c in named],
        invalid_tool_calls=[invalid_tool_call(name=c.name or None, args=c.raw, id=c.id,
                                              error=c.error) for c in unparsed],
    )


# ---- structured output ----------------------------------------------------------------------
def response_format_for(schema: dict[str, Any] | type | None, method: str,
                        strict: bool | None = None) -> dict[str, Any]:
    """OpenAI's `response_format` for `with_structured_output`; `strict=True` (json_schema)
    constrains every token of the answer to the schema (the engine's constrained decoding)."""
    if method == "json_mode" or schema is None:
        return {"type": "json_object"}
    json_schema = convert_to_json_schema(schema)
    spec: dict[str, Any] = {"name": json_schema.get("title", "response"), "schema": json_schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}
