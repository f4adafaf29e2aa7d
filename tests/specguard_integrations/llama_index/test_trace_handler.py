"""`SpecGuardTraceHandler` keeps the trace of each SpecGuard call seen by LlamaIndex instrumentation."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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


def test_the_old_module_path_still_works_with_a_warning() -> None:
    code = ("import warnings; warnings.simplefilter('error');\n"
            "try:\n import specguard_integrations.llama_index_trace\n"
            "except DeprecationWarning as e: print(e)\n"
            "warnings.simplefilter('ignore')\n"
            "from specguard_integrations.llama_index_trace import SpecGuardTraceHandler as old\n"
            "from specguard_integrations.llama_index.trace_handler import SpecGuardTraceHandler\n"
            "print(old is SpecGuardTraceHandler)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert "moved to specguard_integrations.llama_index.trace_handler" in out.stdout
    assert out.stdout.strip().endswith("True")
