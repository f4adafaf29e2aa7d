"""`ChatSpecGuard`: SpecGuard as a LangChain chat model, its fields and LangChain's public surface.

The loader fields, declared once for both adapters, are `specguard_integrations.fields.LoaderFields`
and the engine it owns `specguard_integrations.engines.EngineOwner`; its token counts are in
`tokens`, one call's run in `run`, structured output in `structured` and the message translation
in `convert` (all beside this module). LangChain names the class by its public path,
`specguard_integrations.langchain.ChatSpecGuard`, not this module's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.model_profile import ModelProfile
from langchain_core.load.serializable import SerializedNotImplemented
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import AliasChoices, ConfigDict, Field, PrivateAttr, SecretStr, model_validator
from typing_extensions import Self

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_core.text.chat import check_template_kwargs
from specguard_integrations import fields as doc
from specguard_integrations.common import (
    check_arguments,
    check_config_choice,
    profile,
    served_target,
)
from specguard_integrations.engines import Pair, check_placement
from specguard_integrations.fields import LoaderFields
from specguard_integrations.langchain.convert import normalise_tool_choice
from specguard_integrations.langchain.run import Calls
from specguard_integrations.langchain.structured import structured_output

__all__ = ["ChatSpecGuard"]

# where users import `ChatSpecGuard` from: the module LangChain's serialised ids name
PUBLIC_MODULE = "specguard_integrations.langchain"


# ---- the chat model --------------------------------------------------------------------------
class _ChatFields(BaseChatModel):
    """`ChatSpecGuard`'s own fields before its loader fields: pydantic lists a base's fields
    ahead of those of the bases named before it, so this class comes after `LoaderFields` in
    `ChatSpecGuard`'s bases and its signature starts with these (engine, model, draft, knobs)."""

    injected_engine: SpecGuardEngine | None = Field(
        default=None, alias="engine", exclude=True, description="a ready SpecGuardEngine (pass it "
        "as engine=); None: draft and model load on first use")
    model: str | None = Field(default=None, validation_alias=AliasChoices("model", "target"),
                              description=f"{doc.TARGET}; with engine=, the engine's name "
                              "(target= is the same argument)")
    draft: str | None = Field(default=None, description=doc.DRAFT)
    config: SpecGuardConfig | None = Field(default=None, description=doc.CONFIG)
    preset: str | None = Field(default=None, description=doc.PRESET)
    temperature: float | None = Field(default=None, description=doc.knob("temperature",
                                                                         "sampling temperature: "))
    max_tokens: int | None = Field(default=None, description=doc.knob("max_tokens"))
    top_p: float | None = Field(default=None, description=doc.knob("top_p"))
    top_k: int | None = Field(default=None, description=doc.knob("top_k"))
    min_p: float | None = Field(default=None, description=doc.knob("min_p"))
    repetition_penalty: float | None = Field(default=None,
                                             description=doc.knob("repetition_penalty"))
    stop: list[str] | None = Field(default=None, description=doc.knob("stop"))
    seed: int | None = Field(default=None, description=doc.knob("seed"))
    timeout: float | None = Field(default=None, description=doc.TIMEOUT)
    max_retries: int = Field(default=2, description="accepted for ChatOpenAI-style code and "
                             "unused: local generation has no transient failures to retry")
    logprobs: bool | None = Field(
        default=None, description="put each answer token's log-probability (raw, before sampling "
        "knobs; the target's where it wrote or checked the token, the draft's in a step kept "
        "unchecked) in response_metadata['logprobs']['content'] (ChatOpenAI's shape); a call's "
        "logprobs= overrides it; None: off")
    top_logprobs: int | None = Field(
        default=None, ge=0, le=20, description="with logprobs: the most likely tokens at each "
        "position, in each entry's top_logprobs (as ChatOpenAI's); a call's top_logprobs= "
        "overrides it; None: none")
    chat_template_kwargs: dict[str, Any] | None = Field(default=None,
                                                        description=doc.CHAT_TEMPLATE_KWARGS)
    api_key: SecretStr | None = Field(
        default=None, exclude=True, repr=False, description="ignored: the models run in this "
        "process and need no key; accepted so ChatOpenAI-style code can switch")
    streaming: bool = Field(
        default=False, description="LangChain's streaming flag: True runs invoke through the "
        "stream path, an explicit False never does; unset: when a streaming callback asks (the "
        "result and per-step token callbacks are the same either way)")
    k: int | None = Field(default=None, description=doc.knob("k"))
    tau: float | None = Field(default=None, description=doc.knob("tau", "acceptance threshold: "))
    beta: float | None = Field(default=None, description=doc.knob("beta"))
    max_steps: int | None = Field(default=None, description=doc.knob("max_steps"))


class ChatSpecGuard(Calls, LoaderFields, _ChatFields):
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

    # a field's own name is accepted beside its alias (`injected_engine` beside `engine`), as
    # LangChain's `configurable_fields` rebuilds a model from its fields by name
    model_config = ConfigDict(populate_by_name=True)

    _engine: SpecGuardEngine | None = PrivateAttr(default=None)  # the given engine
    _pair: Pair | None = PrivateAttr(default=None)  # else the shared pair, loaded on first use
    _tokenizer: Any = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _arguments(cls, data: Any) -> Any:
        valid = {n for n in cls.model_fields if n != "injected_engine"}
        data = check_arguments("ChatSpecGuard", data, valid | {"engine", "target"},
                               unlisted={"injected_engine"})
        key = "target" if isinstance(data, dict) and "target" in data else "model"
        return served_target("ChatSpecGuard", data, key)

    @model_validator(mode="after")
    def _validate(self) -> Self:
        check_config_choice(self.config, self.preset)
        engine = self._engine = self.injected_engine
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
        self._take_pair()
        if self.profile is None:
            self.profile = cast(ModelProfile, profile(self.draft or DEFAULT_DRAFT,
                                                      self.model or DEFAULT_TARGET, engine))
        return self

    @property
    def _llm_type(self) -> str:
        return "specguard"

    # ---- serialisation: ids name the public path, not the module the class is written in ----
    @classmethod
    def get_lc_namespace(cls) -> list[str]:
        """`["specguard_integrations", "langchain"]` (a subclass: its own module's path), the
        namespace of `lc_id()`."""
        return (PUBLIC_MODULE if cls.__module__ == __name__ else cls.__module__).split(".")

    def to_json_not_implemented(self) -> SerializedNotImplemented:
        """What `dumps()` writes for this (not serialisable) model, with `lc_id()` as its id."""
        out = super().to_json_not_implemented()
        out["id"] = self.lc_id()
        return out

    @property
    def target(self) -> str | None:
        """The target model (the same as `model`)."""
        return self.model

    @property
    def _identifying_params(self) -> dict[str, Any]:
        """What tells two models' answers apart (LangChain's cache keys and traces): the pair,
        the base configuration and the knobs."""
        knobs = {name: getattr(self, name) for name in doc.KNOBS}
        return {"model": self.model, "draft": self.draft, "config": self.config,
                "preset": self.preset, **knobs, "chat_template_kwargs": self.chat_template_kwargs}

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
