"""A prompt over the context window is LangChain's `ContextOverflowError` (and still the
engine's `InputError`): `SummarizationMiddleware` cuts the history it summarises and retries,
`ModelRetryMiddleware` does not retry the same request."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRetryMiddleware, SummarizationMiddleware
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, HumanMessage

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import scripted_engine
from specguard_core.text.errors import InputError
from specguard_integrations.langchain import ChatSpecGuard
from tests.fixtures import record_stream_configs

WINDOW = 160  # tokens of the summarising model's window
CFG = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=16)
OMITTED = "[... middle of conversation omitted ...]"


def small_window(responder: Any, window: int = WINDOW) -> SpecGuardEngine:
    engine = scripted_engine(responder, config=CFG)
    engine.draft.context_window = engine.target.context_window = window
    return engine


def long_text(words: int) -> str:
    return " ".join(f"fact{i}" for i in range(words))


def test_a_prompt_over_the_window_is_both_errors() -> None:
    model = ChatSpecGuard(engine=small_window(lambda p: "Hi."))
    assert model.invoke("Hello").content == "Hi."
    for call in (lambda: model.invoke(long_text(200)), lambda: list(model.stream(long_text(200))),
                 lambda: asyncio.run(model.ainvoke(long_text(200)))):
        with pytest.raises(ContextOverflowError) as overflow:
            call()
        assert isinstance(overflow.value, InputError)
        assert "context window is 160; shorten the conversation" in str(overflow.value)
        assert overflow.value.is_retryable is False


def test_model_retry_middleware_does_not_retry_an_overflow(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    engine = small_window(lambda p: "Hi.")
    calls = record_stream_configs(engine, monkeypatch)
    agent = create_agent(ChatSpecGuard(engine=engine), middleware=[
        ModelRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False)])
    with pytest.raises(ContextOverflowError):
        agent.invoke({"messages": [HumanMessage(long_text(200))]})
    assert len(calls) == 1


def test_summarization_middleware_cuts_the_history_and_retries(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    summariser = small_window(lambda p: "Trimmed summary." if OMITTED in p else "Whole summary.")
    summaries = record_stream_configs(summariser, monkeypatch)
    main = scripted_engine(lambda p: "Final answer.", config=CFG)
    history: list[Any] = []
    for i in range(3):  # a long conversation, more than the summariser's window
        history += [HumanMessage(f"Note {i}: {long_text(40)}"), AIMessage(f"Noted {i}.")]
    summary_model = ChatSpecGuard(engine=summariser)
    agent = create_agent(ChatSpecGuard(engine=main), middleware=[SummarizationMiddleware(
        summary_model, trigger=("messages", 4), keep=("messages", 2),
        token_counter=summary_model.get_num_tokens_from_messages,  # the model's own tokens
        summary_prompt="Summarise:\n{messages}")])
    messages = agent.invoke({"messages": [*history, HumanMessage("And now?")]})["messages"]
    assert len(summaries) == 2  # the whole history overflowed, then the cut one was summarised
    summary = next(m for m in messages if "Trimmed summary." in str(m.content))
    assert isinstance(summary, HumanMessage)
    assert messages[-1].content == "Final answer."
