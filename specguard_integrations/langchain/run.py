"""One `ChatSpecGuard` call: its keywords checked, the engine stream opened, steps out as chunks.

`Calls` (an `EngineOwner`, through `TokenCounts`) is mixed into `ChatSpecGuard` (`chat_model`):
the per-call `SpecGuardConfig` and LangChain's `_generate` / `_stream` / `_agenerate` /
`_astream` hooks. Each call is a `Run`, which opens the engine stream only when it is iterated
and always closes it; the async hooks iterate it in a worker thread, so the event loop never
blocks and leaving early stops the engine at the next step boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from specguard_core import GenerationResult, SpecGuardConfig, SpecGuardEngine
from specguard_core.config import override_names
from specguard_core.engine.aio import iterate_in_thread
from specguard_core.engine.loop import GenerationStream
from specguard_core.text.chat import check_template_kwargs
from specguard_core.text.errors import PromptTooLong
from specguard_core.text.formats import with_instruction
from specguard_core.text.logprobs import Decode, answer_logprobs
from specguard_core.types import StepSource
from specguard_integrations.common import base_config, knob_overrides, request_config
from specguard_integrations.fields import KNOBS
from specguard_integrations.langchain.convert import (
    Translator,
    final_chunk,
    final_message,
    format_instruction,
    normalise_tool_choice,
    to_engine_message,
)
from specguard_integrations.langchain.errors import SpecGuardContextOverflowError
from specguard_integrations.langchain.tokens import TokenCounts

# the per-call keywords besides SpecGuardConfig fields (named in the unknown-keyword error)
CALL_KEYS = {"tools", "tool_choice", "response_format", "parallel_tool_calls", "model",
             "max_tokens", "stop", "logprobs", "top_logprobs", "chat_template_kwargs"}


class Run:
    """One generation: opens the engine stream, yields translated chunks, always closes it."""

    def __init__(self, start: Callable[[], tuple[GenerationStream, tuple[str, ...]]],
                 decode: Decode | None = None) -> None:
        self._start, self._decode = start, decode
        self.stream: GenerationStream | None = None
        self.result: GenerationResult | None = None

    def chunks(self) -> Generator[ChatGenerationChunk, None, None]:
        stream, stops = self._start()
        self.stream = stream
        translator = Translator(stops)
        try:
            for step in stream:
                yield ChatGenerationChunk(message=translator.chunk(step))
            self.result = stream.result
            last = final_chunk(stream.result)
            if self._decode is not None:  # asked for logprobs: ChatOpenAI's metadata shape
                last.response_metadata["logprobs"] = {
                    "content": answer_logprobs(stream.result, self._decode), "refusal": None}
            yield ChatGenerationChunk(message=last)
        finally:
            stream.close()

    def cancel(self) -> None:
        """Stop the engine within one forward pass (safe from any thread)."""
        if self.stream is not None:
            self.stream.close()

    def message(self, chunks: list[ChatGenerationChunk]) -> ChatResult:
        assert self.result is not None, "the run has not finished"
        messages = [cast(AIMessageChunk, c.message) for c in chunks]
        message = final_message(messages, self.result)
        return ChatResult(generations=[ChatGeneration(message=message)])


def _iterate_in_thread(run: Run) -> AsyncIterator[ChatGenerationChunk]:
    """The run's chunks, computed in a worker thread so the event loop never blocks; leaving
    early stops the engine at the next step boundary and frees it."""
    return iterate_in_thread(run.chunks, run.cancel, name="specguard-langchain")


class Calls(TokenCounts):
    """The per-call configuration and LangChain's generation hooks, each call one `Run`."""

    if TYPE_CHECKING:  # fields of ChatSpecGuard
        model: str | None
        logprobs: bool | None
        top_logprobs: int | None
        timeout: float | None

    def _config(self, engine: SpecGuardEngine | None, call: dict[str, Any],
                stop: list[str] | None = None) -> SpecGuardConfig:
        """The call's SpecGuardConfig: config/preset (else the engine's) < knob fields <
        per-call keywords (`max_tokens`, `stop` and SpecGuardConfig fields)."""
        unknown = set(call) - override_names() - {"max_tokens"}
        if unknown:
            raise ValueError(f"unknown keyword(s) {sorted(unknown)}; ChatSpecGuard takes "
                             f"{sorted(CALL_KEYS)} and SpecGuardConfig fields")
        base = base_config(self.config, self.preset, engine.config if engine else None)
        fields = knob_overrides({n: getattr(self, n) for n in KNOBS})
        per_call = knob_overrides({**call, "stop": stop})
        return request_config(base, fields, per_call)

    def _check_model(self, requested: str | None, engine: SpecGuardEngine) -> None:
        if requested is not None and requested not in (self.model, engine.model_name):
            raise ValueError(f"ChatSpecGuard serves one draft/target pair ({engine.model_name}); "
                             f"model={requested!r} cannot be switched per call, create another "
                             "ChatSpecGuard for it")

    def _new_run(self, messages: list[BaseMessage], stop: list[str] | None,
                 kwargs: dict[str, Any]) -> Run:
        call = dict(kwargs)
        tools = [convert_to_openai_tool(t) for t in call.pop("tools", None) or []]
        choice = normalise_tool_choice(call.pop("tool_choice", None), tools)
        response_format = call.pop("response_format", None)
        parallel = call.pop("parallel_tool_calls", None)
        requested = call.pop("model", None)
        logprobs = call.pop("logprobs", None)
        logprobs = self.logprobs if logprobs is None else logprobs
        top = call.pop("top_logprobs", None)
        top = (self.top_logprobs if top is None else top) if logprobs else 0
        template = {**check_template_kwargs(self.chat_template_kwargs),
                    **check_template_kwargs(call.pop("chat_template_kwargs", None))}
        rendering: dict[str, Any] = {"chat_template_kwargs": template} if template else {}
        self._config(self._ready_engine(), call, stop)  # bad keywords fail before any loading
        converted = [to_engine_message(m) for m in messages]
        if response_format:
            converted = with_instruction(converted, format_instruction(response_format))

        def start() -> tuple[GenerationStream, tuple[str, ...]]:
            engine = self.engine
            self._check_model(requested, engine)
            cfg = self._config(engine, call, stop)
            try:
                stream = engine.stream(converted, tools=tools, tool_choice=choice,
                                       response_format=response_format, config=cfg,
                                       timeout=self.timeout,
                                       parallel_tool_calls=parallel is not False,
                                       top_logprobs=top or 0, **rendering)
            except PromptTooLong as err:  # LangChain's error for it, so middleware can trim
                raise SpecGuardContextOverflowError.of(err) from None
            return stream, cfg.stop

        def decode(source: StepSource, token: int, eos: bool) -> tuple[str, bytes] | None:
            return self.engine.token_text(source, token, eos)
        return Run(start, decode=decode if logprobs else None)

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        # token callbacks are fired by BaseChatModel for each yielded chunk, not here
        yield from self._new_run(messages, stop, kwargs).chunks()

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        """As ChatOllama does, `invoke` fires `on_llm_new_token` once per committed step."""
        run = self._new_run(messages, stop, kwargs)
        chunks = []
        for chunk in run.chunks():
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            chunks.append(chunk)
        return run.message(chunks)

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        async for chunk in _iterate_in_thread(self._new_run(messages, stop, kwargs)):
            yield chunk

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        run = self._new_run(messages, stop, kwargs)
        chunks = []
        async for chunk in _iterate_in_thread(run):
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            chunks.append(chunk)
        return run.message(chunks)
