"""`SpecGuardTraceHandler` keeps the trace of each SpecGuard call seen by LlamaIndex instrumentation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.instrumentation import get_dispatcher

from specguard_integrations.llama_index import SpecGuardLLM
from specguard_integrations.llama_index.trace_handler import SpecGuardTraceHandler
from tests.specguard_integrations.llama_index.helpers import make_engine


@pytest.fixture
def handler() -> Iterator[SpecGuardTraceHandler]:
    handler = SpecGuardTraceHandler()
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    yield handler
    dispatcher.event_handlers.remove(handler)


def test_chat_and_stream_traces_are_kept(handler: SpecGuardTraceHandler) -> None:
    llm = SpecGuardLLM(engine=make_engine())
    hi = [ChatMessage(role="user", content="hi")]
    answer = llm.chat(hi)
    streamed = list(llm.stream_chat(hi))
    assert len(handler.traces) == 2
    first, second = handler.traces
    assert [s["text"] for s in first["steps"]] == [s["text"] for s in second["steps"]]
    assert first["usage"] == answer.raw["usage"] == streamed[-1].raw["usage"]
    assert first["stats"]["steps"] == len(first["steps"]) > 0
    assert SpecGuardTraceHandler().traces == []  # traces are per handler
