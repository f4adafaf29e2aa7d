"""The pair an adapter loads is shared: models built from the same loader options (draft, target,
`LoadOptions`, `EngineConfig`), in either adapter, run on one engine loaded once, and a pair no
model uses any more can be freed."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any

import pytest

from specguard_core import EngineConfig, LoadOptions, SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import scripted_engine
from specguard_integrations import ChatSpecGuard, SpecGuardLLM

CFG = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=32)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, LoadOptions]]:
    """Every load of a pair, each a fresh scripted engine that answers "Hi."."""
    seen: list[tuple[str, str, LoadOptions]] = []

    def fake(cls: type, draft: str, target: str, *, load: LoadOptions,
             **kwargs: Any) -> SpecGuardEngine:
        seen.append((draft, target, load))
        time.sleep(0.05)  # let concurrent first uses overlap
        return scripted_engine(lambda p: "Hi.", config=CFG)

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(fake))
    return seen


def test_models_with_the_same_loader_options_load_the_pair_once(
        loads: list[tuple[str, str, LoadOptions]]) -> None:
    first = ChatSpecGuard(draft="org/d", target="org/t", dtype="float32", temperature=0.5)
    second = ChatSpecGuard(draft="org/d", model="org/t", dtype="float32", max_tokens=3)
    llm = SpecGuardLLM(draft="org/d", target="org/t", load_options=LoadOptions(dtype="float32"))
    assert loads == []
    assert first.invoke("Hello").content == second.invoke("Hello").content == "Hi."
    assert llm.complete("Hello").text == "Hi."
    assert len(loads) == 1 and first.engine is second.engine is llm.engine


@pytest.mark.parametrize("other", [
    {"draft": "org/other"}, {"dtype": "bfloat16"}, {"revision": "v2"},
    {"engine_config": EngineConfig(batching=True)}, {"max_memory": {0: "1GiB", "cpu": "2GiB"}},
    {"target_api_key": "sk-other"},
])
def test_other_loader_options_load_another_pair(loads: list[tuple[str, str, LoadOptions]],
                                                other: dict[str, Any]) -> None:
    base = {"draft": "org/d", "target": "org/t", "dtype": "float32", "target_api_key": "sk-1"}
    first = ChatSpecGuard(**base)
    second = ChatSpecGuard(**{**base, **other})
    assert first.engine is not second.engine and len(loads) == 2


def test_concurrent_first_uses_load_once(loads: list[tuple[str, str, LoadOptions]]) -> None:
    models = [SpecGuardLLM(draft="org/d", target="org/t") if i % 2 else
              ChatSpecGuard(draft="org/d", target="org/t") for i in range(6)]
    engines: list[Any] = []
    threads = [threading.Thread(target=lambda m=m: engines.append(m.engine)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and len({id(e) for e in engines}) == 1


def test_a_pair_no_model_uses_is_freed(loads: list[tuple[str, str, LoadOptions]]) -> None:
    model = ChatSpecGuard(draft="org/d", target="org/t")
    freed = weakref.ref(model.engine)
    del model
    gc.collect()
    assert freed() is None  # the registry did not keep it
    ChatSpecGuard(draft="org/d", target="org/t").invoke("Hello")
    assert len(loads) == 2


def test_a_given_engine_is_never_shared_by_name(loads: list[tuple[str, str, LoadOptions]]
                                                ) -> None:
    mine = scripted_engine(lambda p: "Mine.", config=CFG)
    assert ChatSpecGuard(engine=mine, model="org/t", draft="org/d").invoke("Hi").content == "Mine."
    assert ChatSpecGuard(draft="org/d", target="org/t").invoke("Hi").content == "Hi."
    assert len(loads) == 1
