"""The adapters' field vocabulary: the knob and loader field names, field descriptions, and the
loader fields both adapters inherit.

A knob field (`temperature`, `k`, ...) stands for the `SpecGuardConfig` field of the same name
(`max_tokens`: `max_new_tokens`) and a loader field for the `LoadOptions` field of the same name,
so their descriptions are built from those fields' own descriptions (they cannot drift apart),
followed by what the adapter's None means. Fields that `ChatSpecGuard` and `SpecGuardLLM` declare
alike share one text here, and the loader fields, the same in both, are declared here once
(`LoaderFields`, which both adapters inherit).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, SecretStr

from specguard_core.config import DEFAULT_PRESET, PRESETS, EngineConfig, SpecGuardConfig, default_config
from specguard_core.models.options import LoadOptions
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET

KNOBS = ("temperature", "max_tokens", "top_p", "top_k", "min_p", "repetition_penalty", "stop",
         "seed", "k", "tau", "beta", "max_steps")
# what an adapter's None means for a loader field whose `LoadOptions` description does not say
_LOADER_NONE = {
    "draft_device": "device", "target_device": "device", "draft_dtype": "dtype",
    "target_dtype": "dtype", "device_map": "none (device and dtype place each model)",
    "max_memory": "no cap", "revision": "the hub's default branch",
    "quantization_config": "not quantized",
    "target_timeout": f"{LoadOptions.model_fields['target_timeout'].default:g} seconds",
    "target_api_key": "no key",
}


def config_name(knob_name: str) -> str:
    """The `SpecGuardConfig` field an adapter knob stands for."""
    return "max_new_tokens" if knob_name == "max_tokens" else knob_name


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(repr(v) for v in value) or "none"
    return repr(value)


def knob(name: str, lead: str = "") -> str:
    """The description of knob field `name`: `lead`, the `SpecGuardConfig` field's description,
    and that None leaves the base config's value (quoting the default preset's)."""
    field = config_name(name)
    own = SpecGuardConfig.model_fields[field].description
    default = _shown(getattr(default_config(), field))
    return f"{lead}{own}; None: the base config's ({DEFAULT_PRESET} preset: {default})"


def loader(name: str) -> str:
    """The description of loader field `name`: the `LoadOptions` field's description and, where
    that does not say, what None means."""
    own = LoadOptions.model_fields[name].description
    none = _LOADER_NONE.get(name)
    return f"{own}; None: {none}" if none else f"{own}"


DRAFT = ("the draft model that proposes each step: a hub id, cached name (qwen0.5b), local folder "
         f"or .gguf file, loaded on first use; None with no target: {DEFAULT_DRAFT}; unused with "
         "engine=")
TARGET = ("the target model that checks or rewrites draft steps: as draft, or a vLLM server's URL "
          f"http://HOST:PORT/v1 (with target_model); None with no draft: {DEFAULT_TARGET}")
CONFIG = ("the SpecGuardConfig every call starts from (knob fields, then per-call keywords, "
          "override it); None: preset's, else the engine's own config")
PRESET = (f"the named SpecGuardConfig every call starts from instead of config= "
          f"({', '.join(sorted(PRESETS))}); None with no config: the engine's own config "
          f"({DEFAULT_PRESET} unless the engine was given another)")
TIMEOUT = ("seconds for the whole call (the engine stops within one forward pass); None: no limit")
CHAT_TEMPLATE_KWARGS = (
    "extra chat-template variables, as vLLM's chat_template_kwargs (e.g. Qwen3's "
    "{'enable_thinking': False}); a call's chat_template_kwargs= adds to and overrides them; "
    "None: none")
LOAD_OPTIONS = ("every loader option as one LoadOptions, instead of the separate loader fields "
                "(not both; used only when the adapter loads the pair); None: the separate fields")
ENGINE_CONFIG = ("how the loaded pair is wired (EngineConfig, e.g. batching=True); used only when "
                 "the adapter loads the pair; None: EngineConfig()'s defaults")
TARGET_API_KEY = f"{loader('target_api_key')} (never shown in repr or dumps)"


class LoaderFields(BaseModel):
    """The loader fields of both adapters, declared once (used only when the adapter loads the
    pair itself): every loader option in one `load_options`, or apart as the `LoadOptions` fields
    of the same names (`LOADER_OPTIONS`); `engine_config` beside either. Each adapter lists them
    after its own leading fields, kept in a base named after this one:
    `ChatSpecGuard(Calls, LoaderFields, _ChatFields)`."""

    load_options: LoadOptions | None = Field(default=None, exclude=True, description=LOAD_OPTIONS)
    device: str = Field(default="auto", description=loader("device"))
    dtype: str = Field(default="auto", description=loader("dtype"))
    draft_device: str | None = Field(default=None, description=loader("draft_device"))
    target_device: str | None = Field(default=None, description=loader("target_device"))
    draft_dtype: str | None = Field(default=None, description=loader("draft_dtype"))
    target_dtype: str | None = Field(default=None, description=loader("target_dtype"))
    device_map: Any = Field(default=None, description=loader("device_map"))
    max_memory: dict[Any, Any] | None = Field(default=None, description=loader("max_memory"))
    revision: str | None = Field(default=None, description=loader("revision"))
    trust_remote_code: bool = Field(default=False, description=loader("trust_remote_code"))
    quantization_config: Any = Field(default=None, exclude=True,
                                     description=loader("quantization_config"))
    engine_config: EngineConfig | None = Field(default=None, description=ENGINE_CONFIG)
    target_model: str | None = Field(default=None, description=loader("target_model"))
    target_tokenizer: str | None = Field(default=None, description=loader("target_tokenizer"))
    target_timeout: float | None = Field(default=None, gt=0,
                                         description=loader("target_timeout"))
    target_api_key: SecretStr | None = Field(default=None, exclude=True, repr=False,
                                             description=TARGET_API_KEY)


# the separate loader fields: `LoadOptions` fields, an alternative to `load_options=`
LOADER_OPTIONS = tuple(n for n in LoaderFields.model_fields if n in LoadOptions.model_fields)
