"""LlamaIndex adapter: `SpecGuardLLM`, a `FunctionCallingLLM` over a `SpecGuardEngine` (from a
checkout: `pip install -e ".[llamaindex]"`).

Translation only (every algorithmic decision lives in `specguard_core`):

- LlamaIndex `ChatMessage`s become OpenAI-style message dicts (text blocks, `ToolCallBlock`s or the
  legacy `additional_kwargs["tool_calls"]`, `role="tool"` results with their `tool_call_id`);
  tools become OpenAI tool dicts through LlamaIndex's own `to_openai_tool`.
- Each committed `StepRecord` becomes one streamed `ChatResponse`: `delta` (the step's answer
  text), the accumulated message (`ThinkingBlock` for `<think>` reasoning, `TextBlock`,
  `ToolCallBlock`s), `additional_kwargs["thinking_delta"]`, the step's trace in
  `additional_kwargs["specguard_step"]` and the running token usage in `raw["usage"]` (which
  `TokenCountingHandler` reads).
- A finished call carries the whole trace (`GenerationResult.trace()`: steps, stats, usage,
  finish reason, plus the invalid tool calls) in `additional_kwargs["specguard"]`; each streamed
  chunk has its step's `StepRecord.trace()` in `additional_kwargs["specguard_step"]`.
- Tool calls that failed verification from both models are still `ToolCallBlock`s (their raw
  name and arguments), so an agent's own error path runs ("Tool X not found", a tool's argument
  error) and the model can retry. When a stream is exhausted its last chunk is completed in place
  (message, `raw`, trace) so that it equals what `chat()` returns for the same request.

Async methods run the engine in a worker thread and never block the event loop; closing (or
abandoning) a stream stops generation at the next step boundary and frees the engine.

- `llm`: `SpecGuardLLM`, its fields and LlamaIndex's public surface (`chat`, `complete`, their
  stream and async forms, `metadata`); the loader fields it shares with `ChatSpecGuard` are in
  `specguard_integrations.fields`, the vocabulary both adapters read in `specguard_integrations.common`
  and the engine it owns (passed in, or the shared pair loaded on first use) in
  `specguard_integrations.engines`.
- `chat`: the chat bodies and their streams.
- `tools`: the `FunctionCallingLLM` tool hooks.
- `convert`: the pure message translation; `to_engine_messages`, `tool_selections` and `trace`
  are exported here too.
- `trace_handler`: `SpecGuardTraceHandler`, which collects every call's trace from LlamaIndex's
  instrumentation (for query engines and agents, which do not hand the responses back).
"""

from __future__ import annotations

# isort: off
# `llm` first: its imports of LlamaIndex say how to install it when it is missing
from specguard_integrations.llama_index.llm import SpecGuardLLM
from specguard_integrations.llama_index.convert import to_engine_messages, tool_selections, trace
# isort: on

__all__ = ["SpecGuardLLM", "to_engine_messages", "tool_selections", "trace"]
