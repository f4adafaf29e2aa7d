"""LangChain chat model over `SpecGuardEngine` (extra `specguard[langchain]`).

Translation only: LangChain messages, tools and options go in as the engine's OpenAI-style inputs,
the engine's committed steps come out as `AIMessageChunk`s (one per step, with that step's source
and scores in `response_metadata["specguard_steps"]`). All of the algorithm lives in `specguard_core`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from operator import itemgetter
from typing import Any, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.base import OutputParserLike
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import Field, PrivateAttr, model_validator
from typing_extensions import Self

from specguard_core import GenerationResult, SpecGuardConfig, SpecGuardEngine
from specguard_core.config import PRESETS
from specguard_core.engine.aio import iterate_in_thread
from specguard_core.engine.loop import GenerationStream
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET, resolve
from specguard_integrations.langchain_convert import (
    Translator,
    final_chunk,
    final_message,
    format_instruction,
    normalise_tool_choice,
    response_format_for,
    to_engine_message,
    with_instruction,
)

__all__ = ["ChatSpecGuard", "normalise_tool_choice", "to_engine_message"]

_KNOBS = ("temperature", "k", "top_p", "tau", "beta", "seed", "max_steps")
_CALL_KEYS = {"tools", "tool_choice", "response_format", "model", "max_tokens"}


class _Run:
    """One generation: opens the engine stream, yields translated chunks, always closes it."""

    def __init__(self, start: Callable[[], tuple[GenerationStream, tuple[str, ...]]],
                 timeout: float | None) -> None:
        self._start, self._timeout = start, timeout
        self.stream: GenerationStream | None = None
        self.result: GenerationResult | None = None

    def chunks(self) -> Generator[ChatGenerationChunk, None, None]:
        deadline = time.monotonic() + self._timeout if self._timeout else None
        stream, stops = self._start()
        self.stream = stream
        translator = Translator(stops)
        try:
            for step in stream:
                yield ChatGenerationChunk(message=translator.chunk(step))
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"SpecGuard generation exceeded timeout={self._timeout}s")
            self.result = stream.result
            yield ChatGenerationChunk(message=final_chunk(stream.result))
        finally:
            stream.close()

    def cancel(self) -> None:
        """Stop the engine at the next step boundary (safe from any thread)."""
        if self.stream is not None:
            self.stream.close()

    def message(self, chunks: list[ChatGenerationChunk]) -> ChatResult:
        assert self.result is not None, "the run has not finished"
        messages = [cast(AIMessageChunk, c.message) for c in chunks]
        return ChatResult(generations=[ChatGeneration(message=final_message(messages,
                                                                             self.result))])


def _iterate_in_thread(run: _Run) -> AsyncIterator[ChatGenerationChunk]:
    """The run's chunks, computed in a worker thread so the event loop never blocks; leaving
    early stops the engine at the next step boundary and frees it."""
    return iterate_in_thread(run.chunks, run.cancel, name="specguard-langchain")


# ---- the chat model --------------------------------------------------------------------------
class ChatSpecGuard(BaseChatModel):
    """SpecGuard step-level speculative reasoning as a LangChain chat model.

    Construction is cheap: pass a ready `engine=SpecGuardEngine(...)`, or `model=` (target) and
    `draft_model=` as model ids, local folders, `.gguf` files or cached names; they are loaded on
    first use (defaults: the Qwen2.5-Coder 0.5B/1.5B pair). Per-call keywords override any
    `SpecGuardConfig` field (`model.invoke(x, k=8, tau=0.6)`).

    `timeout` is checked between steps; `max_retries` is accepted for compatibility (local
    generation has no transient failures to retry).
    """

    engine: SpecGuardEngine | None = Field(default=None, exclude=True)
    """A ready engine; when None, `draft_model` and `model` are loaded on first use."""
    model: str | None = None
    """The target model (id, folder, `.gguf` or cached name); the engine's name if injected."""
    draft_model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    config: SpecGuardConfig | None = None
    """Base configuration; `preset` is the alternative (`"paper"` or `"fast"`)."""
    preset: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    timeout: float | None = None
    max_retries: int = 2
    streaming: bool = False
    k: int | None = None
    top_p: float | None = None
    tau: float | None = None
    beta: float | None = None
    seed: int | None = None
    max_steps: int | None = None
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Any other `SpecGuardConfig` fields (e.g. `{"fallback": "sample", "selector": ...}`)."""

    _loaded: SpecGuardEngine | None = PrivateAttr(default=None)
    _tokenizer: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @model_validator(mode="after")
    def _validate(self) -> Self:
        if self.config is not None and self.preset is not None:
            raise ValueError("pass either config= or preset=, not both")
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {sorted(PRESETS)}")
        if self.engine is None and (self.model is None) != (self.draft_model is None):
            raise ValueError("pass both model= (target) and draft_model=, or neither for the "
                             "default pair, or a ready engine=")
        SpecGuardConfig().merged(**self._overrides(None, {}))  # fail early on bad values
        if self.engine is not None and self.model is None:
            self.model = self.engine.model_name
        elif self.engine is None and self.model is None:
            self.model, self.draft_model = DEFAULT_TARGET, DEFAULT_DRAFT
        return self

    @property
    def _llm_type(self) -> str:
        return "specguard"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        knobs = {name: getattr(self, name) for name in _KNOBS}
        return {"model": self.model, "draft_model": self.draft_model, "preset": self.preset,
                "max_tokens": self.max_tokens, **knobs, **self.model_kwargs}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(ls_provider="specguard", ls_model_type="chat",
                                 ls_model_name=kwargs.get("model") or self.model or DEFAULT_TARGET)
        temperature = kwargs.get("temperature", self.temperature)
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if temperature is not None:
            params["ls_temperature"] = temperature
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    # ---- engine and tokenizer ------------------------------------------------------------
    def get_engine(self) -> SpecGuardEngine:
        """The injected engine, or the pair loaded on first use (once, thread-safe)."""
        if self.engine is not None:
            return self.engine
        with self._lock:
            if self._loaded is None:
                self._loaded = SpecGuardEngine.from_pretrained(
                    self.draft_model or DEFAULT_DRAFT, self.model or DEFAULT_TARGET,
                    device=self.device, dtype=self.dtype)
            return self._loaded

    def _local_tokenizer(self) -> Any:
        """The target's tokenizer, without loading any weights when no engine is up yet."""
        engine = self.engine or self._loaded
        if engine is not None:
            return engine.tokenizer
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(resolve(self.model or DEFAULT_TARGET))
        return self._tokenizer

    def get_token_ids(self, text: str) -> list[int]:
        """Token ids from the target's local tokenizer (never the hub)."""
        if self.custom_get_token_ids is not None:
            return self.custom_get_token_ids(text)
        return list(self._local_tokenizer()(text, add_special_tokens=False)["input_ids"])

    def get_num_tokens_from_messages(self, messages: list[BaseMessage],
                                     tools: Sequence[Any] | None = None) -> int:
        """Prompt tokens as the chat template renders the conversation (and tools)."""
        from specguard_core.engine.chat import check_tools, normalise_messages, render_prompt

        tokenizer = self._local_tokenizer()
        text = render_prompt(tokenizer, normalise_messages([to_engine_message(m)
                                                            for m in messages]),
                             check_tools([convert_to_openai_tool(t) for t in tools or []]))
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    # ---- requests ------------------------------------------------------------------------
    def _overrides(self, stop: list[str] | None, call: dict[str, Any]) -> dict[str, Any]:
        """SpecGuardConfig overrides for one call: config/preset < fields < call keywords."""
        out: dict[str, Any] = self.config.model_dump() if self.config else {}
        out.update(PRESETS[self.preset] if self.preset else {})
        out.update(self.model_kwargs)
        out.update({n: getattr(self, n) for n in _KNOBS if getattr(self, n) is not None})
        out["max_new_tokens"] = call.pop("max_tokens", None) or self.max_tokens
        stops = stop if stop is not None else self.stop
        if stops is not None:
            out["stop"] = tuple(stops)
        unknown = set(call) - set(SpecGuardConfig.model_fields)
        if unknown:
            raise ValueError(f"unknown keyword(s) {sorted(unknown)}; ChatSpecGuard takes "
                             f"{sorted(_CALL_KEYS)} and SpecGuardConfig fields")
        return {**out, **call}

    def _check_model(self, requested: str | None, engine: SpecGuardEngine) -> None:
        if requested is not None and requested not in (self.model, engine.model_name):
            raise ValueError(f"ChatSpecGuard serves one draft/target pair ({engine.model_name}); "
                             f"model={requested!r} cannot be switched per call, create another "
                             "ChatSpecGuard for it")

    def _new_run(self, messages: list[BaseMessage], stop: list[str] | None,
                 kwargs: dict[str, Any]) -> _Run:
        call = dict(kwargs)
        tools = [convert_to_openai_tool(t) for t in call.pop("tools", None) or []]
        choice = normalise_tool_choice(call.pop("tool_choice", None), tools)
        response_format = call.pop("response_format", None)
        requested = call.pop("model", None)
        overrides = self._overrides(stop, call)
        converted = [to_engine_message(m) for m in messages]
        if response_format:
            converted = with_instruction(converted, format_instruction(response_format))

        def start() -> tuple[GenerationStream, tuple[str, ...]]:
            engine = self.get_engine()
            self._check_model(requested, engine)
            stream = engine.stream(converted, tools=tools, tool_choice=choice, **overrides)
            return stream, engine.config.merged(**overrides).stop

        return _Run(start, self.timeout)

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        # token callbacks are fired by BaseChatModel for each yielded chunk, not here
        yield from self._new_run(messages, stop, kwargs).chunks()

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        run = self._new_run(messages, stop, kwargs)
        return run.message(list(run.chunks()))

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        async for chunk in _iterate_in_thread(self._new_run(messages, stop, kwargs)):
            yield chunk

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        run = self._new_run(messages, stop, kwargs)
        return run.message([c async for c in _iterate_in_thread(run)])

    # ---- tools and structured output -----------------------------------------------------
    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any], *,
                   tool_choice: dict[str, Any] | str | bool | None = None,
                   strict: bool | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (any form `convert_to_openai_tool` takes) and a `tool_choice`: "auto",
        "none", "any"/"required"/True, a tool name, or an OpenAI/Anthropic choice dict."""
        formatted = [convert_to_openai_tool(t, strict=strict) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = normalise_tool_choice(tool_choice, formatted)
        return super().bind(tools=formatted, **kwargs)

    def with_structured_output(
        self, schema: dict[str, Any] | type | None = None, *,
        method: Literal["function_calling", "json_schema", "json_mode"] = "function_calling",
        include_raw: bool = False, strict: bool | None = None, **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | Any]:
        """Structured output by a forced, schema-verified tool call (`function_calling`), or by
        asking for JSON (`json_schema` sends the schema, `json_mode` only asks for JSON) and
        parsing the answer."""
        if kwargs:
            raise ValueError(f"Received unsupported arguments {kwargs}")
        if schema is None and method != "json_mode":
            raise ValueError(f"method={method!r} needs a schema")
        is_model = isinstance(schema, type) and is_basemodel_subclass(schema)
        fmt = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
        llm: Runnable[LanguageModelInput, Any]
        parser: OutputParserLike[Any]
        if method == "function_calling":
            assert schema is not None
            name = convert_to_openai_tool(schema)["function"]["name"]
            llm = self.bind_tools([schema], tool_choice=name, strict=strict,
                                  ls_structured_output_format=fmt)
            parser = (PydanticToolsParser(tools=[schema], first_tool_only=True) if is_model
                      else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True))
        elif method in ("json_schema", "json_mode"):
            llm = self.bind(response_format=response_format_for(schema, method),
                            ls_structured_output_format=fmt)
            parser = (PydanticOutputParser(pydantic_object=schema) if is_model
                      else JsonOutputParser())
        else:
            raise ValueError(f"unknown method {method!r}; use function_calling, json_schema or "
                             "json_mode")
        if not include_raw:
            return llm | parser
        parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser,
                                            parsing_error=lambda _: None)
        fallback = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | parsed.with_fallbacks([fallback],
                                                            exception_key="parsing_error")
