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
import threading
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

try:
    from llama_index.core.base.llms.generic_utils import (
        achat_to_completion_decorator,
        astream_chat_to_completion_decorator,
        chat_to_completion_decorator,
        stream_chat_to_completion_decorator,
    )
    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        ChatResponseAsyncGen,
        ChatResponseGen,
        CompletionResponse,
        CompletionResponseAsyncGen,
        CompletionResponseGen,
        LLMMetadata,
        MessageRole,
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
from specguard_core.engine.aio import iterate_in_thread
from specguard_core.types import StepRecord
from specguard_integrations.llama_index_convert import (
    Turn,
    chat_response,
    to_engine_messages,
    tool_selections,
    trace,
)

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

    from specguard_core.engine.loop import GenerationStream, SpecGuardEngine

__all__ = ["SpecGuardLLM", "to_engine_messages", "tool_selections", "trace"]


def _asteps(stream: GenerationStream) -> AsyncGenerator[StepRecord, None]:
    """The stream's steps from a worker thread; closing the generator stops the engine."""
    return iterate_in_thread(lambda: stream, stream.close, name="specguard-llama-index")


def _stream_responses(stream: GenerationStream, turn: Turn) -> ChatResponseGen:
    with stream:  # leaving early (close, garbage collection) stops the engine
        for step in stream:
            yield turn.add(step)
    if (final := turn.finish(stream.result)) is not None:
        yield final


async def _astream_responses(stream: GenerationStream, turn: Turn) -> ChatResponseAsyncGen:
    async with aclosing(_asteps(stream)) as steps:
        async for step in steps:
            yield turn.add(step)
    if (final := turn.finish(stream.result)) is not None:
        yield final


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
                    from specguard_core.engine.loop import SpecGuardEngine

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

    def _open_turn(self, request: dict[str, Any]) -> tuple[GenerationStream, Turn]:
        stream = self._open(request)
        tools = None if request["tool_choice"] == "none" else request["tools"]
        prompt = self.engine.prompt_ids(request["messages_or_prompt"], tools)
        return stream, Turn(prompt_tokens=len(prompt))

    # ---- chat ------------------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        stream = self._open(self._request(messages, kwargs))
        with stream:
            for _ in stream:
                pass
        return chat_response(stream.result)

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
        return chat_response(stream.result)

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
