"""`SpecGuardLLM`'s chat bodies: one request checked, the engine stream opened, steps out as
`ChatResponse`s.

`ChatCalls` (an `EngineOwner`) is mixed into `SpecGuardLLM` (`llm`): the per-call
`SpecGuardConfig` and the undecorated `_chat` / `_stream_chat` / `_achat` / `_astream_chat` that
its decorated `chat`, `complete`, ... run. A streamed call is a `Turn` (`convert`) fed step by
step; async bodies take the steps from a worker thread, and closing (or abandoning) a stream stops
the engine at the next step boundary and frees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
)

from specguard_core.config import SpecGuardConfig, override_names
from specguard_core.engine.aio import iterate_in_thread
from specguard_core.text.chat import RawPrompt, check_template_kwargs
from specguard_core.text.logprobs import RunTokens
from specguard_core.types import GenerationResult, StepRecord
from specguard_integrations.common import base_config, knob_overrides, request_config
from specguard_integrations.engines import EngineOwner
from specguard_integrations.fields import KNOBS
from specguard_integrations.llama_index.convert import Turn, chat_response, to_engine_messages

if TYPE_CHECKING:
    from specguard_core.engine.loop import GenerationStream, SpecGuardEngine


def _until(stream: GenerationStream) -> Generator[StepRecord, None, None]:
    """The stream's steps; leaving early closes the stream (the engine stops within one forward
    pass). The engine enforces the timeout (`engine.stream(..., timeout=)`)."""
    with stream:
        yield from stream


def _asteps(stream: GenerationStream) -> AsyncGenerator[StepRecord, None]:
    """The stream's steps from a worker thread; closing the generator stops the engine."""
    return iterate_in_thread(lambda: _until(stream), stream.close, name="specguard-llama-index")


def _stream_responses(stream: GenerationStream, turn: Turn) -> ChatResponseGen:
    steps = _until(stream)
    try:  # leaving early (close, garbage collection) stops the engine
        for step in steps:
            yield turn.add(step)
    finally:
        steps.close()
    if (final := turn.finish(stream.result)) is not None:
        yield final


async def _astream_responses(stream: GenerationStream, turn: Turn) -> ChatResponseAsyncGen:
    async with aclosing(_asteps(stream)) as steps:
        async for step in steps:
            yield turn.add(step)
    if (final := turn.finish(stream.result)) is not None:
        yield final


class ChatCalls(EngineOwner):
    """The per-call configuration and the chat bodies, each call one engine stream."""

    if TYPE_CHECKING:  # fields of SpecGuardLLM
        logprobs: bool
        top_logprobs: int
        timeout: float | None
        chat_template_kwargs: dict[str, Any] | None

    def _config(self, engine: SpecGuardEngine | None, options: dict[str, Any]
                ) -> SpecGuardConfig:
        """The call's SpecGuardConfig: config/preset (else the engine's) < knob fields <
        per-call options (`max_tokens`, `stop` and SpecGuardConfig fields)."""
        unknown = sorted(set(options) - override_names() - {"max_tokens", "top_logprobs"})
        if unknown:
            raise ValueError(f"SpecGuardLLM got unknown option(s) {unknown}; per-call options are "
                             "tools, tool_choice, response_format, chat_template_kwargs, "
                             "max_tokens, stop and SpecGuardConfig fields (k, temperature, "
                             "seed, ...)")
        base = base_config(self.config, self.preset, engine.config if engine else None)
        fields = knob_overrides({n: getattr(self, n) for n in KNOBS})
        return request_config(base, fields, knob_overrides(options))

    def _request(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
                 ) -> dict[str, Any]:
        """Keyword arguments for `engine.stream`."""
        options = {k: v for k, v in kwargs.items() if v is not None}
        logprobs = bool(options.pop("logprobs", self.logprobs))
        top = int(options.pop("top_logprobs", self.top_logprobs)) if logprobs else 0
        formatted = bool(options.pop("formatted", False))  # complete(formatted=True): raw
        tools = options.pop("tools", None)
        tool_choice = options.pop("tool_choice", "auto")
        response_format = options.pop("response_format", None)
        parallel = options.pop("parallel_tool_calls", True)
        template = {**check_template_kwargs(self.chat_template_kwargs),
                    **check_template_kwargs(options.pop("chat_template_kwargs", None))}
        self._config(self._ready_engine(), options)  # bad options fail here, before any loading
        prompt = RawPrompt(str(messages[-1].content or "")) if formatted else \
            to_engine_messages(messages)
        return {"messages_or_prompt": prompt, "tools": tools,
                "tool_choice": tool_choice, "response_format": response_format,
                "parallel_tool_calls": parallel, "top_logprobs": top,
                "rendering": {"chat_template_kwargs": template} if template else {},
                "options": options, "logprobs": logprobs}

    def _open(self, request: dict[str, Any]) -> GenerationStream:
        engine = self.engine
        args = {k: v for k, v in request.items() if k not in ("options", "logprobs", "rendering")}
        return engine.stream(**args, **request["rendering"],
                             config=self._config(engine, request["options"]),
                             timeout=self.timeout)

    def _open_turn(self, request: dict[str, Any]) -> tuple[GenerationStream, Turn]:
        stream = self._open(request)
        tools = None if request["tool_choice"] == "none" else request["tools"]
        prompt = self.engine.prompt_ids(request["messages_or_prompt"], tools,
                                        **request["rendering"])
        raw = isinstance(request["messages_or_prompt"], RawPrompt)
        tokens = RunTokens(self.engine.token_text, answer_only=not raw) if request["logprobs"] \
            else None
        return stream, Turn(prompt_tokens=len(prompt), tokens=tokens, raw=raw)

    # ---- chat: undecorated bodies, so that complete() is one LLM event, not two ------------
    def _chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        request = self._request(messages, kwargs)
        stream = self._open(request)
        for _ in _until(stream):
            pass
        return self._response(stream.result, request)

    def _response(self, result: GenerationResult, request: dict[str, Any]) -> ChatResponse:
        raw = isinstance(request["messages_or_prompt"], RawPrompt)
        if not request["logprobs"]:
            return chat_response(result, raw=raw)
        tokens = RunTokens(self.engine.token_text, answer_only=not raw)
        for step in result.steps:
            tokens.add(step)
        return chat_response(result, tokens.take(len(result.raw_text.encode("utf-8"))), raw=raw)

    def _stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        stream, turn = self._open_turn(self._request(messages, kwargs))
        return _stream_responses(stream, turn)

    async def _achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        request = self._request(messages, kwargs)
        stream = await asyncio.to_thread(self._open, request)
        async with aclosing(_asteps(stream)) as steps:
            async for _ in steps:
                pass
        return self._response(stream.result, request)

    async def _astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any
                            ) -> ChatResponseAsyncGen:
        request = self._request(messages, kwargs)
        stream, turn = await asyncio.to_thread(self._open_turn, request)
        return _astream_responses(stream, turn)
