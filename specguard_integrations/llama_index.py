"""LlamaIndex adapter: `SpecGuardLLM`, a `FunctionCallingLLM` over a `SpecGuardEngine`.

Translation only (every algorithmic decision lives in `specguard_core`):

- LlamaIndex `ChatMessage`s become OpenAI-style message dicts (text blocks, `ToolCallBlock`s or the
  legacy `additional_kwargs["tool_calls"]`, `role="tool"` results with their `tool_call_id`);
  tools become OpenAI tool dicts through LlamaIndex's own `to_openai_tool`.
- Each committed `StepRecord` becomes one streamed `ChatResponse`: `delta` (the step's answer
  text), the accumulated message (`ThinkingBlock` for `<think>` reasoning, `TextBlock`,
  `ToolCallBlock`s), `additional_kwargs["thinking_delta"]`, the step's trace in
  `additional_kwargs["specguard_step"]` and the running token usage in `raw["usage"]` (which
  `TokenCountingHandler` reads).
- A finished call carries the whole trace (steps, stats, finish reason) in
  `additional_kwargs["specguard"]`. When a stream is exhausted its last chunk is completed in place
  (message, `raw`, trace) so that it equals what `chat()` returns for the same request.

Async methods run the engine in a worker thread and never block the event loop; closing (or
abandoning) a stream stops generation at the next step boundary and frees the engine.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

try:
    from llama_index.core.base.llms.generic_utils import (
        achat_to_completion_decorator,
        astream_chat_to_completion_decorator,
        chat_to_completion_decorator,
        stream_chat_to_completion_decorator,
    )
    from llama_index.core.base.llms.types import (
        CachePoint,
        ChatMessage,
        ChatResponse,
        ChatResponseAsyncGen,
        ChatResponseGen,
        CompletionResponse,
        CompletionResponseAsyncGen,
        CompletionResponseGen,
        LLMMetadata,
        MessageRole,
        TextBlock,
        ThinkingBlock,
        ToolCallBlock,
    )
    from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
    from llama_index.core.constants import DEFAULT_CONTEXT_WINDOW
    from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
    from llama_index.core.llms.function_calling import FunctionCallingLLM
    from llama_index.core.llms.llm import ToolSelection
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "SpecGuardLLM needs LlamaIndex; install it with `pip install 'specguard[llamaindex]'`"
    ) from err

from specguard_core.config import SpecGuardConfig
from specguard_core.steps import StepRules, strip_markers
from specguard_core.types import GenerationResult, StepRecord, ToolCall

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

    from specguard_core.engine import GenerationStream, SpecGuardEngine

__all__ = ["SpecGuardLLM", "to_engine_messages", "tool_selections", "trace"]

EngineMessage = dict[str, Any]
_ROLES = {"chatbot": "assistant", "model": "assistant", "function": "tool"}
_NOT_TEXT = (ThinkingBlock, ToolCallBlock, CachePoint)  # carried elsewhere or dropped
_THINK = StepRules()  # only its <think> markers are used, to strip them from reasoning deltas
_END = object()


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
    """The SpecGuard trace of a finished call (`additional_kwargs["specguard"]`)."""
    return {
        "model": result.model_name,
        "finish_reason": result.finish_reason,
        "steps": [s.to_dict() for s in result.steps],
        "stats": result.stats.to_dict(),
        "invalid_tool_calls": [asdict(c) for c in result.invalid_tool_calls],
    }


def _response(result: GenerationResult) -> ChatResponse:
    usage = result.usage
    return ChatResponse(
        message=_message(result.text, result.reasoning, result.tool_calls),
        raw={"model": result.model_name, "finish_reason": result.finish_reason,
             "usage": _usage(usage.prompt_tokens, usage.completion_tokens)},
        additional_kwargs={"specguard": trace(result)},
    )


def _complete(last: ChatResponse, final: ChatResponse) -> None:
    """Make the last streamed chunk carry the finished call (message, raw, whole trace)."""
    last.message, last.raw = final.message, final.raw
    last.additional_kwargs.update(final.additional_kwargs)


@dataclass
class _Turn:
    """The assistant turn as steps are committed: one `ChatResponse` per step."""

    prompt_tokens: int
    content: str = ""
    thinking: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    completion_tokens: int = 0

    def add(self, step: StepRecord) -> ChatResponse:
        self.completion_tokens += len(step.token_ids)
        delta, thinking_delta = "", None
        if step.kind == "answer":
            delta = step.text
            self.content += delta
        elif step.kind == "reasoning":
            thinking_delta = strip_markers(step.text, _THINK)
            self.thinking += thinking_delta
        elif step.tool_call is not None and step.tool_call.valid:
            self.calls.append(step.tool_call)
        return ChatResponse(
            message=_message(self.content.strip(), self.thinking.strip(), self.calls),
            delta=delta,
            raw={"usage": _usage(self.prompt_tokens, self.completion_tokens)},
            additional_kwargs={"thinking_delta": thinking_delta,
                               "specguard_step": step.to_dict()},
        )


def _stream_responses(stream: GenerationStream, turn: _Turn) -> ChatResponseGen:
    last = None
    with stream:  # leaving early (close, garbage collection) stops the engine
        for step in stream:
            last = turn.add(step)
            yield last
    final = _response(stream.result)
    if last is None:
        yield final
    else:
        _complete(last, final)


async def _astream_responses(stream: GenerationStream, turn: _Turn) -> ChatResponseAsyncGen:
    last = None
    async with aclosing(_asteps(stream)) as steps:
        async for step in steps:
            last = turn.add(step)
            yield last
    final = _response(stream.result)
    if last is None:
        yield final
    else:
        _complete(last, final)


async def _asteps(stream: GenerationStream) -> AsyncGenerator[StepRecord, None]:
    """The stream's steps, produced by a worker thread (one per request, so requests waiting for
    the engine never starve the default executor). Closing this generator stops the engine."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()
    worker = threading.Thread(target=_pump, args=(stream, loop, queue), daemon=True,
                              name="specguard-llama-index")
    worker.start()
    try:
        while (item := await queue.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield cast(StepRecord, item)
    finally:
        stream.close()


def _pump(stream: GenerationStream, loop: asyncio.AbstractEventLoop,
          queue: asyncio.Queue[object]) -> None:
    def put(item: object) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            stream.close()
            return False
        return True

    try:
        for step in stream:
            if not put(step):
                return
    except Exception as err:  # handed to the awaiting side, which raises it
        put(err)
        return
    put(_END)


# ---- the LLM -----------------------------------------------------------------------------------
class SpecGuardLLM(FunctionCallingLLM):
    """SpecGuard (step-level speculative reasoning) as a LlamaIndex function-calling chat LLM.

    Pass a loaded engine (`SpecGuardLLM(engine=engine)`; one engine can back several adapters and
    concurrent callers), or `draft=` and `target=` to load the pair lazily on first use.
    `generate_kwargs` are `SpecGuardConfig` overrides for every call; per-call keyword arguments to
    `chat`/`stream_chat`/... override them again.
    """

    model_config = ConfigDict(protected_namespaces=())

    draft: str | None = Field(default=None, description="draft model (id, folder or .gguf)")
    target: str | None = Field(default=None, description="target model (id, folder or .gguf)")
    device: str = Field(default="auto", description="device for lazy loading")
    dtype: str = Field(default="auto", description="dtype for lazy loading")
    preset: str | None = Field(default=None, description="config preset for lazy loading")
    max_new_tokens: int | None = Field(default=None, ge=1, description="max tokens per answer")
    context_window: int | None = Field(
        default=None, ge=1, description="override of the models' context window")
    model_name: str | None = Field(default=None, description="name reported in metadata")
    generate_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="SpecGuardConfig overrides applied to every call")

    _engine: Any = PrivateAttr(default=None)
    _load_lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, engine: SpecGuardEngine | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._engine = engine
        if engine is None and not (self.draft and self.target):
            raise ValueError("SpecGuardLLM needs engine=SpecGuardEngine(...) or draft= and target=")
        SpecGuardConfig.model_validate(self._defaults())  # bad option names or values fail here

    @classmethod
    def class_name(cls) -> str:
        return "SpecGuardLLM"

    @property
    def engine(self) -> SpecGuardEngine:
        """The engine; loaded on first use when only model names were given (thread-safe)."""
        if self._engine is None:
            with self._load_lock:
                if self._engine is None:
                    from specguard_core.engine import SpecGuardEngine

                    self._engine = SpecGuardEngine.from_pretrained(
                        str(self.draft), str(self.target), device=self.device, dtype=self.dtype,
                        preset=self.preset)
        return self._engine

    @property
    def metadata(self) -> LLMMetadata:
        engine = self.engine
        return LLMMetadata(
            context_window=self.context_window or engine.context_window or DEFAULT_CONTEXT_WINDOW,
            num_output=engine.config.merged(**self._defaults()).max_new_tokens,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self.model_name or engine.model_name,
        )

    def to_payload(self) -> dict[str, Any]:
        """Callback payload; does not load the models just to log a call."""
        if self._engine is None:
            return {"class_name": self.class_name(), "draft": self.draft, "target": self.target,
                    "model_name": self.model_name or f"specguard:{self.draft}+{self.target}"}
        return super().to_payload()

    # ---- requests --------------------------------------------------------------------------
    def _defaults(self) -> dict[str, Any]:
        out = dict(self.generate_kwargs)
        if self.max_new_tokens is not None:
            out["max_new_tokens"] = self.max_new_tokens
        return out

    def _request(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
                 ) -> dict[str, Any]:
        """Keyword arguments for `engine.stream`."""
        options = {k: v for k, v in kwargs.items() if v is not None}
        tools = options.pop("tools", None)
        tool_choice = options.pop("tool_choice", "auto")
        unknown = sorted(set(options) - set(SpecGuardConfig.model_fields))
        if unknown:
            raise ValueError(f"SpecGuardLLM got unknown option(s) {unknown}; per-call options are "
                             "tools, tool_choice and SpecGuardConfig fields (k, temperature, "
                             "max_new_tokens, stop, seed, ...)")
        return {"messages_or_prompt": to_engine_messages(messages), "tools": tools,
                "tool_choice": tool_choice, **self._defaults(), **options}

    def _open(self, request: dict[str, Any]) -> GenerationStream:
        return self.engine.stream(**request)

    def _open_turn(self, request: dict[str, Any]) -> tuple[GenerationStream, _Turn]:
        stream = self._open(request)
        tools = None if request["tool_choice"] == "none" else request["tools"]
        prompt = self.engine.prompt_ids(request["messages_or_prompt"], tools)
        return stream, _Turn(prompt_tokens=len(prompt))

    # ---- chat ------------------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        stream = self._open(self._request(messages, kwargs))
        with stream:
            for _ in stream:
                pass
        return _response(stream.result)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        stream, turn = self._open_turn(self._request(messages, kwargs))
        return _stream_responses(stream, turn)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        request = self._request(messages, kwargs)
        stream = await asyncio.to_thread(self._open, request)
        async with aclosing(_asteps(stream)) as steps:
            async for _ in steps:
                pass
        return _response(stream.result)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any
                           ) -> ChatResponseAsyncGen:
        request = self._request(messages, kwargs)
        stream, turn = await asyncio.to_thread(self._open_turn, request)
        return _astream_responses(stream, turn)

    # ---- complete (LlamaIndex's own chat-to-completion helpers) ----------------------------
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        return chat_to_completion_decorator(self.chat)(prompt, **kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        return stream_chat_to_completion_decorator(self.stream_chat)(prompt, **kwargs)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponse:
        return await achat_to_completion_decorator(self.achat)(prompt, **kwargs)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> CompletionResponseAsyncGen:
        return await astream_chat_to_completion_decorator(self.astream_chat)(prompt, **kwargs)

    # ---- tools -----------------------------------------------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """`chat` arguments: messages, OpenAI tool dicts and the engine's tool choice."""
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
        if user_msg is not None:
            messages.append(user_msg)
        specs = [t.metadata.to_openai_tool(skip_length_check=True) for t in tools]
        if tool_choice is None:
            tool_choice = "required" if tool_required else "auto"
        return {"messages": messages, "tools": specs or None, "tool_choice": tool_choice,
                **kwargs}

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """Keep only the first tool call unless parallel calls are allowed."""
        message = response.message
        calls = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
        if not allow_parallel_tool_calls and len(calls) > 1:
            message.blocks = [b for b in message.blocks if not isinstance(b, ToolCallBlock)]
            message.blocks.append(calls[0])
            legacy = message.additional_kwargs.get("tool_calls")
            if legacy:
                message.additional_kwargs["tool_calls"] = legacy[:1]
        return response

    def get_tool_calls_from_response(
        self,
        response: ChatResponse,
        error_on_no_tool_call: bool = True,
        **kwargs: Any,
    ) -> list[ToolSelection]:
        calls = tool_selections(response.message)
        if not calls and error_on_no_tool_call:
            raise ValueError("expected at least one tool call in the response, but it has none")
        return calls
