"""`SpecGuardLLM`: SpecGuard as a LlamaIndex `FunctionCallingLLM`, its fields and public surface.

The loader fields, declared once for both adapters, are `specguard_integrations.fields.LoaderFields`
and the engine it owns `specguard_integrations.engines.EngineOwner`; the chat bodies and their
streams are in `chat`, the tool hooks in `tools` and the message translation in `convert` (all
beside this module). `class_name()` stays "SpecGuardLLM", whatever module the class is written
in.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    )
    from llama_index.core.bridge.pydantic import (
        ConfigDict,
        Field,
        PrivateAttr,
        model_validator,
    )
    from llama_index.core.constants import DEFAULT_CONTEXT_WINDOW, DEFAULT_NUM_OUTPUTS
    from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
    from llama_index.core.llms.function_calling import FunctionCallingLLM
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "SpecGuardLLM needs LlamaIndex; from a SpecGuard checkout install it with "
        "`pip install -e \".[llamaindex]\"`"
    ) from err

from specguard_core.config import SpecGuardConfig
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET
from specguard_core.text.chat import check_template_kwargs
from specguard_integrations import fields as doc
from specguard_integrations.common import check_arguments, check_config_choice, served_target
from specguard_integrations.engines import Pair, check_placement
from specguard_integrations.fields import LoaderFields
from specguard_integrations.llama_index.chat import ChatCalls
from specguard_integrations.llama_index.tools import ToolCalls

if TYPE_CHECKING:
    from specguard_core.engine.loop import SpecGuardEngine

__all__ = ["SpecGuardLLM"]


# ---- the LLM -----------------------------------------------------------------------------------
class _LLMFields(FunctionCallingLLM):
    """`SpecGuardLLM`'s own fields before its loader fields: pydantic lists a base's fields ahead
    of those of the bases named before it, so this class comes after `LoaderFields` in
    `SpecGuardLLM`'s bases and its signature starts with these (draft, target, config, knobs)."""

    draft: str | None = Field(default=None, description=doc.DRAFT)
    target: str | None = Field(default=None, description=f"{doc.TARGET}; unused with engine= "
                               "(model= is the same argument)")
    config: SpecGuardConfig | None = Field(default=None, description=doc.CONFIG)
    preset: str | None = Field(default=None, description=doc.PRESET)
    temperature: float | None = Field(default=None, ge=0.0, description=doc.knob(
        "temperature", "sampling temperature: "))
    max_tokens: int | None = Field(default=None, ge=1, description=doc.knob("max_tokens"))
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, description=doc.knob("top_p"))
    top_k: int | None = Field(default=None, ge=-1, description=doc.knob("top_k"))
    min_p: float | None = Field(default=None, ge=0.0, le=1.0, description=doc.knob("min_p"))
    repetition_penalty: float | None = Field(default=None, gt=0.0,
                                             description=doc.knob("repetition_penalty"))
    stop: list[str] | None = Field(default=None, description=doc.knob("stop"))
    seed: int | None = Field(default=None, description=doc.knob("seed"))
    timeout: float | None = Field(default=None, gt=0, description=doc.TIMEOUT)
    k: int | None = Field(default=None, ge=1, description=doc.knob("k"))
    tau: float | None = Field(default=None, description=doc.knob("tau", "acceptance threshold: "))
    beta: float | None = Field(default=None, ge=0.0, le=1.0, description=doc.knob("beta"))
    max_steps: int | None = Field(default=None, ge=1, description=doc.knob("max_steps"))
    logprobs: bool = Field(default=False, description="put each answer token's log-probability "
                           "(the target's where it wrote or checked the token, the draft's in a "
                           "step kept unchecked) in ChatResponse.logprobs, each streamed "
                           "response holding its own tokens'; a call's logprobs= overrides it; "
                           "False: off")
    top_logprobs: int = Field(default=0, ge=0, le=20, description="with logprobs: the most "
                              "likely tokens at each position after the chosen one; a call's "
                              "top_logprobs= overrides it")


