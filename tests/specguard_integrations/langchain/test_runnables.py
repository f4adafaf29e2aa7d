"""`ChatSpecGuard` as a LangChain runnable: `configurable_fields` and `configurable_alternatives`
rebuild it per call (on the same pair, never loaded again), and its cache entries tell apart
models that differ only in their config."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.runnables import ConfigurableField

from specguard_core import LoadOptions, SpecGuardConfig, SpecGuardEngine
from specguard_core.config import PRESETS
from specguard_core.testing import scripted_engine
from specguard_integrations import ChatSpecGuard
from tests.fixtures import record_stream_configs
from tests.specguard_integrations.langchain.helpers import make_engine

QUESTION = "What is 3 + 4?"


def test_configurable_fields_reach_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine()
    seen = record_stream_configs(engine, monkeypatch)
    model = ChatSpecGuard(engine=engine).configurable_fields(
        max_tokens=ConfigurableField(id="max_tokens"), preset=ConfigurableField(id="preset"),
        temperature=ConfigurableField(id="temperature"))
    whole = model.invoke(QUESTION)
    short = model.invoke(QUESTION, config={"configurable": {"max_tokens": 4, "preset": "fast",
                                                            "temperature": 0}})
    assert whole.content == "3 + 4 = 7.\n\nThe answer is 7."
    assert short.response_metadata["finish_reason"] == "length"
    assert short.usage_metadata is not None and short.usage_metadata["output_tokens"] == 4
    default, configured = seen
    assert default.max_new_tokens == engine.config.max_new_tokens
    assert (configured.max_new_tokens, configured.fallback, configured.temperature) == (
        4, PRESETS["fast"]["fallback"], 0)
    specs = {spec.id: spec for spec in model.config_specs}
    assert specs["max_tokens"].default is None and "token budget" in str(
        specs["max_tokens"].description)


def test_a_model_rebuilt_per_call_loads_its_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[LoadOptions] = []

    def fake(cls: type, draft: str, target: str, *, load: LoadOptions,
             **kwargs: Any) -> SpecGuardEngine:
        loads.append(load)
        return make_engine()

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(fake))
    model = ChatSpecGuard(draft="org/d", target="org/t", dtype="float32").configurable_fields(
        max_tokens=ConfigurableField(id="max_tokens"), k=ConfigurableField(id="k"))
    answers = [model.invoke(QUESTION, config={"configurable": {"max_tokens": n, "k": 1}})
               for n in (4, 6, 256)]
    assert [a.usage_metadata["output_tokens"] for a in answers[:2]] == [4, 6]  # type: ignore[index]
    assert answers[-1].content == "3 + 4 = 7.\n\nThe answer is 7."
    assert len(loads) == 1 and loads[0].dtype == "float32"
    # loader options given as one LoadOptions (a served target with its key) survive the rebuild
    url = "http://127.0.0.1:9/v1"
    served = ChatSpecGuard(draft="org/d", load_options=LoadOptions(
        target_url=url, target_api_key="sk-1")).configurable_fields(
        max_tokens=ConfigurableField(id="max_tokens"))
    served.invoke(QUESTION, config={"configurable": {"max_tokens": 5}})
    assert len(loads) == 2 and loads[1].target_url == url
    assert loads[1].target_api_key is not None
    assert loads[1].target_api_key.get_secret_value() == "sk-1"


def test_configurable_alternatives_share_the_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []

    def fake(cls: type, draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        loads.append(target)
        return make_engine()

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(fake))
    model = ChatSpecGuard(draft="org/d", target="org/t").configurable_alternatives(
        ConfigurableField(id="setting"), default_key="balanced",
        fast=ChatSpecGuard(draft="org/d", target="org/t", preset="fast", max_tokens=4))
    assert model.invoke(QUESTION).content == "3 + 4 = 7.\n\nThe answer is 7."
    fast = model.invoke(QUESTION, config={"configurable": {"setting": "fast"}})
    assert fast.response_metadata["finish_reason"] == "length"
    assert loads == ["org/t"]


def test_models_differing_only_in_config_do_not_share_cache_entries() -> None:
    engine = scripted_engine(lambda p: "One two three four five six seven eight.",
                             config=SpecGuardConfig(k=1, temperature=0.0))
    cache = InMemoryCache()
    whole = ChatSpecGuard(engine=engine, cache=cache)
    short = ChatSpecGuard(engine=engine, cache=cache,
                          config=SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=3))
    assert whole.invoke("Count").content == "One two three four five six seven eight."
    cut = short.invoke("Count")
    assert cut.response_metadata["finish_reason"] == "length" and len(cut.content) < 20
    assert whole._identifying_params["config"] is None
    assert short._identifying_params["config"].max_new_tokens == 3
