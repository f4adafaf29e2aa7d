"""LlamaIndex <-> engine translation for `SpecGuardLLM`: `ChatMessage`s in (text, `ToolCallBlock`s,
legacy `tool_calls`, tool results), tool selections and `ChatResponse`s out. No model calls."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llama_index.core.base.llms.types import (
    CachePoint,
    ChatMessage,
    ChatResponse,
    LogProb,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.llms.llm import ToolSelection

from specguard_core.text.logprobs import RunTokens, TokenEntry, finite
from specguard_core.text.steps import StepRules, strip_markers
from specguard_core.text.tool_calls import surfaced
from specguard_core.types import GenerationResult, StepRecord, ToolCall

EngineMessage = dict[str, Any]
_ROLES = {"chatbot": "assistant", "model": "assistant", "function": "tool"}
_NOT_TEXT = (ThinkingBlock, ToolCallBlock, CachePoint)  # carried elsewhere or dropped
_THINK = StepRules()  # only its <think> markers are used, to strip them from reasoning deltas


# ---- LlamaIndex messages -> engine messages ----------------------------------------------------
def to_engine_messages(messages: Sequence[ChatMessage]) -> list[EngineMessage]:
    """OpenAI-style dicts, as `SpecGuardEngine.stream` takes them."""
    return [_to_engine_message(m) for m in messages]


def _to_engine_message(message: ChatMessage) -> EngineMessage:
    role = _ROLES.get(message.role.value, message.role.value)
    out: EngineMessage = {"role": role, "content": _text_of(message)}
    calls = _calls_of(message)
    if calls:
        out["tool_calls"] = calls
    call_id = message.additional_kwargs.get("tool_call_id")
    if role == "tool" and call_id:
        out["tool_call_id"] = str(call_id)
    return out


def _text_of(message: ChatMessage) -> str:
    parts = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif not isinstance(block, _NOT_TEXT):
            raise ValueError(f"SpecGuardLLM takes text only; a {message.role.value} message has a "
                             f"{block.block_type!r} block")
    return "\n".join(parts)  # as ChatMessage.content joins text blocks


def _calls_of(message: ChatMessage) -> list[dict[str, Any]]:
    blocks = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
    if blocks:
        return [_openai_call(b.tool_call_id, b.tool_name, b.tool_kwargs) for b in blocks]
    return [_legacy_call(c) for c in message.additional_kwargs.get("tool_calls") or []]


def _openai_call(call_id: str | None, name: str, arguments: dict[str, Any] | str
                 ) -> dict[str, Any]:
    return {"id": call_id or name, "type": "function",
            "function": {"name": name, "arguments": _arguments(name, arguments)}}


def _legacy_call(call: Any) -> dict[str, Any]:
    """OpenAI tool-call objects or dicts (`{"id", "function": {...}}` or flat `{"name", ...}`)."""
    data = _as_dict(call)
    fn = _as_dict(data.get("function") or data)
    if not fn.get("name"):
        raise ValueError(f"a tool call in additional_kwargs['tool_calls'] has no name: {data!r}")
    return _openai_call(data.get("id"), str(fn["name"]), fn.get("arguments") or {})


def _as_dict(obj: Any) -> dict[str, Any]:
    dumped = obj.model_dump() if hasattr(obj, "model_dump") else obj
    if not isinstance(dumped, dict):
        raise ValueError(f"expected a tool call mapping, got {type(obj).__name__}")
    return dumped


def _arguments(name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        raise ValueError(f"tool call {name!r} has arguments that are not JSON: "
                         f"{arguments!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"tool call {name!r} has arguments that are not a JSON object")
    return value


# ---- responses -> tool selections --------------------------------------------------------------
def tool_selections(message: ChatMessage) -> list[ToolSelection]:
    """The message's tool calls (`ToolCallBlock`s, else legacy `additional_kwargs`)."""
    return [
        ToolSelection(tool_id=c["id"], tool_name=c["function"]["name"],
                      tool_kwargs=c["function"]["arguments"])
        for c in _calls_of(message)
    ]