class SpecGuardLLM(ToolCalls, ChatCalls, LoaderFields, _LLMFields):
    """SpecGuard (step-level speculative reasoning) as a LlamaIndex function-calling chat LLM.

    Pass a loaded engine (`SpecGuardLLM(engine=engine)`; one engine can back several adapters and
    concurrent callers), or `draft=` and `target=` (`model=` is the target too; neither: the
    default Qwen2.5-Coder 0.5B/1.5B pair) to load the pair lazily on first use (`metadata` does not
    load it). The vocabulary is shared with `ChatSpecGuard` (see
    `specguard_integrations.common`): `config=` or `preset=` is the base of every call (else the
    engine's config), then the knob fields (`temperature`, `max_tokens`, ...), then per-call
    keywords to `chat`/`stream_chat`/... (`max_tokens`, `stop` and any `SpecGuardConfig` field).
    An unknown argument is an error that lists the valid ones.
    """

    model_config = ConfigDict(protected_namespaces=())

    chat_template_kwargs: dict[str, Any] | None = Field(default=None,
                                                        description=doc.CHAT_TEMPLATE_KWARGS)
    context_window: int | None = Field(
        default=None, ge=1, description="the context window metadata reports; None: the loaded "
        "engine's, else the smaller max_position_embeddings of the pair's local config.json files, "
        "else LlamaIndex's default")
    model_name: str | None = Field(default=None, description="the model name metadata reports; "
                                   "None: the loaded engine's, else specguard:DRAFT+TARGET")
    _engine: Any = PrivateAttr(default=None)  # the given engine
    _pair: Pair | None = PrivateAttr(default=None)  # else the shared pair, loaded on first use

    @model_validator(mode="before")
    @classmethod
    def _arguments(cls, data: Any) -> Any:
        if isinstance(data, dict) and "model" in data:
            data = {**data, "target": data.pop("model")}
        data = check_arguments("SpecGuardLLM", data, set(cls.model_fields) | {"engine", "model"})
        return served_target("SpecGuardLLM", data, "target")

    def __init__(self, engine: SpecGuardEngine | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._engine = engine
        if engine is None and bool(self.draft) != bool(self.target):
            raise ValueError("SpecGuardLLM needs both draft= and target= (or model=), neither for "
                             "the default pair, or a ready engine=SpecGuardEngine(...)")
        if engine is None and not self.draft:
            self.draft, self.target = DEFAULT_DRAFT, DEFAULT_TARGET
        check_config_choice(self.config, self.preset)
        self._config(engine, {})  # bad option names or values fail here
        check_template_kwargs(self.chat_template_kwargs)
        if engine is None:
            check_placement("SpecGuardLLM", self.loading, self.target)
        self._take_pair()

    @classmethod
    def class_name(cls) -> str:
        return "SpecGuardLLM"

    @property
    def metadata(self) -> LLMMetadata:
        """What LlamaIndex reads to size prompts (query, chat engines, memory), answered without
        loading the models: the context window is `context_window`, else the loaded engine's,
        else the smaller `max_position_embeddings` in the draft's and target's local config.json
        files, else LlamaIndex's default (3900); the model name is `model_name`, else the loaded
        engine's, else "specguard:DRAFT+TARGET"."""
        window, name = self._pair_facts()
        return LLMMetadata(
            context_window=self.context_window or window or DEFAULT_CONTEXT_WINDOW,
            # no budget (the answer runs until the window is full): LlamaIndex's own default room
            num_output=self._config(self._ready_engine(), {}).max_new_tokens
            or DEFAULT_NUM_OUTPUTS,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self.model_name or name,
        )

    def to_payload(self) -> dict[str, Any]:
        """Callback payload; does not load the models just to log a call."""
        if self._ready_engine() is None:
            return {"class_name": self.class_name(), "draft": self.draft, "target": self.target,
                    "model_name": self.model_name or f"specguard:{self.draft}+{self.target}"}
        return super().to_payload()

    # ---- chat: callbacks around undecorated bodies, so that complete() is one LLM event -------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._chat(messages, **kwargs)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self._stream_chat(messages, **kwargs)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return await self._achat(messages, **kwargs)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any
                           ) -> ChatResponseAsyncGen:
        return await self._astream_chat(messages, **kwargs)

    # ---- complete (LlamaIndex's own chat-to-completion helpers over the bodies); a formatted
    # prompt (formatted=True) is continued as it is, with no chat template ------------------
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        return chat_to_completion_decorator(self._chat)(prompt, formatted=formatted, **kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        return stream_chat_to_completion_decorator(self._stream_chat)(prompt, formatted=formatted, **kwargs)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponse:
        return await achat_to_completion_decorator(self._achat)(prompt, formatted=formatted, **kwargs)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> CompletionResponseAsyncGen:
        return await astream_chat_to_completion_decorator(self._astream_chat)(
            prompt, formatted=formatted, **kwargs)
