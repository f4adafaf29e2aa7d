"""`SpecGuardTraceHandler`: collects the SpecGuard step trace of every LlamaIndex LLM call.

`SpecGuardLLM` puts each call's trace in `ChatResponse.additional_kwargs["specguard"]`. Query
engines and agents do not hand those responses back to you; this LlamaIndex instrumentation handler
sees them as `LLMChatEndEvent`s and keeps each trace, with the call's usage, in `.traces`:

    handler = SpecGuardTraceHandler()
    get_dispatcher().add_event_handler(handler)
    ...  # run a query engine or an agent on SpecGuardLLM
    for trace in handler.traces: print(trace["stats"]["acceptance_rate"])
"""

from __future__ import annotations

from typing import Any

from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent


class SpecGuardTraceHandler(BaseEventHandler):
    """Keeps `{**trace, "usage": ...}` for each finished chat call that carries a SpecGuard trace
    (calls on other LLMs are ignored). Streamed calls are kept when their stream ends."""

    traces: list[dict[str, Any]] = []

    @classmethod
    def class_name(cls) -> str:
        return "SpecGuardTraceHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, LLMChatEndEvent) and event.response is not None:
            trace = event.response.additional_kwargs.get("specguard")
            if trace:
                self.traces.append({**trace, "usage": (event.response.raw or {}).get("usage")})
