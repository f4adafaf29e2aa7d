"""Every field the adapters declare is documented where it is declared, and a knob or loader field
says what its `SpecGuardConfig` / `LoadOptions` field says (the texts cannot drift apart)."""

from __future__ import annotations

import pytest
from langchain_core.language_models import BaseChatModel
from llama_index.core.llms.function_calling import FunctionCallingLLM
from pydantic import BaseModel

from specguard_core import LoadOptions, SpecGuardConfig
from specguard_core.config import default_config
from specguard_integrations import ChatSpecGuard, SpecGuardLLM
from specguard_integrations.fields import KNOBS, LOADER_OPTIONS

ADAPTERS = [(ChatSpecGuard, BaseChatModel), (SpecGuardLLM, FunctionCallingLLM)]


def own_fields(adapter: type[BaseModel], framework: type[BaseModel]) -> list[str]:
    """The fields the adapter declares (not those it inherits from the framework's base)."""
    return [n for n in adapter.model_fields if n not in framework.model_fields]


@pytest.mark.parametrize(("adapter", "framework"), ADAPTERS, ids=lambda c: c.__name__)
def test_every_declared_field_has_a_description(adapter: type[BaseModel],
                                                framework: type[BaseModel]) -> None:
    names = own_fields(adapter, framework)
    assert set(KNOBS) | set(LOADER_OPTIONS) <= set(names)
    undocumented = [n for n in names if not (adapter.model_fields[n].description or "").strip()]
    assert undocumented == []
    multiline = [n for n in names if "\n" in (adapter.model_fields[n].description or "")]
    assert multiline == []


@pytest.mark.parametrize(("adapter", "framework"), ADAPTERS, ids=lambda c: c.__name__)
def test_knob_and_loader_fields_say_what_their_config_field_says(
        adapter: type[BaseModel], framework: type[BaseModel]) -> None:
    balanced = default_config()
    for name in KNOBS:
        field = "max_new_tokens" if name == "max_tokens" else name
        text = adapter.model_fields[name].description or ""
        assert (SpecGuardConfig.model_fields[field].description or "?") in text, name
        shown = getattr(balanced, field)
        assert ("none" if shown == () else repr(shown)) in text.rpartition("None:")[2], name
    for name in LOADER_OPTIONS:
        own = LoadOptions.model_fields[name].description or ""
        assert own and own in (adapter.model_fields[name].description or ""), name


def test_both_adapters_describe_a_shared_field_alike() -> None:
    """A field both adapters declare for the same knob or loader option has one text."""
    shared = (set(own_fields(ChatSpecGuard, BaseChatModel))
              & set(own_fields(SpecGuardLLM, FunctionCallingLLM))) - {"logprobs"}
    assert set(KNOBS) <= shared
    for name in (set(KNOBS) | set(LOADER_OPTIONS) | {"draft", "config", "preset", "timeout",
                                                     "load_options", "engine_config"}):
        assert (ChatSpecGuard.model_fields[name].description
                == SpecGuardLLM.model_fields[name].description), name


def test_target_timeout_states_the_loader_default_it_falls_back_to() -> None:
    default = LoadOptions.model_fields["target_timeout"].default
    for adapter in (ChatSpecGuard, SpecGuardLLM):
        assert adapter.model_fields["target_timeout"].default is None
        assert f"None: {default:g} seconds" in (
            adapter.model_fields["target_timeout"].description or "")
