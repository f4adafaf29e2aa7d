"""LangChain chat model over `SpecGuardEngine` (from a checkout: `pip install -e ".[langchain]"`).

Translation only: LangChain messages, tools and options go in as the engine's OpenAI-style inputs,
the engine's committed steps come out as `AIMessageChunk`s (one per step, with that step's source
and scores in `response_metadata["specguard_steps"]`). All of the algorithm lives in `specguard_core`.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from operator import itemgetter
from typing import Any, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.model_profile import ModelProfile
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
from pydantic import AliasChoices, Field, PrivateAttr, SecretStr, model_validator
from typing_extensions import Self

from specguard_core import EngineConfig, GenerationResult, SpecGuardConfig, SpecGuardEngine
from specguard_core.config import override_names
from specguard_core.engine.aio import iterate_in_thread
from specguard_core.engine.loop import GenerationStream
from specguard_core.models.options import LoadOptions
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_core.text.chat import check_template_kwargs
from specguard_core.text.formats import with_instruction
from specguard_core.types import StepRecord
from specguard_integrations.common import (
    KNOBS,
    base_config,
    check_arguments,
    check_config_choice,
    check_placement,
    knob_overrides,
    load_options,
    load_pair,
    profile,
    request_config,
    served_target,
    tokenizer_refs,
)
from specguard_integrations.langchain_convert import (
    Translator,
    final_chunk,
    final_message,
    format_instruction,
    normalise_tool_choice,
    response_format_for,
    to_engine_message,
)

__all__ = ["ChatSpecGuard", "normalise_tool_choice", "to_engine_message"]

_CALL_KEYS = {"tools", "tool_choice", "response_format", "parallel_tool_calls", "model",
              "max_tokens", "stop", "logprobs", "chat_template_kwargs"}


class _Run:
    """One generation: opens the engine stream, yields translated chunks, always closes it.
    `max_calls=1` (`parallel_tool_calls=False`) keeps only the first tool call."""

    def __init__(self, start: Callable[[], tuple[GenerationStream, tuple[str, ...]]],
                 max_calls: int | None = None,
                 decode: Callable[[StepRecord, int], tuple[str, bytes] | None] | None = None) -> None:
        self._start, self._max_calls, self._decode = start, max_calls, decode
        self.stream: GenerationStream | None = None
        self.result: GenerationResult | None = None

    def chunks(self) -> Generator[ChatGenerationChunk, None, None]:
        stream, stops = self._start()
        self.stream = stream
        translator = Translator(stops, self._max_calls)
        try:
            for step in stream:
                yield ChatGenerationChunk(message=translator.chunk(step))
            self.result = stream.result
            last = final_chunk(stream.result, self._max_calls)
            if self._decode is not None:  # asked for logprobs: ChatOpenAI's metadata shape
                last.response_metadata["logprobs"] = {
                    "content": stream.result.answer_logprobs(self._decode), "refusal": None}
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
        message = final_message(messages, self.result, self._max_calls)
        return ChatResult(generations=[ChatGeneration(message=message)])


def _iterate_in_thread(run: _Run) -> AsyncIterator[ChatGenerationChunk]:
    """The run's chunks, computed in a worker thread so the event loop never blocks; leaving
    early stops the engine at the next step boundary and frees it."""
    return iterate_in_thread(run.chunks, run.cancel, name="specguard-langchain")


# ---- the chat model --------------------------------------------------------------------------
class ChatSpecGuard(BaseChatModel):
    """SpecGuard step-level speculative reasoning as a LangChain chat model.

    Construction is cheap: pass a ready `engine=SpecGuardEngine(...)`, or `draft=` and `model=`
    (the target; `target=` is the same) as model ids, local folders, `.gguf` files or cached
    names; they are loaded on first use (default: the Qwen2.5-Coder 0.5B/1.5B pair). The
    vocabulary is shared with `SpecGuardLLM` (see `specguard_integrations.common`): `config=` or
    `preset=` is the base of every call, then the knob fields, then per-call keywords
    (`model.invoke(x, k=8, tau=0.6)`, any `SpecGuardConfig` field). An unknown argument is an error.

    `timeout` bounds the whole call (the engine stops within one forward pass); `max_retries` is
    accepted for compatibility (local generation has no transient failures to retry), and so is
    `api_key`, which is ignored: the models run in this process and need no key, so code written
    for ChatOpenAI-like models can switch by changing the class. (`base_url` is refused: for a
    `specguard serve` server, use ChatOpenAI(base_url=...) itself.)
    """

    injected_engine: SpecGuardEngine | None = Field(default=None, alias="engine", exclude=True)
    """A ready engine (pass it as `engine=`); when None, `draft` and `model` load on first use."""
    model: str | None = Field(default=None, validation_alias=AliasChoices("model", "target"))
    """The target model (id, folder, `.gguf` or cached name); the engine's name if injected."""
    draft: str | None = None
    config: SpecGuardConfig | None = None
    """Base configuration of every call; `preset` is the alternative (`"paper"`, `"balanced"` or
    `"fast"`); neither: the engine's own config (`balanced` unless it was given another)."""
    preset: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    """Sample from the k most likely tokens only (draft and target); None: the config's (0: all)."""
    min_p: float | None = None
    """Drop tokens below min_p times the top token's probability; None: the config's."""
    repetition_penalty: float | None = None
    """transformers' repetition penalty (> 1 discourages repeats, greedy too); None: the config's."""
    stop: list[str] | None = None
    seed: int | None = None
    timeout: float | None = None
    max_retries: int = 2
    logprobs: bool | None = None
    """Put each answer token's log-probability, under the model that wrote it (the draft for its
    kept tokens, the target for its own; raw, before sampling knobs), in
    `response_metadata["logprobs"]["content"]` (ChatOpenAI's shape; no `top_logprobs`)."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Extra variables for the chat template, as vLLM's `chat_template_kwargs` (e.g. Qwen3's
    `{"enable_thinking": False}`); a call's `chat_template_kwargs=` adds to (and overrides) them."""
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    """Ignored (in-process models need no key); accepted so ChatOpenAI-style code can switch."""
    streaming: bool = False
    k: int | None = None
    tau: float | None = None
    beta: float | None = None
    max_steps: int | None = None
    # loader options (used only when ChatSpecGuard loads the pair itself): all in one
    load_options: LoadOptions | None = Field(default=None, exclude=True)
    """Every loader option as one `LoadOptions` (instead of the separate fields below)."""
    device: str = "auto"
    dtype: str = "auto"
    draft_device: str | None = None
    """Device of the draft only (None: `device`); e.g. "cpu" beside a target on "cuda"."""
    target_device: str | None = None
    draft_dtype: str | None = None
    """dtype of the draft only (None: `dtype`); e.g. "float32" beside a "bfloat16" target."""
    target_dtype: str | None = None
    device_map: Any = None
    max_memory: dict[Any, Any] | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    quantization_config: Any = Field(default=None, exclude=True)
    engine_config: EngineConfig | None = None
    # a target on a vLLM server: model="http://HOST:PORT/v1" (or target=) and the served name
    target_model: str | None = None
    target_tokenizer: str | None = None
    target_timeout: float | None = None
    target_api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    overrides: dict[str, Any] = Field(default_factory=dict, exclude=True)
    """SpecGuardConfig overrides from the deprecated `model_kwargs=`."""

    _loaded: SpecGuardEngine | None = PrivateAttr(default=None)
    _tokenizer: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @model_validator(mode="before")
    @classmethod
    def _arguments(cls, data: Any) -> Any:
        valid = {n for n in cls.model_fields if n not in ("injected_engine", "overrides")}
        data = check_arguments("ChatSpecGuard", data, valid | {"engine", "target"})
        key = "target" if isinstance(data, dict) and "target" in data else "model"
        return served_target("ChatSpecGuard", data, key)

    @model_validator(mode="after")
    def _validate(self) -> Self:
        check_config_choice(self.config, self.preset)
        engine = self.injected_engine
        if engine is None and (self.model is None) != (self.draft is None):
            raise ValueError("pass both model= (or target=) and draft=, or neither for the "
                             "default pair, or a ready engine=")
        self._config(engine, {})  # fail early on bad values
        check_template_kwargs(self.chat_template_kwargs)
        if engine is None:
            check_placement("ChatSpecGuard", self.loading, self.target)
        if engine is not None and self.model is None:
            self.model = engine.model_name
        elif engine is None and self.model is None:
            self.model, self.draft = DEFAULT_TARGET, DEFAULT_DRAFT
        if self.profile is None:
            self.profile = cast(ModelProfile, profile(self.draft or DEFAULT_DRAFT,
                                                      self.model or DEFAULT_TARGET, engine))
        return self

    @property
    def loading(self) -> LoadOptions:
        """The loader options: `load_options`, else the separate loader fields given."""
        return load_options(self, "ChatSpecGuard")

    @property
    def _llm_type(self) -> str:
        return "specguard"

    @property
    def target(self) -> str | None:
        """The target model (the same as `model`)."""
        return self.model

    @property
    def draft_model(self) -> str | None:
        """Deprecated: use `draft`."""
        warnings.warn("ChatSpecGuard.draft_model is deprecated; use .draft", DeprecationWarning,
                      stacklevel=2)
        return self.draft

    @property
    def _identifying_params(self) -> dict[str, Any]:
        knobs = {name: getattr(self, name) for name in KNOBS}
        return {"model": self.model, "draft": self.draft, "preset": self.preset, **knobs,
                "chat_template_kwargs": self.chat_template_kwargs, **self.overrides}

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
    @property
    def engine(self) -> SpecGuardEngine:
        """The injected engine, or the pair loaded on first use (once, thread-safe)."""
        if self.injected_engine is not None:
            return self.injected_engine
        with self._lock:
            if self._loaded is None:
                base = base_config(self.config, self.preset, None)
                self._loaded = load_pair(self.draft or DEFAULT_DRAFT, self.model or DEFAULT_TARGET,
                                         base, self.loading, self.engine_config)
            return self._loaded

    def get_engine(self) -> SpecGuardEngine:
        """Deprecated: use the `engine` property."""
        warnings.warn("ChatSpecGuard.get_engine() is deprecated; use .engine", DeprecationWarning,
                      stacklevel=2)
        return self.engine

    def _local_tokenizer(self) -> Any:
        """The target's tokenizer: the loaded engine's, else read from the local folder without
        loading weights. Never the hub: an uncached pair is a clear error."""
        engine = self.injected_engine or self._loaded
        if engine is not None:
            return engine.tokenizer
        if self._tokenizer is None:
            from specguard_core.models.loading import local_tokenizer

            ref, load = self.model or DEFAULT_TARGET, self.loading
            refs = tokenizer_refs(ref, self.draft or DEFAULT_DRAFT, load.target_tokenizer,
                                  load.target_model)
            for i, name in enumerate(refs):
                try:  # files on disk only: never a request to the hub, not even a lookup
                    self._tokenizer = local_tokenizer(name, revision=load.revision,
                                                      trust_remote_code=load.trust_remote_code)
                    break
                except (OSError, ValueError) as err:
                    if i == len(refs) - 1:
                        raise ValueError(
                            f"ChatSpecGuard counts tokens with the target's own tokenizer, and "
                            f"{name!r} is not available locally (it is never fetched for "
                            "counting). Run `specguard models fetch`, pass a local folder, or "
                            "pass custom_get_token_ids=") from err
        return self._tokenizer

    def get_token_ids(self, text: str) -> list[int]:
        """Token ids from the target's local tokenizer (never the hub)."""
        if self.custom_get_token_ids is not None:
            return self.custom_get_token_ids(text)
        return list(self._local_tokenizer()(text, add_special_tokens=False)["input_ids"])

    def get_num_tokens_from_messages(self, messages: list[BaseMessage],
                                     tools: Sequence[Any] | None = None) -> int:
        """Prompt tokens as the chat template renders the conversation (and tools)."""
        from specguard_core.text.chat import check_tools, normalise_messages, render_prompt

        tokenizer = self._local_tokenizer()
        text = render_prompt(tokenizer, normalise_messages([to_engine_message(m)
                                                            for m in messages]),
                             check_tools([convert_to_openai_tool(t) for t in tools or []]),
                             self.chat_template_kwargs)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    # ---- requests ------------------------------------------------------------------------
    def _config(self, engine: SpecGuardEngine | None, call: dict[str, Any],
                stop: list[str] | None = None) -> SpecGuardConfig:
        """The call's SpecGuardConfig: config/preset (else the engine's) < knob fields <
        per-call keywords (`max_tokens`, `stop` and SpecGuardConfig fields)."""
        unknown = set(call) - override_names() - {"max_tokens"}
        if unknown:
            raise ValueError(f"unknown keyword(s) {sorted(unknown)}; ChatSpecGuard takes "
                             f"{sorted(_CALL_KEYS)} and SpecGuardConfig fields")
        base = base_config(self.config, self.preset, engine.config if engine else None)
        fields = knob_overrides({n: getattr(self, n) for n in KNOBS})
        per_call = knob_overrides({**call, "stop": stop})
        return request_config(base, self.overrides, fields, per_call)

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
        parallel = call.pop("parallel_tool_calls", None)
        requested = call.pop("model", None)
        logprobs = call.pop("logprobs", None)
        logprobs = self.logprobs if logprobs is None else logprobs
        template = {**check_template_kwargs(self.chat_template_kwargs),
                    **check_template_kwargs(call.pop("chat_template_kwargs", None))}
        rendering = {"chat_template_kwargs": template} if template else {}
        self._config(self.injected_engine, call, stop)  # bad keywords fail before any loading
        converted = [to_engine_message(m) for m in messages]
        if response_format:
            converted = with_instruction(converted, format_instruction(response_format))

        def start() -> tuple[GenerationStream, tuple[str, ...]]:
            engine = self.engine
            self._check_model(requested, engine)
            cfg = self._config(engine, call, stop)
            stream = engine.stream(converted, tools=tools, tool_choice=choice,
                                   response_format=response_format, config=cfg,
                                   timeout=self.timeout, **rendering)
            return stream, cfg.stop

        decode = (lambda step, token: self.engine.token_text(step, token)) if logprobs else None
        return _Run(start, max_calls=1 if parallel is False else None, decode=decode)

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

    # ---- tools and structured output -----------------------------------------------------
    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any], *,
                   tool_choice: dict[str, Any] | str | bool | None = None,
                   strict: bool | None = None, parallel_tool_calls: bool | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools (any form `convert_to_openai_tool` takes) and a `tool_choice`: "auto",
        "none", "any"/"required"/True, a tool name, or an OpenAI/Anthropic choice dict.
        `parallel_tool_calls=False` keeps at most one tool call per message (the first)."""
        formatted = [convert_to_openai_tool(t, strict=strict) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = normalise_tool_choice(tool_choice, formatted)
        if parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = parallel_tool_calls
        return super().bind(tools=formatted, **kwargs)

    def with_structured_output(
        self, schema: dict[str, Any] | type | None = None, *,
        method: Literal["function_calling", "json_schema", "json_mode"] = "function_calling",
        include_raw: bool = False, strict: bool | None = None, **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | Any]:
        """Structured output, verified either way: a forced tool call checked against the schema
        (`function_calling`), or a JSON answer (`json_schema` sends the schema, `json_mode` asks
        for any JSON object) whose every draft step is checked against the response format; a
        draft step that breaks it is rewritten by the target, as a bad tool call is."""
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