# ---- engine output -> LlamaIndex responses -----------------------------------------------------
def _message(content: str, thinking: str, calls: Sequence[ToolCall]) -> ChatMessage:
    """The assistant message; tool calls as `ToolCallBlock`s and, as OpenAI's adapter also does,
    in `additional_kwargs["tool_calls"]` (read by LlamaIndex's streaming structured output)."""
    blocks: list[Any] = [ThinkingBlock(content=thinking)] if thinking else []
    blocks.append(TextBlock(text=content))
    blocks += [ToolCallBlock(tool_call_id=c.id, tool_name=c.name, tool_kwargs=c.arguments)
               for c in calls]
    legacy = {"tool_calls": [_legacy_dict(c) for c in calls]} if calls else {}
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks, additional_kwargs=legacy)


def _legacy_dict(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def trace(result: GenerationResult) -> dict[str, Any]:
    """The SpecGuard trace of a finished call (`additional_kwargs["specguard"]`): the one trace
    schema (`GenerationResult.trace()`) plus the calls that failed verification."""
    return {**result.trace(),
            "invalid_tool_calls": [asdict(c) for c in result.invalid_tool_calls]}


def logprob_rows(entries: Sequence[TokenEntry]) -> list[list[LogProb]]:
    """LlamaIndex's `[[LogProb]]`: per position the chosen token, then the other most likely
    ones (`top_logprobs`) with their log-probabilities."""
    return [[LogProb(token=e.token, logprob=finite(e.logprob or 0.0), bytes=list(e.raw))] +
            [LogProb(token=t, logprob=finite(lp), bytes=list(b)) for t, b, lp in e.top
             if t != e.token] for e in entries]


def chat_response(result: GenerationResult, logprobs: Sequence[TokenEntry] | None = None,
                  raw: bool = False) -> ChatResponse:
    """The finished turn; `logprobs` (the answer's tokens: `text.logprobs.RunTokens`) as
    `logprob_rows`. `raw` (a completion of a formatted prompt): the content is everything
    written, as it was written (`GenerationResult.raw_text`)."""
    usage = result.usage
    content, thinking = (result.raw_text, "") if raw else (result.text, result.reasoning)
    return ChatResponse(
        logprobs=None if logprobs is None else logprob_rows(logprobs),
        message=_message(content, thinking, surfaced(result.calls_written)),
        raw={"model": result.model_name, "finish_reason": result.finish_reason,
             "usage": _usage(usage.prompt_tokens, usage.completion_tokens)},
        additional_kwargs={"specguard": trace(result)},
    )


@dataclass
class Turn:
    """The assistant turn as steps are committed: one `ChatResponse` per step."""

    prompt_tokens: int
    content: str = ""
    thinking: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    completion_tokens: int = 0
    last: ChatResponse | None = None
    tokens: RunTokens | None = None  # logprobs asked for: each chunk carries its tokens'
    raw: bool = False  # a completion of a formatted prompt: every step is text, as written

    def add(self, step: StepRecord) -> ChatResponse:
        """The chunk for one committed step (its delta, the message so far, its tokens)."""
        self.completion_tokens += len(step.token_ids)
        delta, thinking_delta = "", None
        if self.tokens is not None:
            self.tokens.add(step)
        if self.raw:
            delta = step.text
            self.content += delta
        elif step.kind == "answer":
            delta = step.text
            self.content += delta
        elif step.kind == "reasoning":
            thinking_delta = strip_markers(step.text, _THINK)
            self.thinking += thinking_delta
        elif step.tool_call is not None:
            self.calls += surfaced([step.tool_call])
        self.last = ChatResponse(
            message=_message(self.content if self.raw else self.content.strip(),
                             self.thinking.strip(), self.calls),
            delta=delta,
            logprobs=None if self.tokens is None else logprob_rows(self.tokens.take()),
            raw={"usage": _usage(self.prompt_tokens, self.completion_tokens)},
            additional_kwargs={"thinking_delta": thinking_delta,
                               "specguard_step": step.trace()},
        )
        return self.last

    def finish(self, result: GenerationResult) -> ChatResponse | None:
        """At the end of the stream: the last chunk already sent now carries the finished call
        (message, raw, whole trace) and None is returned; with no step streamed, the finished
        call is returned as the one chunk to send."""
        final = chat_response(result, raw=self.raw)
        if self.last is None:
            return final
        self.last.message, self.last.raw = final.message, final.raw
        self.last.additional_kwargs.update(final.additional_kwargs)
        return None
