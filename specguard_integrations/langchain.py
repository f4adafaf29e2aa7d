"""LangChain chat model over `SpecGuardEngine` (from a checkout: `pip install -e ".[langchain]"`).

Translation only: LangChain messages, tools and options go in as the engine's OpenAI-style inputs,
the engine's committed steps come out as `AIMessageChunk`s (one per step, with that step's source
and scores in `response_metadata["specguard_steps"]`). All of the algorithm lives in `specguard_core`.

`ChatSpecGuard` is its fields and LangChain's public surface; the engine it owns and its token
counts are in `langchain_engine`, one call's run in `langchain_run`, structured output in
`langchain_structured` and the message translation in `langchain_convert`.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.model_profile import ModelProfile
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import AliasChoices, Field, PrivateAttr, SecretStr, model_validator
from typing_extensions import Self

from specguard_core import EngineConfig, SpecGuardConfig, SpecGuardEngine
from specguard_core.models.options import LoadOptions
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_core.text.chat import check_template_kwargs
from specguard_integrations.common import (
    KNOBS,
    check_arguments,
    check_config_choice,
    check_placement,
    profile,
    served_target,
)
from specguard_integrations.langchain_convert import normalise_tool_choice, to_engine_message
from specguard_integrations.langchain_run import Calls
from specguard_integrations.langchain_structured import structured_output

__all__ = ["ChatSpecGuard", "normalise_tool_choice", "to_engine_message"]


# ---- the chat model --------------------------------------------------------------------------
class ChatSpecGuard(Calls, BaseChatModel):
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
        return structured_output(self, schema, method, include_raw, strict)
